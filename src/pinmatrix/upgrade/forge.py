"""What the forge says of an upstream pull request or issue, read as data from outside: a GitHub-REST-shaped
client (``GET {base}/repos/{owner}/{repo}/pulls/{n}`` and ``.../issues/{n}``), each answer time-limited, bounded
in bytes and parsed into ``ForgeAnswer`` (odd extra fields ignored, a wrong type refused in one line naming the
reference); a redirect to another host is refused. A token (``GITHUB_TOKEN``) is sent to the base URL only, never
on a redirect, never in a line. Each answer is cached with the date it was read (``FORGE_DIR``); an offline run,
or one whose forge does not answer, uses that cache and says how old it is."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pinmatrix.atomic import atomic_write_text
from pinmatrix.errors import PinmatrixError
from pinmatrix.paths import CACHE_DIR

DEFAULT_FORGE = "https://api.github.com"
TOKEN_ENV = "GITHUB_TOKEN"
FORGE_DIR = CACHE_DIR / "forge"
MAX_ANSWER = 1 << 20  # a pull request's JSON is a few tens of kB
DEFAULT_TIMEOUT = 20.0
_REF = re.compile(r"https://github\.com/([A-Za-z0-9][A-Za-z0-9-]{0,38})/([A-Za-z0-9._-]{1,100})/(pull|issues)/"
                  r"([1-9][0-9]{0,8})/?")


class ForgeError(PinmatrixError):
    """The forge did not answer, answered too slowly or too much, or answered something other than a PR/issue."""


class UnreachableForge(ForgeError):
    """No answer at all (refused, unresolvable, timed out): a cached answer may stand in."""


@dataclass(frozen=True)
class UpstreamRef:
    owner: str
    repo: str
    kind: Literal["pull", "issues"]
    number: int

    def __str__(self) -> str:
        return f"{self.owner}/{self.repo}#{self.number}" if self.kind == "issues" else \
            f"{self.owner}/{self.repo} PR #{self.number}"

    @property
    def api_path(self) -> str:
        return f"/repos/{self.owner}/{self.repo}/{'pulls' if self.kind == 'pull' else 'issues'}/{self.number}"


def parse_ref(url: str) -> UpstreamRef | None:
    """``https://github.com/OWNER/REPO/pull/N`` (or ``/issues/N``) -> its parts; anything else is None."""
    m = _REF.fullmatch(url.strip())
    if m is None or m.group(2) in (".", ".."):
        return None
    kind: Literal["pull", "issues"] = "pull" if m.group(3) == "pull" else "issues"
    return UpstreamRef(m.group(1), m.group(2), kind, int(m.group(4)))


class ForgeAnswer(BaseModel):
    """The fields of a pull request or issue that pinmatrix reads; every other field is ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    state: Literal["open", "closed"]
    merged: bool | None = None  # pulls only
    merged_at: datetime | None = None
    closed_at: datetime | None = None
    state_reason: Literal["completed", "not_planned", "reopened", "duplicate"] | None = None  # issues
    title: str = Field(max_length=1000)
    html_url: str = Field(max_length=500)


class CachedAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str  # the URL it answered
    fetched_at: datetime
    answer: ForgeAnswer


def parse_answer(body: bytes, ref: UpstreamRef) -> ForgeAnswer:
    """The forge's JSON -> ``ForgeAnswer``, or one line naming ``ref`` and the first bad field."""
    try:
        return ForgeAnswer.model_validate_json(body)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top)"
        raise ForgeError(f"{ref}: the forge's answer is refused: {where}: {first['msg']}") from None


class ForgeCache:
    """Answers under ``root`` (``FORGE_DIR``), one file per URL, named by its hash (never by the reference)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _file(self, key: str) -> Path:
        return self.root / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"

    def get(self, key: str) -> CachedAnswer | None:
        try:
            with self._file(key).open("rb") as f:
                cached = CachedAnswer.model_validate_json(f.read(2 * MAX_ANSWER))
        except (OSError, ValidationError, ValueError):
            return None
        return cached if cached.key == key else None

    def put(self, key: str, answer: ForgeAnswer, fetched_at: datetime) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        entry = CachedAnswer(key=key, fetched_at=fetched_at, answer=answer)
        atomic_write_text(self._file(key), entry.model_dump_json(indent=1) + "\n")


class _SameHostRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is followed only to the base URL's own scheme and host (the token, unredirected, never follows)."""

    def __init__(self, base: str, ref: UpstreamRef) -> None:
        super().__init__()
        self.origin, self.ref = _origin(base), ref

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        target = urllib.parse.urljoin(req.full_url, newurl)
        if _origin(target) != self.origin:
            raise ForgeError(f"{self.ref}: the forge redirected to another host ({_origin(target)[1][:80]}); refused")
        return super().redirect_request(req, fp, code, msg, headers, target)


