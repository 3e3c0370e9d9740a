"""The bundle manifest (``manifest.json``) as a typed model: what pinmatrix writes and reads back. The host side
checks the same fields by hand with the standard library (``pinmatrix/shipped/unbundle.py``); a test keeps the two
in step."""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import AfterValidator, Field, StringConstraints, model_validator

from pinmatrix.datamodel import Strict
from pinmatrix.errors import PinmatrixError

FORMAT: Final = "pinmatrix-bundle"
FORMAT_VERSION: Final = 1
MANIFEST_NAME = "manifest.json"
SCRIPT_NAME = "unbundle.py"
LOCK_NAME = "lock.txt"
MAX_MANIFEST_BYTES = 4 << 20
MAX_SIZE = 1 << 42


class BundleError(PinmatrixError):
    """A bundle cannot be made or is refused: a wheel or blob is missing, the output folder is someone else's, a
    bad size, a signature that does not verify."""


def _no_dot_dot(value: str) -> str:
    if ".." in value:
        raise ValueError(f"{value!r} is not a safe file name")
    return value


SafeName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,254}$"), AfterValidator(_no_dot_dot)]
Hex64 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Digest = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]
Version = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9.+!_-]{0,127}$")]
PythonVersion = Annotated[str, StringConstraints(pattern=r"^3\.[0-9]{1,3}$")]
MediaType = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9.+/_-]{0,254}$")]
Size = Annotated[int, Field(ge=0, le=MAX_SIZE, strict=True)]


def part_name(index: int, count: int) -> str:
    """The name of part ``index`` (0-based) of ``count``: ``part-001-of-008.bin``."""
    return f"part-{index + 1:03d}-of-{count:03d}.bin"


class Part(Strict):
    name: Annotated[str, StringConstraints(pattern=r"^part-[0-9]{3,6}-of-[0-9]{3,6}\.bin$")]
    size: Size
    sha256: Hex64


class WheelItem(Strict):
    """One wheel in the stream; ``sha256`` is the lock's hash for it."""

    name: SafeName  # canonical distribution name
    version: Version
    filename: SafeName
    size: Size
    sha256: Hex64
    offset: Size


class BlobItem(Strict):
    """One blob of the image; ``offset`` is None when the bundle leaves it out (the host has it)."""

    digest: Digest
    media_type: MediaType
    size: Size
    offset: Size | None = None


class BundledImage(Strict):
    digest: Digest
    media_type: MediaType
    size: Size
    ref: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,254}$")] | None = None


class LeftOut(Strict):
    """A locked distribution the bundle does not carry, and why."""

    name: SafeName
    version: Version
    why: Annotated[str, StringConstraints(max_length=4096)]


class BundleManifest(Strict):
    format: Literal["pinmatrix-bundle"] = FORMAT
    format_version: Literal[1] = FORMAT_VERSION
    kind: Literal["wheels", "image"]
    pinmatrix_version: Version
    cell_id: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{12}$")] | None = None
    lock_sha256: Hex64 | None = None
    python: PythonVersion | None = None  # the interpreter the wheels were chosen for (the host's)
    cell_python: PythonVersion | None = None
    platform: Annotated[str, StringConstraints(pattern=r"^(x86_64|aarch64)-manylinux_2_[0-9]{1,3}$")] | None = None
    note: Annotated[str, StringConstraints(max_length=4096)] | None = None
    wheels: list[WheelItem] | None = None
    left_out: list[LeftOut] | None = None
    image: BundledImage | None = None
    blobs: list[BlobItem] | None = None
    part_size: Size
    total_size: Size
    parts: list[Part]

    @model_validator(mode="after")
    def _consistent(self) -> BundleManifest:
        if self.kind == "wheels" and (self.wheels is None or self.lock_sha256 is None or self.image or self.blobs):
            raise ValueError("a wheels bundle has wheels and lock_sha256, and no image or blobs")
        if self.kind == "image" and (self.image is None or self.blobs is None or self.wheels is not None):
            raise ValueError("an image bundle has image and blobs, and no wheels")
        offsets = [(i.offset, i.size) for i in (self.wheels or [])] + [
            (b.offset, b.size) for b in (self.blobs or []) if b.offset is not None]
        at = 0
        for offset, size in offsets:
            if offset != at:
                raise ValueError(f"an item's offset is {offset}, expected {at}")
            at += size
        if at != self.total_size or sum(p.size for p in self.parts) != at:
            raise ValueError("total_size is not the sum of the files and of the parts")
        return self

    def shipped_names(self) -> list[str]:
        if self.kind == "wheels":
            return [w.filename for w in self.wheels or []]
        return [b.digest for b in self.blobs or [] if b.offset is not None]
