"""Registry credentials the way the container tools keep them, and the distribution API's auth challenge.

Credentials are read, never written, from the first of these files that has an entry for the registry
(the order podman, skopeo and buildah use, then docker's):

1. ``$REGISTRY_AUTH_FILE``
2. ``${XDG_RUNTIME_DIR}/containers/auth.json``
3. ``~/.config/containers/auth.json``
4. ``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``

Each is ``{"auths": {"<host>[/<namespace>]": {"auth": base64("user:password")}}}``; a key with a
namespace (containers' auth.json) applies to the repositories under it, the longest match wins, and docker's
``https://<host>/v1/``-style keys are matched by host. An entry may hold an OAuth2 ``identitytoken`` (what
``docker login`` keeps for registries that issue one): it is exchanged for a Bearer token at the registry's
token realm (``grant_type=refresh_token``), never sent as Basic auth.

Credential helpers, docker's way: ``credHelpers`` (``{"<host>": "NAME"}``) first, then ``credsStore``
(``"NAME"``), then ``auths``. ``docker-credential-NAME get`` runs from PATH (NAME a plain word, never a path;
no shell) with the registry host on stdin, 30 s at most; its answer is read up to 64 KiB and parsed into a
typed record (``ServerURL``, ``Username``, ``Secret``, each bounded). ``Username`` ``<token>`` means the secret
is an identity token. A helper that says it has no credentials gives none; any other failure is one line
naming the helper and the file.

The challenge (``WWW-Authenticate``) of a 401 answer is ``Basic realm=...`` (htpasswd) or
``Bearer realm=...,service=...,scope=...`` (token auth: the token is fetched from the realm with the
credentials, if any, as Basic auth). A realm is used only over HTTPS (plain HTTP only on a loopback host) and
only on the registry's own host name or one the user allowed (``PINMATRIX_TOKEN_HOSTS``, host names separated by
spaces or commas): any other realm, a ``file:`` one included, is refused before anything is sent to it.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pinmatrix.errors import PinmatrixError
from pinmatrix.imageref import host_name, is_loopback

TOKEN_HOSTS_ENV = "PINMATRIX_TOKEN_HOSTS"
HELPER_PREFIX = "docker-credential-"
HELPER_TIMEOUT = 30.0  # seconds a credential helper may take
MAX_HELPER_OUTPUT = 64 << 10
IDENTITY_TOKEN_USER = "<token>"  # docker-credential-helpers: the secret is an identity token
_HELPER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_NOT_FOUND = re.compile(r"credentials not found", re.IGNORECASE)


class AuthError(PinmatrixError):
    """Credentials are missing, malformed, or refused."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str
    source: Path  # the file they came from (passed to skopeo/podman as --authfile)
    key: str  # the "auths" key that matched (the registry host, for credentials from a helper)
    identity_token: str | None = None  # an OAuth2 refresh token, exchanged at the token realm
    helper: str | None = None  # the credential helper that gave them, and where it is named

    def basic(self) -> str:
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return f"Basic {token}"

    def __repr__(self) -> str:  # never print the password or the token
        via = f", helper={self.helper!r}" if self.helper else ""
        return f"Credentials(username={self.username!r}, source={str(self.source)!r}, key={self.key!r}{via})"


