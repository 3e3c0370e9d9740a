"""A small client for the OCI distribution (Docker registry v2) HTTP API, for every step that talks to a
registry: the build (blobs pushed ahead, tags checked), smoke runs and pulls (digests resolved), ci, and
promotion, attestation and verification. Copy an image by digest between repositories (cross-repository blob mount, then
the manifest under its digest and tags), push a small artifact, list referrers.

Every manifest fetched by digest is checked against that digest here, so a registry (or a tag moved
between two calls) cannot hand back other content than the digest names; every blob is hashed as it streams.

Authentication follows the registry's 401 challenge: Basic (htpasswd) or Bearer (token auth), with the
credentials ``podman login`` / ``docker login`` keep (``pinmatrix.registry.auth``). The Authorization header is never
sent on to a redirect target. Blobs stream in 1 MiB chunks: an upload, a download, or a cross-repository copy
that the registry does not mount never holds a whole layer in memory. HTTP for loopback hosts, HTTPS elsewhere.
An answer 429 or 500/502/503/504 is asked again (``RETRIES`` times at most), after what ``Retry-After`` says or
0.5, 1, 2, 4 s; a Retry-After beyond ``MAX_RETRY_WAIT`` ends the request with one line instead of waiting.

Every answer read whole is bounded (a manifest at 4 MiB, the size the distribution spec asks registries to
accept; a token answer at 1 MiB) and parsed into a typed document (``_Document``: descriptors with a sha256
digest and a size); an index or a referrers list names at most ``MAX_DESCRIPTORS`` manifests. Anything else is
one line (RegistryError), never a traceback.
"""

from __future__ import annotations

import email.utils
import json
import random
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Annotated, Any, BinaryIO

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from pinmatrix.hashing import sha256_digest
from pinmatrix.imageref import ImageRef, RegistryError, is_digest, tls_verify_for
from pinmatrix.registry.auth import (
    AuthError,
    Credentials,
    auth_files,
    check_realm,
    find_credentials,
    parse_challenge,
    token_hosts,
)
from pinmatrix.registry.blobs import Body, VerifyingReader

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
MANIFEST_TYPES = (OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST)
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)

_REPO_IN_PATH = re.compile(r"^/v2/(.+?)/(?:manifests|blobs|tags|referrers)/")
MAX_MANIFEST = 4 << 20  # a manifest, an index, a referrers list, a tag or catalog page
MAX_TOKEN = 1 << 20  # a token service's answer
MAX_DESCRIPTORS = 1000  # manifests named by one index or referrers list
# Answers worth asking again: too many requests, and the server-side failures that pass (not 501, not 505+).
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
RETRIES = 4  # asked again at most this many times, waiting BACKOFF * 2**n (or what Retry-After says)
BACKOFF = 0.5
MAX_RETRY_WAIT = 30.0  # the longest one wait; a Retry-After beyond it ends the request
# The referrers index (tag schema) is written, read back after a settle time, and merged again when another
# writer's write dropped ours: at most so many times (see RegistryClient._update_referrers_tag).
REFERRERS_ATTEMPTS = 5
REFERRERS_MIN_SETTLE = 0.05
REFERRERS_MAX_SETTLE = 2.0


def retry_delay(header: str | None, attempt: int) -> float | None:
    """Seconds to wait before retry ``attempt`` (0-based): ``Retry-After`` (delay-seconds or an HTTP date) when
    the answer has one, else exponential backoff; None when Retry-After asks for more than ``MAX_RETRY_WAIT``."""
    backoff = min(BACKOFF * float(2 ** attempt), MAX_RETRY_WAIT)
    value = (header or "").strip()
    if not value:
        return backoff
    if value.isascii() and value.isdigit():  # not str.isdigit alone: int() refuses "²", which it takes for a digit
        digits = value.lstrip("0")  # leading zeros do not count: 12 significant digits are far past MAX_RETRY_WAIT
        seconds = float(int(digits[:12] or "0"))
    else:
        try:
            moment = email.utils.parsedate_to_datetime(value[:64])
        except (TypeError, ValueError, IndexError):
            return backoff  # unreadable: as if there were none
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        seconds = max(0.0, (moment - datetime.now(timezone.utc)).total_seconds())
    return None if seconds > MAX_RETRY_WAIT else seconds


