"""One zip member of a wheel, read as a stream: the member's local header is found at the central directory's
offset and checked against it, a deflated member is inflated by zlib-ng (the pinned ``zlib-ng`` wheel the gzip
layers use; about 1.8x the host zlib's speed on torch's wheel) and a stored one copied, and at the end its CRC-32
and size must be the central directory's. The output never passes the declared size, so a member cannot unpack to
more than the budget ``install.py`` checked from those sizes. Any other method, an encrypted member or a zip not
read from a file is left to ``zipfile`` (``open_member`` gives its own stream then)."""

from __future__ import annotations

import io
import struct
import zipfile
from typing import BinaryIO, cast

from zlib_ng import zlib_ng

from pinmatrix.errors import PinmatrixError

_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # the 30 fixed bytes of a zip local file header (APPNOTE 4.3.7)
_LOCAL_SIGNATURE = b"PK\x03\x04"
_ENCRYPTED = 0x1
_UTF8_NAME = 0x800
_CHUNK = 1 << 20  # compressed bytes read at a time
_BUFFER = 64 << 10


class ZipMemberError(PinmatrixError):
    """A zip member whose bytes are not what the zip's central directory says of it."""


def open_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> BinaryIO:
    """A readable stream of ``info``'s bytes (``read``, ``readline``, ``seek(0)``), checked as the module says."""
    fp = zf.fp
    if (fp is None or info.compress_type not in (zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED)
            or info.flag_bits & _ENCRYPTED):
        return cast(BinaryIO, zf.open(info))
    raw = _MemberReader(cast(BinaryIO, fp), info, _data_offset(cast(BinaryIO, fp), info))
    return cast(BinaryIO, io.BufferedReader(raw, buffer_size=_BUFFER))


def _data_offset(fp: BinaryIO, info: zipfile.ZipInfo) -> int:
    """Where the member's data starts: after its local header, whose name must be the central directory's."""
    fp.seek(info.header_offset)
    header = fp.read(_LOCAL_HEADER.size)
    if len(header) != _LOCAL_HEADER.size:
        raise ZipMemberError(f"{info.filename}: the zip ends inside its local header")
    fields = _LOCAL_HEADER.unpack(header)
    if fields[0] != _LOCAL_SIGNATURE:
        raise ZipMemberError(f"{info.filename}: no local header at offset {info.header_offset}")
    name_length, extra_length = int(fields[10]), int(fields[11])
    name = fp.read(name_length)
    # zipfile decoded the central directory's name with UTF-8 (flag 0x800) or else cp437: encoding it back gives
    # the central directory's bytes, which the local header must repeat
    expected = info.orig_filename.encode("utf-8" if info.flag_bits & _UTF8_NAME else "cp437")
    if name != expected:
        raise ZipMemberError(f"{info.filename}: its local header names {name[:80]!r}, not the central "
                             "directory's name")
    return int(info.header_offset) + _LOCAL_HEADER.size + name_length + extra_length


class _MemberReader(io.RawIOBase):
    """The member's bytes, inflated or copied, no more than its declared size; CRC and size checked at its end."""

    def __init__(self, fp: BinaryIO, info: zipfile.ZipInfo, start: int) -> None:
        self._fp, self._info, self._start = fp, info, start
        if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
            raise ZipMemberError(f"{info.filename}: stored, but its sizes differ ({info.compress_size} compressed, "
                                 f"{info.file_size} not)")
        self._restart()

    def _restart(self) -> None:
        self._offset = 0  # compressed bytes read so far
        self._out = 0  # bytes given so far
        self._crc = 0
        self._tail = b""  # compressed bytes the inflater has not taken yet
        self._inflater = zlib_ng.decompressobj(-15) if self._info.compress_type == zipfile.ZIP_DEFLATED else None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._out

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Back to the start only (installer's shebang fix reads a script's first line, then starts again)."""
        if (offset, whence) not in ((0, io.SEEK_SET), (0, io.SEEK_CUR)):
            raise io.UnsupportedOperation(f"{self._info.filename}: a zip member seeks only back to its start")
        if whence == io.SEEK_SET:
            self._restart()
        return self._out

    def _compressed(self) -> bytes:
        """What to feed next: the bytes the last step left (``_next`` sets the tail anew), else the next chunk."""
        if self._tail:
            return self._tail
        left = self._info.compress_size - self._offset
        if left <= 0:
            return b""
        self._fp.seek(self._start + self._offset)
        data = self._fp.read(min(left, _CHUNK))
        if not data:
            raise ZipMemberError(f"{self._info.filename}: the zip ends inside its data")
        self._offset += len(data)
        return data

    def _next(self, limit: int) -> bytes:
        """Up to ``limit`` bytes of output, b"" only at the member's end."""
        while True:
            data = self._compressed()
            if self._inflater is None:
                out, self._tail = data[:limit], data[limit:]
                return out
            if not data:  # all of it fed: at the stream's end, or it ends early (``_finish`` says which)
                return b""
            out = self._inflater.decompress(data, limit)
            self._tail = self._inflater.unconsumed_tail
            if out or self._inflater.eof:
                return out

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        if not len(view):
            return 0
        room = min(len(view), self._info.file_size - self._out + 1)  # one byte over the size shows a lie
        data = self._next(room)
        if not data:
            self._finish()
            return 0
        self._out += len(data)
        if self._out > self._info.file_size:
            raise ZipMemberError(f"{self._info.filename}: unpacks to more than its declared {self._info.file_size} "
                                 "bytes")
        self._crc = zlib_ng.crc32(data, self._crc)
        view[:len(data)] = data
        return len(data)

    def _finish(self) -> None:
        info = self._info
        if self._inflater is not None and not self._inflater.eof:
            raise ZipMemberError(f"{info.filename}: its deflate stream ends early")
        if self._out != info.file_size:
            raise ZipMemberError(f"{info.filename}: unpacks to {self._out} bytes, not its declared {info.file_size}")
        if self._crc != info.CRC:
            raise ZipMemberError(f"{info.filename}: CRC-32 {self._crc:08x} is not the zip's {info.CRC:08x}")
