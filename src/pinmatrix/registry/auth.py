"""Registry credentials the way the container tools keep them, and the distribution API's auth challenge.

Credentials are read, never written, from the first of these files that has an entry for the registry
(the order podman, skopeo and buildah use, then docker's):

1. ``$REGISTRY_AUTH_FILE``
2. ``${XDG_RUNTIME_DIR}/containers/auth.json``
3. ``~/.config/containers/auth.json``
4. ``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``

Each is ``{"auths": {"<host>[/<namespace>]": {"auth": base64("user:password")}}}``; a key with a
namespace (containers' auth.json) applies to the repositories under it, the longest match wins, and docker's
``https://<host>/v1/``-style keys are matched by host. Credential helpers (``credsStore``, ``credHelpers``)
and OAuth2 ``identitytoken`` entries are not used: ``podman login`` / ``docker login`` without a helper
write the plain ``auth`` form this reads.

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
import tempfile
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pinmatrix.errors import PinmatrixError
from pinmatrix.registry.ref import host_name, is_loopback

TOKEN_HOSTS_ENV = "PINMATRIX_TOKEN_HOSTS"


class AuthError(PinmatrixError):
    """Credentials are missing, malformed, or refused."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str
    source: Path  # the file they came from (passed to skopeo/podman as --authfile)
    key: str  # the "auths" key that matched

    def basic(self) -> str:
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return f"Basic {token}"

    def __repr__(self) -> str:  # never print the password
        return f"Credentials(username={self.username!r}, source={str(self.source)!r}, key={self.key!r})"


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


def _decode(entry: object, path: Path, key: str) -> tuple[str, str]:
    if not isinstance(entry, dict):
        raise AuthError(f"{path}: auths[{key!r}] is not an object")
    if isinstance(entry.get("auth"), str) and entry["auth"]:
        try:
            text = base64.b64decode(entry["auth"], validate=True).decode()
        except (binascii.Error, ValueError, UnicodeDecodeError):
            raise AuthError(f"{path}: auths[{key!r}].auth is not base64 of user:password") from None
        user, sep, password = text.partition(":")
        if not sep or not user:
            raise AuthError(f"{path}: auths[{key!r}].auth is not base64 of user:password")
        return user, password
    if isinstance(entry.get("username"), str) and isinstance(entry.get("password"), str):
        return entry["username"], entry["password"]
    if entry.get("identitytoken"):
        raise AuthError(f"{path}: auths[{key!r}] holds an OAuth2 identitytoken, which pinmatrix does not use; "
                        "log in with a password or access token")
    raise AuthError(f"{path}: auths[{key!r}] has no 'auth' (base64 of user:password)")


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
        auths = doc.get("auths") if isinstance(doc, dict) else None
        if not isinstance(auths, dict):
            continue
        best: tuple[int, str] | None = None
        for key in auths:
            norm = _normalise(key)
            if norm == host or (norm.startswith(host + "/") and (wanted == norm or wanted.startswith(norm + "/"))):
                if best is None or len(norm) > best[0]:
                    best = (len(norm), key)
        if best is not None:
            user, password = _decode(auths[best[1]], path, best[1])
            return Credentials(user, password, path, best[1])
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
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump({"auths": {creds.key: {"auth": auth}}}, handle)
        yield {"DOCKER_CONFIG": tmp}