class _Descriptor(BaseModel):
    model_config = ConfigDict(extra="allow")

    mediaType: str = ""  # noqa: N815 - the OCI field name
    digest: Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]
    size: int | None = Field(default=None, ge=0)
    artifactType: str | None = None  # noqa: N815
    annotations: dict[str, str] | None = None


class _Document(BaseModel):
    """A manifest or an index as far as pinmatrix reads it; other fields are kept as they are."""

    model_config = ConfigDict(extra="allow")

    mediaType: str | None = None  # noqa: N815
    config: _Descriptor | None = None
    layers: list[_Descriptor] = Field(default_factory=list, max_length=MAX_DESCRIPTORS)
    manifests: list[_Descriptor] = Field(default_factory=list, max_length=MAX_DESCRIPTORS)
    subject: _Descriptor | None = None


def parse_document(body: bytes, where: str) -> dict[str, Any]:
    """``body`` as a manifest/index JSON object whose descriptors are well formed, or one RegistryError line."""
    doc = _json_object(body, where)
    try:
        _Document.model_validate(doc)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "(top)"
        raise RegistryError(f"{where}: {loc}: {first['msg']}") from None
    return doc


def _json_object(body: bytes, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        raise RegistryError(f"{where}: the registry's answer is not JSON") from None
    if not isinstance(doc, dict):
        raise RegistryError(f"{where}: the registry's answer is not a JSON object")
    return doc


def _names(doc: dict[str, Any], key: str, where: str) -> list[str]:
    """A tag list's ``tags`` or the catalog's ``repositories``: a list of strings (null: none), else one line."""
    value = doc.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RegistryError(f"{where}: {key} is not a list of names")
    return list(value)


class _HttpRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are followed to http(s) URLs only (urllib would also follow one to ftp:); the Authorization
    header is added unredirected, so it never travels with one."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        if urllib.parse.urlsplit(newurl).scheme not in ("http", "https"):
            raise RegistryError(f"{req.full_url}: redirected to {newurl[:120]!r}, which is not http(s)")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_HttpRedirect)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a token service's redirect is an error, not followed


@dataclass(frozen=True)
class Manifest:
    body: bytes
    media_type: str
    digest: str

    @property
    def json(self) -> dict[str, Any]:
        return dict(json.loads(self.body))


