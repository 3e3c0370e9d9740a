"""Deterministic OCI layers: a tar stream with fixed metadata, compressed as ``LayerCompression`` says (gzip,
zstd or none: oci/compression.py), hashed as it is written (``diff_id`` over the tar, ``digest`` over the
blob, both in the one pass that writes it), straight into the blob store.

Every entry gets uid/gid 0 unless the source says otherwise (a Debian rootfs keeps its numeric owners), empty
user and group names, the layer's epoch as mtime, and a mode normalised to 0755/0644 (directories and
executables / plain files). The same entries in the same order give the same bytes on every machine, user,
umask and temp dir: nothing is read from the host but the entries' contents.

A writer given ``progress`` says, at most once a second, the bytes of tar written so far with the rate, and of
how many (share and time left) once ``expect`` told it (a wheel's unpacked size: the tar is that and its
headers, so the share is about right and stops at 100%)."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

import zstandard
from zlib_ng import gzip_ng

from pinmatrix.hashing import oci_digest
from pinmatrix.oci.compression import (
    DEFAULT_COMPRESSION,
    Compressor,
    Format,
    LayerCompression,
    layer_format,
)
from pinmatrix.transfer import TransferMeter

_BUF = 1 << 20


@dataclass(frozen=True)
class LayerDescriptor:
    """What a written layer is: its blob digest and size, its uncompressed digest (diff_id), its media type."""

    digest: str
    size: int
    diff_id: str
    media_type: str
    entries: int = 0
    unpacked: int = 0  # bytes of tar (what the layer takes once unpacked, roughly)

    def as_oci(self, annotations: dict[str, str] | None = None) -> dict[str, object]:
        out: dict[str, object] = {"mediaType": self.media_type, "digest": self.digest, "size": self.size}
        if annotations:
            out["annotations"] = dict(sorted(annotations.items()))
        return out

    def to_json(self) -> dict[str, object]:
        return {"digest": self.digest, "size": self.size, "diff_id": self.diff_id,
                "media_type": self.media_type, "entries": self.entries, "unpacked": self.unpacked}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> LayerDescriptor:
        return cls(digest=str(data["digest"]), size=int(data["size"]), diff_id=str(data["diff_id"]),  # type: ignore[call-overload]
                   media_type=str(data["media_type"]), entries=int(data.get("entries", 0)),  # type: ignore[call-overload]
                   unpacked=int(data.get("unpacked", 0)))  # type: ignore[call-overload]


def open_layer(path: Path, media_type: str) -> tarfile.TarFile:
    """A layer blob opened for reading its entries in order (gzip, zstd or plain tar, by media type); closing the
    tar closes the blob."""
    raw = open(path, "rb")  # noqa: SIM115 - closed with the tar (_LayerTar.close)
    try:
        tar = open_layer_stream(cast(BinaryIO, raw), layer_format(media_type) or "none")
    except BaseException:
        raw.close()
        raise
    tar.owned = (*tar.owned, raw)
    return tar


def open_layer_stream(stream: BinaryIO, compression: Format) -> _LayerTar:
    """A layer's tar read in order from ``stream`` (a blob as it is read: a file, a registry's answer), inflated as
    ``compression`` says; closing the tar closes the decompressor, never ``stream``."""
    if compression == "gzip":
        return _LayerTar.open(fileobj=stream, mode="r|gz")
    if compression == "zstd":
        reader = zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True, closefd=False)
        try:
            tar = _LayerTar.open(fileobj=cast(BinaryIO, reader), mode="r|")
        except BaseException:
            reader.close()
            raise
        tar.owned = (reader,)
        return tar
    return _LayerTar.open(fileobj=stream, mode="r|")


def open_plain_tar(path: Path) -> tarfile.TarFile:
    """A plain tar file another tool wrote (mmdebstrap's root filesystem), opened to read its entries."""
    return _LayerTar.open(path, mode="r:")


class _LayerTar(tarfile.TarFile):
    """A layer's tar, whose members are copied out ``_BUF`` bytes at a time (tarfile's default is 16 KiB), and
    which closes what it reads through (``owned``: a decompressor, the blob file) when it is closed."""

    owned: tuple[IO[bytes], ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("copybufsize", _BUF)
        super().__init__(*args, **kwargs)

    def close(self) -> None:
        try:
            super().close()
        finally:
            for handle in self.owned:
                handle.close()


class _CompressingSink(io.RawIOBase):
    """A write-only stream: hashes what it gets (diff_id), compresses it, hashes and writes the result."""

    def __init__(self, out: BinaryIO, compressor: Compressor, on_write: Callable[[int], None] | None = None) -> None:
        self.out = out
        self.on_write = on_write  # hears the tar bytes of each write, once they are written
        self.diff = hashlib.sha256()
        self.blob = hashlib.sha256()
        self.size = 0
        self.raw = 0
        self.zobj = compressor

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        """Bytes of tar written so far (tarfile asks once, at the start)."""
        return self.raw


    def _emit(self, data: bytes) -> None:
        if data:
            self.blob.update(data)
            self.out.write(data)
            self.size += len(data)

    def write(self, data: bytes) -> int:  # type: ignore[override]
        view = bytes(data)
        self.raw += len(view)
        self.diff.update(view)
        self._emit(self.zobj.compress(view))
        if self.on_write is not None:
            self.on_write(len(view))
        return len(view)

    def finish(self) -> None:
        self._emit(self.zobj.flush())


def _finish_blob(tmp: Path, file: BinaryIO, sink: _CompressingSink, blobs_dir: Path, media_type: str,
                 entries: int) -> LayerDescriptor:
    """The blob written through ``sink`` made durable and moved under its digest (kept when already there)."""
    sink.finish()
    file.flush()
    os.fsync(file.fileno())
    file.close()
    digest = sink.blob.hexdigest()
    target = blobs_dir / digest
    if target.exists():
        tmp.unlink()
    else:
        os.replace(tmp, target)
    return LayerDescriptor(digest=oci_digest(digest), size=sink.size, diff_id=oci_digest(sink.diff.hexdigest()),
                           media_type=media_type, entries=entries, unpacked=sink.raw)


def _tar_stream(path: Path, media_type: str) -> BinaryIO:
    """A layer blob's tar bytes, inflated as its media type says."""
    compressed = layer_format(media_type)
    if compressed == "gzip":
        return cast(BinaryIO, gzip_ng.open(path, "rb"))  # type: ignore[no-untyped-call]
    raw = open(path, "rb")  # noqa: SIM115 - closed with the reader (closefd) or returned
    if compressed == "zstd":
        return cast(BinaryIO, zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=True))
    return raw


def recompress(source: Path, media_type: str, blobs_dir: Path, compression: LayerCompression, *,
               entries: int = 0, threads: int | None = None) -> LayerDescriptor:
    """The tar of the layer blob ``source`` compressed again as ``compression`` says, into ``blobs_dir``: the same
    tar bytes, so the same diff_id, another blob. The tar's own bytes are not read as entries, only copied."""
    blobs_dir.mkdir(parents=True, exist_ok=True)
    tmp = blobs_dir / f".layer-{os.getpid()}-{threading.get_ident():x}.tmp"
    file = open(tmp, "wb")  # noqa: SIM115 - closed by _finish_blob, or below
    sink = _CompressingSink(cast(BinaryIO, file), compression.compressor(threads))
    try:
        with _tar_stream(source, media_type) as tar_bytes:
            while chunk := tar_bytes.read(_BUF):
                sink.write(chunk)
        return _finish_blob(tmp, cast(BinaryIO, file), sink, blobs_dir, compression.media_type, entries)
    except BaseException:
        file.close()
        tmp.unlink(missing_ok=True)
        raise


def member_path(name: str) -> str:
    """A tar member's path as a layer writes it (``LayerWriter.add_member``): no leading ``./``, no trailing ``/``."""
    return name.removeprefix("./").rstrip("/")


class LayerWriter:
    """Write one layer: ``add_dir`` / ``add_file`` / ``add_symlink`` / ``add_member``, then ``close()`` gives the
    descriptor and moves the blob into ``blobs_dir`` under its digest. Parent directories are added on first use."""

    def __init__(self, blobs_dir: Path, *, epoch: int, compression: LayerCompression = DEFAULT_COMPRESSION,
                 threads: int | None = None, progress: Callable[[str], None] | None = None, what: str = "layer",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.blobs_dir = blobs_dir
        self.epoch = epoch
        blobs_dir.mkdir(parents=True, exist_ok=True)
        self._tmp = blobs_dir / f".layer-{os.getpid()}-{id(self):x}.tmp"
        self._file = open(self._tmp, "wb")  # noqa: SIM115 - closed in close()/abort()
        self.meter = TransferMeter(None, clock=clock)
        self._progress, self._what = progress, what
        self._sink = _CompressingSink(self._file, compression.compressor(threads),
                                      self._wrote if progress is not None else None)
        self._tar = tarfile.TarFile(fileobj=cast(BinaryIO, self._sink), mode="w", format=tarfile.PAX_FORMAT,
                                    copybufsize=_BUF)
        self._dirs: set[str] = set()
        self.media_type = compression.media_type
        self.entries = 0

    def expect(self, total: int) -> None:
        """About this many bytes of tar are coming: progress says the share done and the time left."""
        self.meter.total = total if total > 0 else None

    def _wrote(self, count: int) -> None:
        self.meter.advance(count)
        if self._progress is not None and self.meter.due():
            self._progress(f"{self._what}: {self.meter.line()}")

    def _info(self, name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.mode = mode
        info.mtime = self.epoch
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    def _parents(self, name: str) -> None:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            parent = "/".join(parts[:i])
            if parent and parent not in self._dirs:
                self._dirs.add(parent)
                self._tar.addfile(self._info(parent, tarfile.DIRTYPE, 0o755))
                self.entries += 1

    @staticmethod
    def _clean(name: str) -> str:
        name = name.lstrip("/")
        if not name or any(part in ("", ".", "..") for part in name.split("/")):
            raise ValueError(f"refusing a layer entry outside the image root: {name!r}")
        return name

    def add_dir(self, name: str, mode: int = 0o755) -> None:
        name = self._clean(name.rstrip("/"))
        self._parents(name)
        if name not in self._dirs:
            self._dirs.add(name)
            self._tar.addfile(self._info(name, tarfile.DIRTYPE, mode))
            self.entries += 1

    def add_file(self, name: str, stream: BinaryIO, size: int, *, executable: bool = False) -> None:
        name = self._clean(name)
        self._parents(name)
        info = self._info(name, tarfile.REGTYPE, 0o755 if executable else 0o644)
        info.size = size
        self._tar.addfile(info, stream)
        self.entries += 1

    def add_bytes(self, name: str, data: bytes, *, executable: bool = False) -> None:
        self.add_file(name, io.BytesIO(data), len(data), executable=executable)

    def add_symlink(self, name: str, target: str) -> None:
        name = self._clean(name)
        self._parents(name)
        info = self._info(name, tarfile.SYMTYPE, 0o777)
        info.linkname = target
        self._tar.addfile(info)
        self.entries += 1

    def add_member(self, member: tarfile.TarInfo, stream: IO[bytes] | None) -> None:
        """Copy an entry of another tar (a root filesystem, a wheel's layer) keeping its type, mode, owner ids and
        link target; names, user names, times and PAX extras are normalised. A directory this layer already holds
        is not written again (a layer holds each path once: containers/storage refuses repeats)."""
        name = self._clean(member_path(member.name)) if member.name not in (".", "./") else ""
        if not name or (member.isdir() and name in self._dirs):
            return
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.uid, info.gid = member.type, member.mode, member.uid, member.gid
        info.linkname = member.linkname.removeprefix("./") if member.islnk() else member.linkname
        info.size = member.size if member.isreg() else 0
        info.mtime = min(int(member.mtime), self.epoch)
        info.uname = info.gname = ""
        info.devmajor, info.devminor = member.devmajor, member.devminor
        if member.isdir():
            self._dirs.add(name)
        self._tar.addfile(info, stream if member.isreg() else None)
        self.entries += 1

    def close(self) -> LayerDescriptor:
        self._tar.close()
        return _finish_blob(self._tmp, self._file, self._sink, self.blobs_dir, self.media_type, self.entries)

    def abort(self) -> None:
        try:
            self._file.close()
        finally:
            self._tmp.unlink(missing_ok=True)