class _HelperAnswer(BaseModel):
    """What ``docker-credential-NAME get`` prints (docker-credential-helpers' JSON)."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    ServerURL: str = Field(default="", max_length=2048)
    Username: str = Field(default="", max_length=1024)
    Secret: str = Field(min_length=1, max_length=16384)


def _shown(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip().splitlines()
    return re.sub(r"[^\x20-\x7e]", "?", text[0] if text else "no output")[:200]


def _run_bounded(argv: list[str], stdin: bytes, where: str, name: str) -> tuple[int, bytes, bytes, bool]:
    """Run a helper (no shell): (its exit status; its stdout, read to one byte past MAX_HELPER_OUTPUT at most; its
    stderr, up to that bound; whether it was killed at HELPER_TIMEOUT)."""
    timed_out = threading.Event()
    with tempfile.TemporaryFile() as errfile:
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errfile)
        except OSError as err:
            raise AuthError(f"{where} {HELPER_PREFIX}{name}, which cannot run: {err.strerror or err}") from None

        def kill() -> None:
            timed_out.set()
            proc.kill()

        timer = threading.Timer(HELPER_TIMEOUT, kill)
        timer.start()
        try:
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(stdin)
                proc.stdin.close()
            except BrokenPipeError:
                pass
            out = proc.stdout.read(MAX_HELPER_OUTPUT + 1)
            if len(out) > MAX_HELPER_OUTPUT:
                proc.kill()
            proc.stdout.close()
            proc.wait()
        finally:
            timer.cancel()
        errfile.seek(0)
        errout = errfile.read(MAX_HELPER_OUTPUT)
    return proc.returncode, out, errout, timed_out.is_set()


def helper_credentials(name: str, host: str, path: Path, key: str) -> Credentials | None:
    """The credentials ``docker-credential-NAME get`` gives for ``host``, or None when it has none."""
    where = f"{path}: {key} names the credential helper"
    if not _HELPER_NAME.fullmatch(name):
        raise AuthError(f"{where} {name[:80]!r}, which is not a plain name")
    exe = shutil.which(HELPER_PREFIX + name)
    if exe is None:
        raise AuthError(f"{where} {HELPER_PREFIX}{name}, which is not on PATH")
    returncode, out, errout, timed_out = _run_bounded([exe, "get"], host.encode() + b"\n", where, name)
    if timed_out:
        raise AuthError(f"{HELPER_PREFIX}{name} get {host} ({path}): no answer in {HELPER_TIMEOUT:.0f} s")
    if len(out) > MAX_HELPER_OUTPUT:
        raise AuthError(f"{HELPER_PREFIX}{name} get {host} ({path}): more than {MAX_HELPER_OUTPUT} bytes of answer")
    if returncode != 0:
        if _NOT_FOUND.search((out + errout)[:MAX_HELPER_OUTPUT].decode("utf-8", "replace")):
            return None
        raise AuthError(f"{HELPER_PREFIX}{name} get {host} ({path}) failed (exit {returncode}): "
                        f"{_shown(errout or out)}")
    try:
        answer = _HelperAnswer.model_validate_json(out)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(top)"
        raise AuthError(f"{HELPER_PREFIX}{name} get {host} ({path}): {field}: {first['msg']}") from None
    if answer.Username == IDENTITY_TOKEN_USER:
        return Credentials(IDENTITY_TOKEN_USER, "", path, host, identity_token=answer.Secret,
                           helper=f"{HELPER_PREFIX}{name} ({key})")
    if not answer.Username:
        raise AuthError(f"{HELPER_PREFIX}{name} get {host} ({path}): Username: empty")
    return Credentials(answer.Username, answer.Secret, path, host, helper=f"{HELPER_PREFIX}{name} ({key})")


def auth_files(env: dict[str, str] | None = None) -> list[Path]:
    """The credential files looked at, in order (whether they exist or not)."""
    env = dict(os.environ if env is None else env)
    home = Path(env.get("HOME") or Path.home())
    files: list[Path] = []
    if env.get("REGISTRY_AUTH_FILE"):
        files.append(Path(env["REGISTRY_AUTH_FILE"]))
    if env.get("XDG_RUNTIME_DIR"):
        files.append(Path(env["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    files.append(home / ".config" / "containers" / "auth.json")
    docker_dir = Path(env["DOCKER_CONFIG"]) if env.get("DOCKER_CONFIG") else home / ".docker"
    files.append(docker_dir / "config.json")
    return files


def _normalise(key: str) -> str:
    """An ``auths`` key as host[/path]: scheme and docker's ``/v1/`` / ``/v2/`` suffixes dropped."""
    key = re.sub(r"^[a-z]+://", "", key.strip())
    key = re.sub(r"/v[12]/?$", "", key)
    return key.rstrip("/")


def _decode(entry: object, path: Path, key: str) -> tuple[str, str, str | None]:
    """(username, password, identity token) of an ``auths`` entry."""
    if not isinstance(entry, dict):
        raise AuthError(f"{path}: auths[{key!r}] is not an object")
    token = entry.get("identitytoken")
    if token is not None and (not isinstance(token, str) or not re.fullmatch(r"[\x21-\x7e]{1,16384}", token)):
        raise AuthError(f"{path}: auths[{key!r}].identitytoken is not a token")
    if token:
        user = entry.get("username") if isinstance(entry.get("username"), str) else IDENTITY_TOKEN_USER
        return user or IDENTITY_TOKEN_USER, "", token
    if isinstance(entry.get("auth"), str) and entry["auth"]:
        try:
            text = base64.b64decode(entry["auth"], validate=True).decode()
        except (binascii.Error, ValueError, UnicodeDecodeError):
            raise AuthError(f"{path}: auths[{key!r}].auth is not base64 of user:password") from None
        user, sep, password = text.partition(":")
        if not sep or not user:
            raise AuthError(f"{path}: auths[{key!r}].auth is not base64 of user:password")
        return user, password, None
    if isinstance(entry.get("username"), str) and isinstance(entry.get("password"), str):
        return entry["username"], entry["password"], None
    raise AuthError(f"{path}: auths[{key!r}] has no 'auth' (base64 of user:password) or 'identitytoken'")


def _helper_for(doc: dict[str, Any], host: str, path: Path) -> tuple[str, str] | None:
    """(the helper's name, where it was named) for ``host``: ``credHelpers`` first, then ``credsStore``."""
    helpers = doc.get("credHelpers")
    if helpers is not None:
        if not isinstance(helpers, dict) or not all(isinstance(v, str) for v in helpers.values()):
            raise AuthError(f"{path}: credHelpers is not an object of helper names")
        for key, name in helpers.items():
            if _normalise(str(key)) == host:
                return name, f"credHelpers[{key!r}]"
    store = doc.get("credsStore")
    if store is not None and not isinstance(store, str):
        raise AuthError(f"{path}: credsStore is not a helper name")
    return (store, "credsStore") if store else None


