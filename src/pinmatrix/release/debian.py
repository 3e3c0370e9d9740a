"""The Debian packages of an image's base, for its SBOM: the dpkg database (``var/lib/dpkg/status``) of the
image's base layers, as the registry serves them (each layer streamed, bounded by its declared size and checked
against its digest), parsed as data into typed records.

The base layers are those the image config's history names ``pinmatrix: base ...`` (``oci/config.py``
writes one such entry per base layer, on both build paths); they are read bottom to top, so the topmost status
file wins and a whiteout of it removes it. Only packages whose ``Status`` says ``installed`` or ``unpacked`` (an
extract base's packages: their files are all there, no maintainer script ran) count. The file is
bounded (``MAX_STATUS``), so is the number of entries (``MAX_PACKAGES``), and every name, version and
architecture must have the form Debian policy gives it: anything else is one line naming the image and the
entry. Each package becomes ``pkg:deb/debian/NAME@VERSION?arch=ARCH`` (the purl spec's deb type).
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, BinaryIO

import zstandard
from packageurl import PackageURL
from pydantic import StringConstraints, ValidationError

from pinmatrix.datamodel import Strict
from pinmatrix.errors import PinmatrixError
from pinmatrix.imageref import ImageRef
from pinmatrix.oci.compression import LAYER_MEDIA_TYPES, Format
from pinmatrix.oci.layer import open_layer_stream
from pinmatrix.oci.manifest import layer_descriptors
from pinmatrix.registry.client import Registry

STATUS_PATH = "var/lib/dpkg/status"
BASE_HISTORY = "pinmatrix: base "  # the created_by of every base layer (oci/config.py, image/containerfile/base_image.py)
MAX_STATUS = 16 << 20  # a full desktop install's status file is about 4 MiB
MAX_PACKAGES = 50_000  # entries in one status file
MAX_LAYER = 16 << 30  # a base layer read to find it

# Debian policy 5.6.1 (package names), 5.6.12 (versions: [epoch:]upstream[-revision]), dpkg-architecture names.
PackageName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9+.-]{0,127}$")]
DebVersion = Annotated[str, StringConstraints(pattern=r"^(?:[0-9]{1,9}:)?[0-9][A-Za-z0-9.+~:-]{0,254}$")]
DebArch = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]{0,31}$")]
_SOURCE = re.compile(r"^(?P<name>\S+)(?: \((?P<version>[^()\s]+)\))?$")


class DebianError(PinmatrixError):
    """An image's dpkg database cannot be read as one."""


class DebianPackage(Strict):
    name: PackageName
    version: DebVersion
    architecture: DebArch
    source: PackageName | None = None  # the source package, when it is named differently
    source_version: DebVersion | None = None  # when it differs from the binary's

    def purl(self) -> PackageURL:
        return PackageURL(type="deb", namespace="debian", name=self.name, version=self.version,
                          qualifiers={"arch": self.architecture})


PRESENT = frozenset({"installed", "unpacked"})  # the package's files are in the image