class Registry:
    """One registry host. ``insecure`` (plain HTTP) defaults to True for loopback hosts only. ``credentials``:
    None = found in the auth files on first use (``pinmatrix.registry.auth``), or given."""

    def __init__(self, host: str, *, insecure: bool | None = None, timeout: float = 60.0,
                 credentials: Credentials | None = None, allowed_token_hosts: tuple[str, ...] | None = None) -> None:
        self.host = host
        self.token_hosts = token_hosts() if allowed_token_hosts is None else allowed_token_hosts
        self.tls_verify = tls_verify_for(host, None if insecure is None else not insecure)
        insecure = not self.tls_verify
        self.base = f"{'http' if insecure else 'https'}://{host}"
        self.timeout = timeout
        self._given = credentials
        self._found: dict[str, Credentials | None] = {}
        self.retries = RETRIES
        self._sleep: Callable[[float], None] = time.sleep
        self._basic = False  # the registry asked for Basic auth: send it with every request
        self._tokens: dict[str, str] = {}  # repository ("" = registry-wide) -> "Bearer <token>"

    @classmethod
    def from_setting(cls, registry: str, *, timeout: float = 60.0) -> Registry:
        """From matrix.registry ("127.0.0.1:5000/pinmatrix": the host is the part before the first '/')."""
        return cls(registry.split("/", 1)[0], timeout=timeout)

    # -- authentication ------------------------------------------------------------------------------
    def credentials(self, repository: str = "") -> Credentials | None:
        """The credentials used for ``repository`` on this registry, if any."""
        if self._given is not None:
            return self._given
        if repository not in self._found:
            self._found[repository] = find_credentials(self.host, repository)
        return self._found[repository]

    def _no_credentials(self) -> AuthError:
        looked = ", ".join(str(p) for p in auth_files())
        return AuthError(f"registry {self.host} requires authentication and no credentials for it were found "
                         f"(looked in {looked}): log in with `podman login {self.host}` or `docker login {self.host}`")

    def _refused(self, creds: Credentials, detail: str = "") -> AuthError:
        whose = "the identity token" if creds.identity_token is not None else f"the credentials of {creds.username!r}"
        return AuthError(f"registry {self.host} refused {whose} from {creds.helper or creds.source}"
                         + (f": {detail}" if detail else ""))

    def _authorization(self, repository: str) -> str | None:
        if repository in self._tokens:
            return self._tokens[repository]
        if self._basic:
            creds = self.credentials(repository)
            return creds.basic() if creds else None
        return None

    def _authenticate(self, header: str | None, repository: str, sent: str | None) -> None:
        """Answer a 401 challenge: remember Basic, or fetch a Bearer token for its scope."""
        challenge = parse_challenge(header or "")
        creds = self.credentials(repository)
        if challenge is None:
            raise RegistryError(f"registry {self.host} answered 401 without a challenge pinmatrix knows "
                                f"({(header or 'none')[:80]})", 401)
        if challenge.scheme == "basic":
            if creds is None:
                raise self._no_credentials()
            if creds.identity_token is not None:
                raise AuthError(f"registry {self.host} asks for Basic auth, and the credentials from "
                                f"{creds.helper or creds.source} are an identity token, which only a token service "
                                "takes: log in with a password")
            if sent and sent.startswith("Basic"):
                raise self._refused(creds)
            self._basic = True
            return
        realm = challenge.params.get("realm")
        if not realm:
            raise RegistryError(f"registry {self.host}: Bearer challenge without a realm", 401)
        check_realm(realm, self.host, self.token_hosts)
        query = [("service", challenge.params["service"])] if "service" in challenge.params else []
        if creds is not None and creds.identity_token is not None:
            # OAuth2 (the distribution token spec): the identity token is a refresh token, POSTed as a form
            form = [("grant_type", "refresh_token"), ("refresh_token", creds.identity_token),
                    ("client_id", "pinmatrix"), *query, ("scope", " ".join(challenge.scopes))]
            req = urllib.request.Request(realm, method="POST", data=urllib.parse.urlencode(form).encode(),
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        else:
            query += [("scope", scope) for scope in challenge.scopes]
            url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(query)
            req = urllib.request.Request(url, method="GET")
            if creds is not None:
                req.add_unredirected_header("Authorization", creds.basic())
        try:
            with urllib.request.build_opener(_NoRedirect).open(req, timeout=self.timeout) as resp:
                body = resp.read(MAX_TOKEN + 1)
        except urllib.error.HTTPError as err:
            err.close()
            if err.code in (401, 403):
                raise (self._refused(creds, f"the token service answered HTTP {err.code}") if creds
                       else self._no_credentials()) from None
            raise RegistryError(f"registry {self.host}: token service {realm} answered HTTP {err.code}",
                                err.code) from None
        except (urllib.error.URLError, OSError) as err:
            raise RegistryError(f"registry {self.host}: token service {realm} unreachable: "
                                f"{getattr(err, 'reason', err)}") from None
        if len(body) > MAX_TOKEN:
            raise RegistryError(f"registry {self.host}: token service {realm} answered more than {MAX_TOKEN} bytes")
        try:
            doc = json.loads(body)
            token = doc.get("token") or doc.get("access_token")
        except (ValueError, AttributeError, RecursionError):
            token = None
        if not isinstance(token, str) or not token or not re.fullmatch(r"[\x21-\x7e]+", token):
            raise RegistryError(f"registry {self.host}: token service {realm} returned no token")
        self._tokens[repository] = f"Bearer {token}"

    # -- plumbing ------------------------------------------------------------------------------------
    def _open(self, method: str, url: str, *, headers: dict[str, str] | None = None, body: Body = None,
              ok: tuple[int, ...] = (200,)) -> Any:
        """Send a request (answering an auth challenge once) and return the open response; the caller
        closes it. A status outside ``ok`` raises RegistryError with the registry's error text."""
        if url.startswith("/"):
            url = self.base + url
        path = urllib.parse.urlsplit(url).path
        m = _REPO_IN_PATH.match(path)
        repository = m.group(1) if m else ""
        answered = False
        attempt = 0  # retries so far (429 and 5xx answers)
        while True:
            data: Any = None
            hdrs = dict(headers or {})
            if isinstance(body, bytes):
                data = body
            elif body is not None:
                data, length = body()
                hdrs["Content-Length"] = str(length)
            req = urllib.request.Request(url, method=method, data=data, headers=hdrs)
            target = urllib.parse.urlsplit(url)
            if target.scheme not in ("http", "https"):
                raise RegistryError(f"registry {self.host}: {url[:120]!r} is not an http(s) URL")
            # credentials only to the registry itself (an upload Location may name another host)
            sent = self._authorization(repository) if url.startswith(self.base + "/") else None
            if sent:
                req.add_unredirected_header("Authorization", sent)
            try:
                resp = _OPENER.open(req, timeout=self.timeout)
                status = resp.status
            except urllib.error.HTTPError as err:
                resp, status = err, err.code
            except (urllib.error.URLError, OSError) as err:
                raise RegistryError(f"registry {self.host} unreachable: {getattr(err, 'reason', err)}") from None
            finally:
                if data is not None and not isinstance(data, bytes):
                    data.close()
            if status == 401 and not answered:
                challenge = resp.headers.get("WWW-Authenticate")
                resp.close()
                self._authenticate(challenge, repository, sent)
                answered = True
                continue
            if status in RETRY_STATUSES and status not in ok and attempt < self.retries:
                wait = retry_delay(resp.headers.get("Retry-After"), attempt)
                resp.close()
                if wait is None:
                    raise RegistryError(f"{method} {url.replace(self.base, self.host)}: HTTP {status}, and the "
                                        f"registry asks to wait more than the {MAX_RETRY_WAIT:.0f} s pinmatrix "
                                        "waits (Retry-After): try again later", status)
                attempt += 1
                self._sleep(wait)
                continue
            if status not in ok:
                raw = resp.read(1 << 16)
                resp.close()
                if status == 401:
                    creds = self.credentials(repository)
                    if creds is None:
                        raise self._no_credentials()
                    raise self._refused(creds, f"HTTP 401 on {method} {path}")
                detail = ""
                try:
                    errors = json.loads(raw).get("errors") or []
                    detail = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors)
                except (ValueError, AttributeError, RecursionError):
                    detail = raw[:200].decode("utf-8", "replace")
                raise RegistryError(f"{method} {url.replace(self.base, self.host)}: HTTP {status} {detail}".rstrip(),
                                    status)
            return resp

    def _request(self, method: str, url: str, *, headers: dict[str, str] | None = None, data: Body = None,
                 ok: tuple[int, ...] = (200,), max_bytes: int = MAX_MANIFEST) -> tuple[int, dict[str, str], bytes]:
        """A request whose answer is small (manifests, lists): (status, lower-cased headers, body). An answer
        longer than ``max_bytes`` is refused: by its Content-Length before it is read, else after that many."""
        resp = self._open(method, url, headers=headers, body=data, ok=ok)
        with resp:
            hdrs = {k.lower(): v for k, v in resp.headers.items()}
            length = hdrs.get("content-length", "")
            where = f"{method} {url.replace(self.base, self.host)}"
            if method == "HEAD":  # its Content-Length is the resource's, and there is no body
                return resp.status if hasattr(resp, "status") else resp.code, hdrs, b""
            if length.isdigit() and int(length) > max_bytes:
                raise RegistryError(f"{where}: the answer is {length} bytes, more than the {max_bytes} allowed")
            body = resp.read(max_bytes + 1)
            if len(body) > max_bytes:
                raise RegistryError(f"{where}: the answer is more than the {max_bytes} bytes allowed")
            return resp.status if hasattr(resp, "status") else resp.code, hdrs, body

    def ping(self) -> bool:
        try:
            self._request("GET", "/v2/")
            return True
        except RegistryError:
            return False

    # -- manifests -----------------------------------------------------------------------------------
    def get_manifest(self, repository: str, reference: str) -> Manifest | None:
        """The manifest at a tag or digest, or None when there is none. By digest, the body is verified."""
        try:
            _, hdrs, body = self._request("GET", f"/v2/{repository}/manifests/{reference}",
                                          headers={"Accept": ", ".join(MANIFEST_TYPES)})
        except RegistryError as err:
            if err.status == 404:
                return None
            raise
        digest = sha256_digest(body)
        if is_digest(reference) and digest != reference:
            raise RegistryError(f"{self.host}/{repository}@{reference}: registry served content with digest {digest}")
        doc = parse_document(body, f"{self.host}/{repository}:{reference}" if not is_digest(reference)
                             else f"{self.host}/{repository}@{reference}")
        media_type = hdrs.get("content-type", "").split(";")[0].strip()
        if media_type not in MANIFEST_TYPES:
            media_type = doc.get("mediaType") or OCI_MANIFEST
        return Manifest(body=body, media_type=media_type, digest=digest)

    def resolve(self, ref: ImageRef) -> str | None:
        """The digest a tag (or digest) currently names, or None when it does not exist."""
        m = self.get_manifest(ref.repository, ref.reference)
        return m.digest if m else None

    def manifest_digest(self, repository: str, reference: str) -> str | None:
        found = self.get_manifest(repository, reference)
        return found.digest if found else None

    def image_config(self, repository: str, reference: str) -> dict[str, Any]:
        """The image configuration (JSON) of one image, read through its manifest."""
        found = self.get_manifest(repository, reference)
        if found is None:
            raise RegistryError(f"registry {self.host}: no image {repository}:{reference}")
        manifest = found.json
        if "config" not in manifest:
            raise RegistryError(f"registry {self.host}: {repository}:{reference} is an index, not one image")
        return _json_object(self.get_blob(repository, manifest["config"]["digest"]),
                            f"{self.host}/{repository}:{reference} config")

    def labels(self, repository: str, reference: str) -> dict[str, str]:
        return _labels(self.image_config(repository, reference))

    def config_labels(self, repository: str, manifest: dict[str, Any]) -> dict[str, str]:
        """The labels in the config of an image whose manifest is at hand (the config is fetched by digest,
        so checked against it)."""
        return _labels(_json_object(self.get_blob(repository, manifest["config"]["digest"]),
                                    f"{self.host}/{repository} config"))

    def repositories(self) -> list[str]:
        """Every repository, following the catalog's pagination (at most 1000 names a page)."""
        names: list[str] = []
        last = ""
        while True:
            query = "/v2/_catalog?n=1000" + (f"&last={urllib.parse.quote(last)}" if last else "")
            _, headers, body = self._request("GET", query)
            page = _names(_json_object(body, f"{self.host}/v2/_catalog"), "repositories", f"{self.host}/v2/_catalog")
            names.extend(page)
            if not page or "next" not in headers.get("link", ""):
                return names
            last = page[-1]

    def put_manifest(self, repository: str, reference: str, manifest: Manifest) -> str:
        _, hdrs, _ = self._request("PUT", f"/v2/{repository}/manifests/{reference}", data=manifest.body,
                                   headers={"Content-Type": manifest.media_type}, ok=(201,))
        served = hdrs.get("docker-content-digest")
        if served and served != manifest.digest:
            raise RegistryError(f"{self.host}/{repository}: stored manifest as {served}, expected {manifest.digest}")
        return manifest.digest

    def tags(self, repository: str) -> list[str]:
        try:
            _, _, body = self._request("GET", f"/v2/{repository}/tags/list")
        except RegistryError as err:
            if err.status == 404:
                return []
            raise
        where = f"{self.host}/{repository} tags"
        return sorted(_names(_json_object(body, where), "tags", where))

    # -- blobs ---------------------------------------------------------------------------------------
    def has_blob(self, repository: str, digest: str) -> bool:
        try:
            self._request("HEAD", f"/v2/{repository}/blobs/{digest}")
            return True
        except RegistryError as err:
            if err.status == 404:
                return False
            raise

    @contextmanager
    def open_blob(self, repository: str, digest: str) -> Iterator[VerifyingReader]:
        """The blob as a stream that checks its digest when read to the end."""
        resp = self._open("GET", f"/v2/{repository}/blobs/{digest}")
        length = resp.headers.get("Content-Length")
        reader = VerifyingReader(resp, digest, f"{self.host}/{repository}", int(length) if length else None)
        try:
            yield reader
        finally:
            reader.close()

    def get_blob(self, repository: str, digest: str, *, max_bytes: int = 64 << 20) -> bytes:
        """A small blob (a config, an attestation), read whole and checked against its digest; one larger
        than ``max_bytes`` is refused rather than read into memory."""
        parts: list[bytes] = []
        with self.open_blob(repository, digest) as reader:
            if reader.length is not None and reader.length > max_bytes:
                raise RegistryError(f"{self.host}/{repository}: blob {digest} is {reader.length} bytes, more than "
                                    f"the {max_bytes} expected here")
            for chunk in iter(reader.read, b""):
                parts.append(chunk)
                if reader.read_bytes > max_bytes:
                    raise RegistryError(f"{self.host}/{repository}: blob {digest} is larger than {max_bytes} bytes")
        return b"".join(parts)

    def _upload(self, repository: str, digest: str, body: Body, *, mount_from: str | None = None) -> bool:
        """Start an upload session (or a cross-repository mount) and finish it with one PUT of ``body``; True when
        the registry mounted the blob instead (nothing sent)."""
        query = (f"?mount={urllib.parse.quote(digest)}&from={urllib.parse.quote(mount_from)}" if mount_from else "")
        status, hdrs, _ = self._request("POST", f"/v2/{repository}/blobs/uploads/{query}", ok=(201, 202))
        if status == 201:
            return True  # mounted
        location = urllib.parse.urljoin(self.base + "/", hdrs["location"])
        sep = "&" if "?" in location else "?"
        self._request("PUT", f"{location}{sep}digest={urllib.parse.quote(digest)}", data=body,
                      headers={"Content-Type": "application/octet-stream"}, ok=(201,))
        return False

    def push_blob(self, repository: str, data: bytes) -> str:
        digest = sha256_digest(data)
        if not self.has_blob(repository, digest):
            self._upload(repository, digest, data)
        return digest

    def push_blob_as(self, repository: str, digest: str, body: Callable[[], tuple[BinaryIO, int]]) -> bool:
        """Upload a blob whose digest is already known (a layout's blob is named by it), without hashing it
        here: the registry checks the bytes against ``digest`` before it keeps them. False when the registry has
        the blob already (nothing sent)."""
        if self.has_blob(repository, digest):
            return False
        self._upload(repository, digest, body)
        return True

    def another(self) -> Registry:
        """The same registry with no state shared with this one (tokens, found credentials): for another thread."""
        return Registry(self.host, insecure=not self.tls_verify, timeout=self.timeout, credentials=self._given,
                        allowed_token_hosts=self.token_hosts)

    def _blob_source(self, repository: str, digest: str) -> Callable[[], tuple[BinaryIO, int]]:
        """A body that streams ``digest`` out of ``repository`` (checked as it goes): for copies."""

        def open_source() -> tuple[BinaryIO, int]:
            resp = self._open("GET", f"/v2/{repository}/blobs/{digest}")
            length = resp.headers.get("Content-Length")
            if length is None:
                resp.close()
                raise RegistryError(f"{self.host}/{repository}: blob {digest} served without a length")
            return VerifyingReader(resp, digest, f"{self.host}/{repository}", int(length)), int(length)  # type: ignore[return-value]

        return open_source

    def mount_blob(self, repository: str, digest: str, from_repository: str) -> str:
        """Make ``digest`` available in ``repository``: a cross-repository mount, or, when the registry
        answers the mount with an upload session instead, a streamed copy (never whole in memory). Says which:
        "present" (there already), "mounted" or "copied"."""
        if self.has_blob(repository, digest):
            return "present"
        mounted = self._upload(repository, digest, self._blob_source(from_repository, digest), mount_from=from_repository)
        return "mounted" if mounted else "copied"

    # -- copy ----------------------------------------------------------------------------------------
    def copy(self, src: ImageRef, dst_repository: str, tags: list[str]) -> str:
        """Copy the image ``src`` names by its digest (required) into ``dst_repository`` within this
        registry, blobs first, then the manifest under its digest, then each tag. Returns the digest."""
        if not src.digest:
            raise RegistryError(f"{src}: copying needs a digest, not a tag")
        manifest = self.get_manifest(src.repository, src.digest)
        if manifest is None:
            raise RegistryError(f"{src}: no such manifest")
        self._copy_manifest(src.repository, dst_repository, manifest)
        for tag in tags:
            self.put_manifest(dst_repository, tag, manifest)
            if self.resolve(ImageRef(self.host, dst_repository, tag)) != manifest.digest:
                raise RegistryError(f"{self.host}/{dst_repository}:{tag} does not name {manifest.digest} after the copy")
        return manifest.digest

    def _copy_manifest(self, src_repo: str, dst_repo: str, manifest: Manifest) -> None:
        doc = manifest.json
        if manifest.media_type in INDEX_TYPES:
            for child in doc.get("manifests", []):
                sub = self.get_manifest(src_repo, child["digest"])
                if sub is None:
                    raise RegistryError(f"{self.host}/{src_repo}: index names missing manifest {child['digest']}")
                self._copy_manifest(src_repo, dst_repo, sub)
        else:
            for desc in [doc.get("config")] + list(doc.get("layers", [])):
                if desc and desc.get("digest"):
                    self.mount_blob(dst_repo, desc["digest"], src_repo)
        self.put_manifest(dst_repo, manifest.digest, manifest)

    # -- referrers -----------------------------------------------------------------------------------
    def supports_referrers_api(self, repository: str, digest: str) -> bool:
        try:
            _, hdrs, _ = self._request("GET", f"/v2/{repository}/referrers/{digest}")
        except RegistryError:
            return False
        return hdrs.get("content-type", "").startswith(OCI_INDEX)

    def referrers(self, repository: str, digest: str, artifact_type: str | None = None) -> list[dict[str, Any]]:
        """Descriptors of the artifacts whose ``subject`` is ``digest``: from the referrers API when the
        registry has it, else from the referrers tag schema (tag ``sha256-<hex>`` holding an index)."""
        docs: list[dict[str, Any]] = []
        if self.supports_referrers_api(repository, digest):
            _, _, body = self._request("GET", f"/v2/{repository}/referrers/{digest}")
            docs = list(parse_document(body, f"{self.host}/{repository} referrers of {digest}")
                        .get("manifests") or [])
        else:
            index = self.get_manifest(repository, referrers_tag(digest))
            if index is not None:
                docs = list(index.json.get("manifests") or [])
        if artifact_type:
            docs = [d for d in docs if d.get("artifactType") == artifact_type]
        return docs

    def push_artifact(self, repository: str, subject: Manifest, *, artifact_type: str, payload: bytes,
                      payload_media_type: str, annotations: dict[str, str] | None = None) -> str:
        """Push an OCI 1.1 artifact manifest whose ``subject`` is ``subject`` and record it as a referrer
        (through the registry's referrers API, or the tag schema fallback for registries without it).
        Returns the artifact manifest's digest."""
        empty = b"{}"
        self.push_blob(repository, empty)
        layer_digest = self.push_blob(repository, payload)
        doc: dict[str, Any] = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": artifact_type,
            "config": {"mediaType": OCI_EMPTY, "digest": sha256_digest(empty), "size": len(empty)},
            "layers": [{"mediaType": payload_media_type, "digest": layer_digest, "size": len(payload)}],
            "subject": {"mediaType": subject.media_type, "digest": subject.digest, "size": len(subject.body)},
        }
        if annotations:
            doc["annotations"] = dict(annotations)
        body = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        artifact = Manifest(body=body, media_type=OCI_MANIFEST, digest=sha256_digest(body))
        self.put_manifest(repository, artifact.digest, artifact)
        if not self.supports_referrers_api(repository, subject.digest):
            self._add_to_referrers_tag(repository, subject.digest, {
                "mediaType": OCI_MANIFEST, "digest": artifact.digest, "size": len(body),
                "artifactType": artifact_type, **({"annotations": dict(annotations)} if annotations else {}),
            })
        return artifact.digest

    def remove_referrers(self, repository: str, subject_digest: str, digests: set[str]) -> set[str]:
        """Take the artifacts ``digests`` off ``subject_digest``'s referrers; returns those still listed. Through
        the tag schema fallback, the index is written again without them (the artifacts stay, unreferenced,
        for the registry's garbage collection); where the registry indexes referrers itself, an artifact goes
        only if the registry deletes its manifest (registries without deletes keep it: returned)."""
        if not digests:
            return set()
        if self.supports_referrers_api(repository, subject_digest):
            kept = set()
            for digest in sorted(digests):
                try:
                    self._request("DELETE", f"/v2/{repository}/manifests/{digest}", ok=(200, 202))
                except RegistryError:
                    kept.add(digest)  # deletes disabled (405) or not allowed: it stays a referrer
            return kept
        self._update_referrers_tag(repository, subject_digest, None, digests)
        return set()

    def _add_to_referrers_tag(self, repository: str, subject_digest: str, descriptor: dict[str, Any]) -> None:
        self._update_referrers_tag(repository, subject_digest, descriptor, set())

    def _update_referrers_tag(self, repository: str, subject_digest: str, add: dict[str, Any] | None,
                              remove: set[str]) -> None:
        """Write the referrers index of ``subject_digest`` (tag schema) with ``add`` in it and ``remove`` out of it,
        safe against a concurrent writer: the index is read, merged and written, then read back after a settle
        time (four times the read-merge-write round, jittered); an index that lost ``add`` or holds a removed
        entry again (another writer's write based on what it read before ours) is merged and written again, up to
        ``REFERRERS_ATTEMPTS`` times. Without conditional writes in the distribution API this holds while a
        writer's own read-to-write round is shorter than the settle time."""
        tag = referrers_tag(subject_digest)
        for _attempt in range(REFERRERS_ATTEMPTS):
            started = time.monotonic()
            current = self._referrers_listed(repository, tag)
            if _referrers_hold(current, add, remove):
                return
            merged = [m for m in current if m.get("digest") not in remove]
            merged += [add] if add is not None and not any(m.get("digest") == add["digest"] for m in merged) else []
            body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": merged},
                              sort_keys=True, separators=(",", ":")).encode()
            self.put_manifest(repository, tag, Manifest(body=body, media_type=OCI_INDEX, digest=sha256_digest(body)))
            settle = min(REFERRERS_MAX_SETTLE, max(REFERRERS_MIN_SETTLE, 4 * (time.monotonic() - started)))
            time.sleep(settle * (1 + random.random()))
            if _referrers_hold(self._referrers_listed(repository, tag), add, remove):
                return
        raise RegistryError(f"{self.host}/{repository}:{tag}: the referrers index lost this write "
                            f"{REFERRERS_ATTEMPTS} times (other writers at the same time); run the command again")

    def _referrers_listed(self, repository: str, tag: str) -> list[dict[str, Any]]:
        current = self.get_manifest(repository, tag)
        return list(current.json.get("manifests") or []) if current else []


def _referrers_hold(manifests: list[dict[str, Any]], add: dict[str, Any] | None, remove: set[str]) -> bool:
    listed = {m.get("digest") for m in manifests}
    return (add is None or add["digest"] in listed) and not (listed & remove)


def _labels(config: dict[str, Any]) -> dict[str, str]:
    inner = config.get("config")
    labels = inner.get("Labels") if isinstance(inner, dict) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def referrers_tag(digest: str) -> str:
    """The OCI 1.1 referrers tag schema: ``sha256:abc...`` -> ``sha256-abc...``."""
    alg, _, hexpart = digest.partition(":")
    return f"{alg}-{hexpart}"
