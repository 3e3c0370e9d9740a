"""The project's git checkout as its images name it: the commit it is at (``revision``) and where its source can
be fetched (``source``: the remote ``origin``'s URL). Both are read with ``git`` and are absent, never guessed,
when the project is no git checkout, git is missing or refuses the folder (another owner), or the remote is
none.

A remote's URL is outside data: it is kept only as one line of at most ``MAX_URL`` printable ASCII characters in
the form of an ``https``, ``http``, ``ssh`` or ``git`` URL (the scp-like ``user@host:path`` becomes the
``ssh://user@host/path`` git reads it as), and never with a password or an http(s) user name, which a clone URL
may carry (``https://user:token@host/...``): images are published, tokens are not."""

from __future__ import annotations

import os
import re
import subprocess
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from pinmatrix import interrupt

MAX_URL = 2048
GIT_TIMEOUT_S = 10.0
_REVISION = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")  # a SHA-1 or SHA-256 object name
_SCP_LIKE = re.compile(r"^(?:(?P<user>[A-Za-z0-9._-]+)@)?(?P<host>[A-Za-z0-9.-]+):(?P<path>[^/:].*)$")
_SCHEMES = ("https", "http", "ssh", "git")


class SourceURLError(ValueError):
    """A source URL that an image cannot carry (the message says why)."""


@dataclass(frozen=True)
class Checkout:
    revision: str | None = None  # the commit HEAD names
    source: str | None = None  # the remote origin's URL, without credentials


def source_url(value: str) -> str:
    """``value`` as an image's ``org.opencontainers.image.source``: an https/http/ssh/git URL with a host, no
    password, no user name for http(s), no query or fragment; scp-like ``git@host:owner/repo.git`` as the
    ``ssh://`` URL it means. Raises SourceURLError (its message says what is wrong) for anything else."""
    if len(value) > MAX_URL or not value.isascii() or not value.isprintable() or any(c.isspace() for c in value):
        raise SourceURLError(f"not one line of at most {MAX_URL} printable ASCII characters without spaces")
    scp = _SCP_LIKE.match(value) if "://" not in value else None
    if scp is not None:
        login = f"{scp['user']}@" if scp["user"] else ""
        value = f"ssh://{login}{scp['host']}/{scp['path']}"
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port
    except ValueError as err:
        raise SourceURLError(f"not a URL ({err})") from None
    if parts.scheme not in _SCHEMES or not parts.hostname:
        raise SourceURLError(f"not an {', '.join(_SCHEMES)} URL with a host")
    if parts.query or parts.fragment:
        raise SourceURLError("a source URL has no query or fragment")
    user = parts.username if parts.scheme in ("ssh", "git") else None  # ssh's user is no secret, http's may be
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = (f"{user}@" if user else "") + host + (f":{port}" if port is not None else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _git(root: Path, *args: str) -> str | None:
    """What ``git -C root ARGS`` prints, stripped; None when git is missing, fails or says more than a line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}  # the checkout at root, not another
    try:
        done = interrupt.run(["git", "-C", str(root), *args], capture_output=True, timeout=GIT_TIMEOUT_S,
                             env=env, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = bytes(done.stdout or b"")[:MAX_URL + 2].decode("ascii", errors="replace").strip()
    return out if done.returncode == 0 and out and "\n" not in out else None


def read_checkout(root: Path) -> Checkout:
    """The revision and source of the git checkout ``root`` is in; each None when it cannot be told."""
    revision = _git(root, "rev-parse", "--verify", "--quiet", "HEAD")
    remote = _git(root, "config", "--get", "remote.origin.url")
    source = None
    if remote is not None:
        try:
            source = source_url(remote)
        except SourceURLError:
            source = None  # a remote an image cannot carry is left out, not repaired
    return Checkout(revision if revision and _REVISION.match(revision) else None, source)