def find_credentials(host: str, repository: str = "", env: dict[str, str] | None = None) -> Credentials | None:
    """The credentials for ``host`` (and ``repository``, for namespaced keys), or None when no file has any."""
    wanted = f"{host}/{repository}".rstrip("/")
    for path in auth_files(env):
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        except OSError as err:
            raise AuthError(f"{path}: cannot read: {err.strerror or err}") from None
        if not text.strip():
            continue
        try:
            doc = json.loads(text)
        except ValueError as err:
            raise AuthError(f"{path}: not valid JSON: {err}") from None
        if not isinstance(doc, dict):
            continue
        helper = _helper_for(doc, host, path)
        if helper is not None:
            found = helper_credentials(helper[0], host, path, helper[1])
            if found is not None:
                return found
        auths = doc.get("auths")
        if not isinstance(auths, dict):
            continue
        best: tuple[int, str] | None = None
        for key in auths:
            norm = _normalise(key)
            if norm == host or (norm.startswith(host + "/") and (wanted == norm or wanted.startswith(norm + "/"))):
                if best is None or len(norm) > best[0]:
                    best = (len(norm), key)
        if best is not None:
            user, password, token = _decode(auths[best[1]], path, best[1])
            return Credentials(user, password, path, best[1], identity_token=token)
    return None


@dataclass(frozen=True)
class Challenge:
    scheme: str  # "basic" or "bearer"
    params: dict[str, str]

    @property
    def scopes(self) -> list[str]:
        return [s for s in self.params.get("scope", "").split(" ") if s]


_PARAM = re.compile(r'([A-Za-z][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))')


def parse_challenge(header: str) -> Challenge | None:
    """``Bearer realm="https://auth/token",service="registry",scope="repository:a:pull"`` -> Challenge."""
    header = header.strip()
    scheme, _, rest = header.partition(" ")
    if scheme.lower() not in ("basic", "bearer"):
        return None
    params = {m.group(1).lower(): (m.group(2) if m.group(2) is not None else m.group(3) or "").replace('\\"', '"')
              for m in _PARAM.finditer(rest)}
    return Challenge(scheme.lower(), params)


def token_hosts(env: dict[str, str] | None = None) -> tuple[str, ...]:
    """The token-service host names the user allowed besides the registry's own (``PINMATRIX_TOKEN_HOSTS``)."""
    text = (os.environ if env is None else env).get(TOKEN_HOSTS_ENV, "")
    return tuple(h.lower() for h in re.split(r"[\s,]+", text) if h)


def check_realm(realm: str, registry_host: str, allowed: tuple[str, ...] = ()) -> str:
    """``realm`` as it may be asked for a token, or AuthError: https (http only on a loopback host), a host
    name that is the registry's own or one of ``allowed``, no user info."""
    try:
        parts = urllib.parse.urlsplit(realm)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        raise AuthError(f"registry {registry_host}: token realm {realm[:120]!r} is not a URL") from None
    name = (parts.hostname or "").lower()
    if parts.scheme not in ("https", "http") or not name:
        raise AuthError(f"registry {registry_host}: token realm {realm[:120]!r} is not an https URL; refused")
    if parts.scheme == "http" and not is_loopback(name):
        raise AuthError(f"registry {registry_host}: token realm {realm[:120]!r} is plain http on another machine; "
                        "credentials go only over https")
    if parts.username is not None or parts.password is not None:
        raise AuthError(f"registry {registry_host}: token realm {realm[:120]!r} carries user info; refused")
    own = host_name(registry_host).lower()
    if name != own and name not in allowed:
        raise AuthError(f"registry {registry_host}: token realm {realm[:120]!r} is on host {name}, not the "
                        f"registry's; allow it with {TOKEN_HOSTS_ENV}={name} if it is the registry's token service")
    return realm


@contextmanager
def engine_auth_env(engine: str, creds: Credentials | None) -> Iterator[dict[str, str]]:
    """Environment that hands ``creds`` to a container engine through its own auth file, never on a command
    line: podman/skopeo/buildah read ``REGISTRY_AUTH_FILE`` (the file the credentials came from: both formats
    are the same JSON); docker reads ``$DOCKER_CONFIG/config.json``, so credentials from a containers
    auth.json are written, alone, to a private temporary one (mode 0600) that is removed afterwards."""
    if creds is None:
        yield {}
        return
    if engine != "docker":
        yield {"REGISTRY_AUTH_FILE": str(creds.source)}
        return
    if creds.source.name == "config.json":
        yield {"DOCKER_CONFIG": str(creds.source.parent)}
        return
    with tempfile.TemporaryDirectory(prefix="pinmatrix-docker-config-") as tmp:
        path = Path(tmp) / "config.json"
        auth = base64.b64encode(f"{creds.username}:{creds.password}".encode()).decode()
        entry = {"auth": auth} if creds.identity_token is None else {"identitytoken": creds.identity_token}
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump({"auths": {creds.key: entry}}, handle)
        yield {"DOCKER_CONFIG": tmp}
