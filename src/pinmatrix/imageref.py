"""Image references and registry hosts, defined once: parsing ``registry/repository[:tag][@sha256:...]``,
digest and tag syntax, which hosts are this machine's loopback (plain HTTP, no TLS), and the naming rule of a
cell's image (``<registry>/<stack>:<cell id>``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pinmatrix.cell import Cell
from pinmatrix.errors import PinmatrixError

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_REPOSITORY_RE = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*")
DEFAULT_REPOSITORY = "localhost/pinmatrix"  # where a cell's image is named when no registry is configured


class RegistryError(PinmatrixError):
    """The registry refused a request, is unreachable, served content that does not match its digest, or an
    image reference cannot be read."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def is_digest(text: str | None) -> bool:
    return bool(text) and bool(DIGEST_RE.match(text or ""))


def names_registry_host(part: str) -> bool:
    """Whether the first path component of a reference is a registry host (has a dot or a port, or is
    localhost) rather than the first part of a repository name."""
    return "." in part or ":" in part or part == "localhost"


def host_name(host: str) -> str:
    """"127.0.0.1:5000" -> "127.0.0.1"; "[::1]:5000" -> "::1"; a bare IPv6 address stays as it is."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def is_loopback(host: str) -> bool:
    """Whether a registry host ("127.0.0.1:5000", "localhost:5000", "[::1]:5000") is this machine's loopback."""
    name = host_name(host)
    return name in ("localhost", "::1") or (name.startswith("127.") and name.replace(".", "").isdigit())


def tls_verify_for(host: str, tls_verify: bool | None = None) -> bool:
    """Whether to verify TLS for ``host``: as given, else off only for loopback hosts."""
    return (not is_loopback(host)) if tls_verify is None else tls_verify


def image_ref(cell: Cell, registry: str | None) -> str:
    """The image reference of a cell: the tag is the cell id (a content address)."""
    return f"{(registry or DEFAULT_REPOSITORY).rstrip('/')}/{cell.stack}:{cell.id}"


def repository_path(name: str) -> str:
    """"host:port/repo/path" -> "repo/path" (the part after the registry host, when there is one)."""
    host, _, path = name.partition("/")
    return path if names_registry_host(host) else name


@dataclass(frozen=True)
class ImageRef:
    """registry/repository[:tag][@digest]. The registry part is required (there is no default registry)."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        rest, _, digest = text.partition("@")
        if digest and not is_digest(digest):
            raise RegistryError(f"{text!r}: digest must be sha256:<64 hex>")
        host, slash, path = rest.partition("/")
        if not slash or not path or not names_registry_host(host):
            raise RegistryError(f"{text!r}: expected registry/repository[:tag][@sha256:...], "
                                "e.g. 127.0.0.1:5000/pinmatrix/demo")
        tag = None
        if ":" in path.rsplit("/", 1)[-1]:
            path, _, tag = path.rpartition(":")
            if not TAG_RE.match(tag):
                raise RegistryError(f"{text!r}: bad tag {tag!r}")
        if not _REPOSITORY_RE.fullmatch(path):
            raise RegistryError(f"{text!r}: bad repository name {path!r} (lowercase, digits, '._-/')")
        return cls(host, path, tag or None, digest or None)

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}"

    def with_digest(self, digest: str) -> ImageRef:
        return ImageRef(self.registry, self.repository, None, digest)

    def with_tag(self, tag: str) -> ImageRef:
        return ImageRef(self.registry, self.repository, tag, None)

    @property
    def reference(self) -> str:
        """What the registry API calls the reference: the digest when there is one, else the tag."""
        return self.digest or self.tag or "latest"

    def __str__(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")