def _stanzas(text: str) -> Iterable[dict[str, str]]:
    """The entries of a deb822 file (a dpkg status file), each field -> its first line (continuations dropped:
    none of the fields read here has one)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                yield fields
            fields = {}
        elif line[0] in " \t" or line.startswith("#"):
            continue
        else:
            key, sep, value = line.partition(":")
            if sep:
                fields.setdefault(key.strip(), value.strip())
    if fields:
        yield fields


def parse_status(text: str, source: str) -> list[DebianPackage]:
    """The installed packages of a dpkg status file (sorted by name and architecture)."""
    if len(text) > MAX_STATUS:
        raise DebianError(f"{source}: more than {MAX_STATUS} bytes")
    found: dict[tuple[str, str], DebianPackage] = {}
    for count, fields in enumerate(_stanzas(text), start=1):
        if count > MAX_PACKAGES:
            raise DebianError(f"{source}: more than {MAX_PACKAGES} entries")
        status = fields.get("Status", "").split()
        if len(status) != 3 or status[2] not in PRESENT:
            continue  # not-installed, config-files, half-installed, ...: not in the image as a package
        name = fields.get("Package", "")
        src = _SOURCE.match(fields.get("Source", ""))
        data: dict[str, Any] = {"name": name, "version": fields.get("Version", ""),
                                "architecture": fields.get("Architecture", "")}
        if src and src["name"] != name:
            data["source"] = src["name"]
        if src and src["version"] and src["version"] != data["version"]:
            data["source_version"] = src["version"]
        try:
            pkg = DebianPackage.model_validate(data)
        except ValidationError as err:
            first = err.errors()[0]
            key = ".".join(str(p) for p in first["loc"])
            raise DebianError(f"{source}: entry {count} ({name[:64]!r}): {key} {str(first.get('input'))[:80]!r} is "
                              "not a Debian " + {"name": "package name", "version": "version",
                                                 "architecture": "architecture"}.get(key, key)) from None
        found[(pkg.name, pkg.architecture)] = pkg
    return [found[k] for k in sorted(found)]


@dataclass(frozen=True)
class BasePackages:
    packages: tuple[DebianPackage, ...]
    note: str  # where they were read, or why there are none


class _Bounded:
    """A blob stream that refuses to yield more than ``limit`` bytes (the size the manifest declared)."""

    def __init__(self, raw: Any, limit: int, where: str) -> None:
        self.raw, self.limit, self.where, self.read_bytes = raw, limit, where, 0

    def read(self, size: int = -1) -> bytes:
        chunk: bytes = self.raw.read(size)
        self.read_bytes += len(chunk)
        if self.read_bytes > self.limit:
            raise DebianError(f"{self.where}: longer than the {self.limit} bytes its manifest declares")
        return chunk


def status_in_layer(stream: BinaryIO, fmt: Format, where: str) -> tuple[str | None, bool]:
    """(the status file's text if this layer has one, whether the layer removes it: a whiteout of the file or an
    opaque ``var/lib/dpkg``). ``fmt``: the layer's compression (gzip, zstd or none)."""
    text: str | None = None
    removed = False
    try:
        with open_layer_stream(stream, fmt) as tar:
            for member in tar:
                name = member.name.removeprefix("./").removeprefix("/")
                if name in ("var/lib/dpkg/.wh.status", "var/lib/dpkg/.wh..wh..opq"):
                    removed, text = True, None
                elif name == STATUS_PATH and member.isreg():
                    if member.size > MAX_STATUS:
                        raise DebianError(f"{where}: {STATUS_PATH} is {member.size} bytes, more than {MAX_STATUS}")
                    handle = tar.extractfile(member)
                    text = handle.read(MAX_STATUS + 1).decode("utf-8", "replace") if handle else None
                    removed = False
    except (tarfile.TarError, OSError, EOFError, zstandard.ZstdError) as err:
        raise DebianError(f"{where}: not a readable tar layer: {err}") from None
    return text, removed


def base_layers(config: dict[str, Any], layers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The manifest's layer descriptors the config's history names as the base (history entries that made a
    layer pair with the layers in order); none when the history does not account for every layer."""
    history = [h for h in config.get("history") or [] if isinstance(h, dict) and not h.get("empty_layer")]
    if len(history) != len(layers):
        return []
    return [layer for layer, h in zip(layers, history) if str(h.get("created_by", "")).startswith(BASE_HISTORY)]


def base_packages(registry: Registry, image: ImageRef) -> BasePackages:
    """The installed Debian packages of ``image``'s base (the image must carry its digest)."""
    where = f"{registry.host}/{image.repository}@{image.digest}"
    if not image.digest:
        raise DebianError(f"{image}: reading its base's packages needs a digest")
    manifest = registry.get_manifest(image.repository, image.digest)
    if manifest is None:
        raise DebianError(f"{where}: no such image")
    doc = manifest.json
    if "config" not in doc:
        return BasePackages((), f"{where} is an index, not one image: no Debian packages listed")
    config = registry.image_config(image.repository, image.digest)
    layers = layer_descriptors(doc)
    base = base_layers(config, layers)
    if not base:
        return BasePackages((), f"{where}: its history names no base layer: no Debian packages listed")
    text: str | None = None
    for layer in base:
        digest, media_type = str(layer.get("digest", "")), str(layer.get("mediaType", ""))
        size = layer.get("size")
        fmt = LAYER_MEDIA_TYPES.get(media_type)
        if fmt is None:
            return BasePackages((), f"{where}: base layer {digest[:19]} is {media_type}, which pinmatrix does not "
                                    "read: no Debian packages listed")
        if not isinstance(size, int) or size < 0 or size > MAX_LAYER:
            raise DebianError(f"{where}: base layer {digest[:19]} declares size {size!r}")
        with registry.open_blob(image.repository, digest) as reader:
            bounded = _Bounded(reader, size, f"{where}: layer {digest[:19]}")
            found, removed = status_in_layer(bounded, fmt, f"{where}: layer {digest[:19]}")  # type: ignore[arg-type]
            while bounded.read(1 << 20):  # to its end: the reader checks the digest there
                pass
        if found is not None or removed:
            text = found
    if text is None:
        return BasePackages((), f"{where}: its base has no {STATUS_PATH} (an extract base runs no dpkg): "
                                "no Debian packages listed")
    packages = parse_status(text, f"{where}: {STATUS_PATH}")
    return BasePackages(tuple(packages), f"{len(packages)} Debian packages from {STATUS_PATH} of {len(base)} "
                                         f"base layer(s) of {where}")
