"""How a layer's tar stream is compressed: the format (gzip, zstd or none), its level, and the pinned library that
makes the bytes, all part of every layer key (the blob digest depends on each of them).

- gzip: deflate by zlib-ng (the ``zlib-ng`` wheel, pinned, so the bytes do not depend on the host's zlib),
  compressed in 1 MiB blocks on all cores and joined into one gzip member, as pigz does: each block is primed
  with the 32 KiB before it and ends on a byte boundary (a sync flush), the last one finishes the stream. The
  cut points depend on the data alone, so the bytes are the same for any number of threads. Every gzip reader
  reads it, Docker 20.10 included.
- zstd: zstd's own multi-threaded streaming compressor (the ``zstandard`` wheel, pinned; its output does not
  depend on the number of workers once there is one). Read by podman, containerd >= 1.5 and Docker >= 23.
- none: the plain tar.

``LayerCompression.parse`` reads the ``--compression`` text (``gzip``, ``gzip:6``, ``zstd``, ``zstd:9``,
``none``); ``for_consumer`` picks one for the engine that will read the layers (``--compression auto``)."""

from __future__ import annotations

import os
import struct
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, Protocol

import zstandard
from zlib_ng import zlib_ng

from pinmatrix.errors import PinmatrixError

Format = Literal["gzip", "zstd", "none"]
FORMATS: tuple[Format, ...] = ("gzip", "zstd", "none")
MEDIA_TYPES: dict[Format, str] = {
    "gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
    "zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
    "none": "application/vnd.oci.image.layer.v1.tar",
}
# Every layer media type a puller may meet (OCI, OCI non-distributable, Docker) and how its blob is compressed.
LAYER_MEDIA_TYPES: dict[str, Format] = {
    "application/vnd.oci.image.layer.v1.tar": "none",
    "application/vnd.oci.image.layer.v1.tar+gzip": "gzip",
    "application/vnd.oci.image.layer.v1.tar+zstd": "zstd",
    "application/vnd.oci.image.layer.nondistributable.v1.tar": "none",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip": "gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd": "zstd",
    "application/vnd.docker.image.rootfs.diff.tar": "none",
    "application/vnd.docker.image.rootfs.diff.tar.gzip": "gzip",
    "application/vnd.docker.image.rootfs.diff.tar.zstd": "zstd",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip": "gzip",
}
LEVELS: dict[Format, range] = {"gzip": range(1, 10), "zstd": range(1, 20), "none": range(0, 1)}
DEFAULT_LEVELS: dict[Format, int] = {"gzip": 1, "zstd": 3, "none": 0}
GZIP_BLOCK = 1 << 20  # bytes of tar per deflate block; part of the key: another size gives other bytes
_WINDOW = 32 << 10  # deflate's window: each block is primed with this much of the data before it
# A gzip member header with no name, mtime 0, no extra flags and OS 255 ("unknown"): nothing from the host.
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


class CompressionError(PinmatrixError):
    """A layer compression that does not exist or cannot be read by the consumer."""


class Compressor(Protocol):
    """A stream compressor: ``compress`` returns what is ready (possibly nothing), ``flush`` the rest."""

    def compress(self, data: bytes) -> bytes: ...

    def flush(self) -> bytes: ...


@dataclass(frozen=True)
class LayerCompression:
    format: Format
    level: int

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise CompressionError(f"layer compression {self.format!r}: not one of {', '.join(FORMATS)}")
        if self.level not in LEVELS[self.format]:
            span = LEVELS[self.format]
            raise CompressionError(f"layer compression {self.format}: level {self.level} is outside "
                                   f"{span.start}-{span.stop - 1}")

    @classmethod
    def parse(cls, text: str) -> LayerCompression:
        """``gzip``, ``gzip:6``, ``zstd``, ``zstd:9`` or ``none`` (the default level when none is given)."""
        name, sep, level = text.strip().partition(":")
        if name not in FORMATS:
            raise CompressionError(f"layer compression {text!r}: not one of {', '.join(FORMATS)} "
                                   "(with :LEVEL for gzip or zstd)")
        if not sep:
            return cls(name, DEFAULT_LEVELS[name])
        if not level.isdigit() or len(level) > 2:
            raise CompressionError(f"layer compression {text!r}: the level after ':' must be a number")
        return cls(name, int(level))

    @property
    def media_type(self) -> str:
        return MEDIA_TYPES[self.format]

    @property
    def key(self) -> str:
        """What the bytes depend on besides the data: format, level, library and version, block size."""
        if self.format == "gzip":
            return f"gzip-{self.level}/zlib-ng-{zlib_ng.ZLIBNG_VERSION}/block-{GZIP_BLOCK}"
        if self.format == "zstd":
            return f"zstd-{self.level}/libzstd-{zstandard.ZSTD_VERSION[0]}.{zstandard.ZSTD_VERSION[1]}." \
                   f"{zstandard.ZSTD_VERSION[2]}"
        return "none"

    def __str__(self) -> str:
        return self.format if self.format == "none" else f"{self.format}:{self.level}"

    def compressor(self, threads: int | None = None) -> Compressor:
        """A new compressor using ``threads`` threads (default: the CPUs this process may use)."""
        count = max(1, threads if threads is not None else len(os.sched_getaffinity(0)))
        if self.format == "gzip":
            return BlockGzip(self.level, count)
        if self.format == "zstd":
            return _Zstd(self.level, count)
        return _Plain()


DEFAULT_COMPRESSION = LayerCompression("gzip", DEFAULT_LEVELS["gzip"])