def _read_within(response: Any, limit: int, deadline: float) -> bytes:
    """At most ``limit`` bytes of ``response``, given up (a timeout) when they keep trickling past ``deadline``."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = response.read1(min(1 << 16, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if time.monotonic() > deadline:
            raise TimeoutError
    return b"".join(chunks)


def _origin(url: str) -> tuple[str, str]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, parts.netloc.lower()


def token_allowed(base: str) -> bool:
    """A token goes over https, or over http to a loopback address only (a local forge)."""
    parts = urllib.parse.urlsplit(base)
    if parts.scheme == "https":
        return True
    try:
        return parts.scheme == "http" and ipaddress.ip_address(parts.hostname or "").is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ForgeClient:
    """GET of one pull request or issue from ``base``; ``token`` is sent to it alone."""

    base: str = DEFAULT_FORGE
    token: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    context: ssl.SSLContext | None = None
    limit: int = MAX_ANSWER

    def __post_init__(self) -> None:
        if urllib.parse.urlsplit(self.base).scheme not in ("http", "https") or not urllib.parse.urlsplit(self.base).netloc:
            raise ForgeError(f"forge URL {self.base[:120]!r}: must be an http(s) URL")

    def url(self, ref: UpstreamRef) -> str:
        return self.base.rstrip("/") + ref.api_path

    def get(self, ref: UpstreamRef) -> ForgeAnswer:
        handlers: list[urllib.request.BaseHandler] = [_SameHostRedirect(self.base, ref)]
        if self.context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=self.context))
        request = urllib.request.Request(self.url(ref), headers={"Accept": "application/vnd.github+json"})
        if self.token and token_allowed(self.base):
            request.add_unredirected_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.build_opener(*handlers).open(request, timeout=self.timeout) as response:
                body = _read_within(response, self.limit + 1, time.monotonic() + self.timeout)
        except urllib.error.HTTPError as err:
            raise ForgeError(f"{ref}: the forge answered HTTP {err.code}") from None
        except (TimeoutError, socket.timeout):
            raise UnreachableForge(f"{ref}: no answer within {self.timeout:g} s") from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise UnreachableForge(f"{ref}: forge not reachable ({str(reason)[:120]})") from None
        if len(body) > self.limit:
            raise ForgeError(f"{ref}: the forge's answer is larger than {self.limit} bytes; refused")
        return parse_answer(body, ref)


@dataclass(frozen=True)
class ForgeState:
    """What is known of one reference: the answer (fresh or cached) and when it was read, and why not, if not."""

    answer: ForgeAnswer | None
    fetched_at: datetime | None
    from_cache: bool
    problem: str = ""  # one line: why there is no fresh answer

    def to_dict(self) -> dict[str, Any]:
        return {"answer": json.loads(self.answer.model_dump_json()) if self.answer else None,
                "fetched_at": self.fetched_at.isoformat() if self.fetched_at else None,
                "from_cache": self.from_cache, "problem": self.problem}


def forge_state(client: ForgeClient, cache: ForgeCache, ref: UpstreamRef, now: datetime, *,
                offline: bool) -> ForgeState:
    """A fresh answer (cached for next time); offline, or when the forge fails, the cached one with its date."""
    key = client.url(ref)
    if not offline:
        try:
            answer = client.get(ref)
        except ForgeError as err:
            problem = str(err).removeprefix(f"{ref}: ")
        else:
            cache.put(key, answer, now)
            return ForgeState(answer, now, from_cache=False)
    else:
        problem = "offline"
    cached = cache.get(key)
    if cached is None:
        return ForgeState(None, None, from_cache=False, problem=problem)
    return ForgeState(cached.answer, cached.fetched_at, from_cache=True, problem=problem)