def for_consumer(reads_zstd: bool) -> LayerCompression:
    """What ``--compression auto`` picks: zstd where the engine that takes the images reads it (podman, Docker >=
    23), else gzip, which every puller reads (Docker 20.10 included): also when no engine here reads the layers
    (pushed, or kept in the layout), since the puller is not known."""
    return LayerCompression("zstd", DEFAULT_LEVELS["zstd"]) if reads_zstd else DEFAULT_COMPRESSION


def requested(text: str) -> LayerCompression | None:
    """``--compression TEXT`` parsed once: None for ``auto`` (decided by the engine that loads the images)."""
    return None if text == "auto" else LayerCompression.parse(text)


def choose(wanted: LayerCompression | None, engine: str | None, reads_zstd: bool) -> LayerCompression:
    """The layers' compression for images loaded into ``engine`` (None: none here loads them): ``auto`` (None) as
    ``for_consumer``; an explicit zstd refused for an engine that cannot load it."""
    if wanted is None:
        return for_consumer(engine is not None and reads_zstd)
    if engine is not None:
        check_readable(wanted, engine, reads_zstd)
    return wanted


def check_readable(compression: LayerCompression, engine: str, reads_zstd: bool) -> None:
    """Refuse, before anything is built, zstd layers for an engine that cannot load them."""
    if compression.format == "zstd" and not reads_zstd:
        raise CompressionError(f"--compression {compression}: engine {engine} here cannot read zstd layers "
                               "(Docker before 23); use --compression gzip or auto")


def layer_format(media_type: str) -> Format | None:
    """How a layer of ``media_type`` is compressed; None for a media type that is not a tar layer."""
    return LAYER_MEDIA_TYPES.get(media_type)


def check_pullable(layer_media_types: list[str], image: str, engine: str, reads_zstd: bool) -> None:
    """Refuse, before the engine is asked, to pull an image with zstd layers into an engine that cannot read
    them (its own error, for Docker 20.10, names neither the layer nor the cure)."""
    zstd = sum(1 for media in layer_media_types if layer_format(media) == "zstd")
    if zstd and not reads_zstd:
        raise CompressionError(f"{image}: {zstd} of its {len(layer_media_types)} layers are zstd, which engine "
                               f"{engine} here cannot read (Docker before 23): pull with podman, or rebuild the cell "
                               "with --compression gzip")


class _Plain:
    def compress(self, data: bytes) -> bytes:
        return data

    def flush(self) -> bytes:
        return b""


class _Zstd:
    def __init__(self, level: int, threads: int) -> None:
        # threads >= 1 always: zstd's multi-threaded framing, the same for any worker count (0 would be the
        # single-threaded compressor, whose bytes differ)
        self._obj = zstandard.ZstdCompressor(level=level, threads=threads, write_content_size=False,
                                             write_checksum=False).compressobj()

    def compress(self, data: bytes) -> bytes:
        return self._obj.compress(data)

    def flush(self) -> bytes:
        return self._obj.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH)


def _deflate_block(level: int, block: bytes, primer: bytes, last: bool) -> bytes:
    obj = zlib_ng.compressobj(level, zlib_ng.DEFLATED, -15, 8, zlib_ng.Z_DEFAULT_STRATEGY, primer) if primer \
        else zlib_ng.compressobj(level, zlib_ng.DEFLATED, -15, 8, zlib_ng.Z_DEFAULT_STRATEGY)
    return obj.compress(block) + obj.flush(zlib_ng.Z_FINISH if last else zlib_ng.Z_SYNC_FLUSH)


class BlockGzip:
    """One gzip member made of ``GZIP_BLOCK``-sized deflate blocks compressed in parallel (see the module)."""

    def __init__(self, level: int, threads: int) -> None:
        self.level = level
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="deflate") if threads > 1 else None
        self._ahead = 2 * threads  # blocks in flight at most: memory stays a few MiB per thread
        self._pending: deque[Future[bytes] | bytes] = deque()
        self._buffer = bytearray()
        self._primer = b""
        self._crc = 0
        self._size = 0
        self._started = False

    def _submit(self, block: bytes, last: bool) -> None:
        primer, self._primer = self._primer, block[-_WINDOW:]
        if self._pool is None:
            self._pending.append(_deflate_block(self.level, block, primer, last))
        else:
            self._pending.append(self._pool.submit(_deflate_block, self.level, block, primer, last))

    def _ready(self, keep: int) -> bytes:
        out = bytearray()
        if not self._started:
            out += _GZIP_HEADER
            self._started = True
        while len(self._pending) > keep:
            part = self._pending.popleft()
            out += part if isinstance(part, bytes) else part.result()
        return bytes(out)

    def compress(self, data: bytes) -> bytes:
        self._crc = zlib_ng.crc32(data, self._crc)
        self._size += len(data)
        self._buffer += data
        while len(self._buffer) > GZIP_BLOCK:  # a block is cut only once more data follows it: the last one
            block = bytes(self._buffer[:GZIP_BLOCK])  # finishes the stream
            del self._buffer[:GZIP_BLOCK]
            self._submit(block, last=False)
        return self._ready(self._ahead)

    def flush(self) -> bytes:
        self._submit(bytes(self._buffer), last=True)
        self._buffer.clear()
        out = self._ready(0) + struct.pack("<II", self._crc & 0xFFFFFFFF, self._size & 0xFFFFFFFF)
        if self._pool is not None:
            self._pool.shutdown()
        return out
