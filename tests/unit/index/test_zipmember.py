"""zipmember: a wheel's members read from the file as zipfile would give them, and refused where the bytes are not
what the central directory says (CRC, size, local header), never more than the declared size."""

from __future__ import annotations

import io
import os
import struct
import zipfile
from pathlib import Path

import pytest

from pinmatrix.index import zipmember
from pinmatrix.index.zipmember import ZipMemberError, open_member

PAYLOAD = b"#!python\nimport os\n" + os.urandom(300_000) + b"tail " * 200_000  # part random, part compressible


def _zip(path: Path, members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _read_all(path: Path, name: str, chunk: int = -1) -> bytes:
    with zipfile.ZipFile(path) as zf, open_member(zf, zf.getinfo(name)) as stream:
        if chunk < 0:
            return stream.read()
        parts = []
        while part := stream.read(chunk):
            assert len(part) <= chunk
            parts.append(part)
        return b"".join(parts)


def _patch(path: Path, old: bytes, new: bytes, *, count: int = 1) -> None:
    data = path.read_bytes()
    assert data.count(old) >= count
    path.write_bytes(data.replace(old, new, count))


@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED])
@pytest.mark.parametrize("chunk", [-1, 1, 4096, 1 << 20])
def test_a_member_reads_as_zipfile_gives_it(tmp_path: Path, method: int, chunk: int) -> None:
    wheel = _zip(tmp_path / "w.whl", {"pkg/a.bin": PAYLOAD, "pkg/empty": b"", "pkg/b.txt": b"x" * 10,
                                      "pkg/one": b"1"}, method)
    with zipfile.ZipFile(wheel) as zf:
        expected = {n: zf.read(n) for n in zf.namelist()}
    if chunk == 1:
        expected = {n: expected[n] for n in ("pkg/b.txt", "pkg/empty", "pkg/one")}  # a byte at a time: the small
    for name, data in expected.items():
        assert _read_all(wheel, name, chunk) == data


def test_deflated_members_go_through_zlib_ng_not_zipfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = _zip(tmp_path / "w.whl", {"a": PAYLOAD})
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda *a, **k: pytest.fail("zipfile.open was used"))
    assert _read_all(wheel, "a") == PAYLOAD


def test_another_method_is_left_to_zipfile(tmp_path: Path) -> None:
    wheel = _zip(tmp_path / "w.whl", {"a": PAYLOAD}, zipfile.ZIP_LZMA)
    with zipfile.ZipFile(wheel) as zf, open_member(zf, zf.getinfo("a")) as stream:
        assert not isinstance(stream, io.BufferedReader)
        assert stream.read() == PAYLOAD


def test_readline_then_seek_to_the_start_reads_it_again(tmp_path: Path) -> None:
    wheel = _zip(tmp_path / "w.whl", {"bin/tool": PAYLOAD})
    with zipfile.ZipFile(wheel) as zf, open_member(zf, zf.getinfo("bin/tool")) as stream:
        assert stream.readline() == b"#!python\n"
        assert stream.read(7) == b"import "
        assert stream.seek(0) == 0
        assert stream.read() == PAYLOAD
        with pytest.raises(io.UnsupportedOperation, match="tool: a zip member seeks only back to its start"):
            stream.seek(5)


def test_the_reader_starts_again_at_seek_0_and_stays_at_seek_0_from_here(tmp_path: Path) -> None:
    wheel = _zip(tmp_path / "w.whl", {"a": PAYLOAD})
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo("a")
        raw = zipmember._MemberReader(zf.fp, info, zipmember._data_offset(zf.fp, info))  # type: ignore[arg-type]
        first = bytearray(200_000)
        assert raw.readinto(first) == 200_000 and raw.readinto(bytearray(0)) == 0
        assert raw.seek(0, io.SEEK_CUR) == 200_000 == raw.tell()
        with pytest.raises(io.UnsupportedOperation):
            raw.seek(1, io.SEEK_CUR)
        reader = io.BufferedReader(raw)
        assert bytes(first) + reader.read() == PAYLOAD
        assert reader.seek(0) == 0 == raw.tell()  # nothing buffered after the end: the raw reader went back
        assert reader.read() == PAYLOAD


def test_a_name_in_utf8_and_one_in_cp437_match_their_local_headers(tmp_path: Path) -> None:
    wheel = _zip(tmp_path / "w.whl", {"pkg/caf\u00e9.py": b"utf8", "pkg/naX.py": b"cp437"})
    _patch(wheel, b"pkg/naX.py", b"pkg/na\x82.py", count=2)  # local and central: 0x82 is e-acute in cp437
    with zipfile.ZipFile(wheel) as zf:
        assert zf.namelist() == ["pkg/caf\u00e9.py", "pkg/na\u00e9.py"]
        got = [open_member(zf, info).read() for info in zf.infolist()]
        flags = [info.flag_bits & 0x800 for info in zf.infolist()]
    assert got == [b"utf8", b"cp437"] and flags == [0x800, 0]


def test_a_local_header_with_an_extra_field_is_skipped_whole(tmp_path: Path) -> None:
    path = tmp_path / "w.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        info = zipfile.ZipInfo("a")
        info.extra = struct.pack("<HH", 0xCAFE, 8) + b"8 bytes!"
        info.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(info, PAYLOAD)
    assert _read_all(path, "a") == PAYLOAD


def test_a_zip_cut_inside_a_local_header_is_refused(tmp_path: Path) -> None:
    wheel = _zip(tmp_path / "w.whl", {"a": PAYLOAD})
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo("a")
    cut = tmp_path / "cut.bin"
    cut.write_bytes(wheel.read_bytes()[:20])
    with cut.open("rb") as fp, pytest.raises(ZipMemberError, match="a: the zip ends inside its local header"):
        zipmember._data_offset(fp, info)  # type: ignore[arg-type]


def test_a_wrong_crc_is_refused(tmp_path: Path) -> None:
    wheel = _zip(tmp_path / "w.whl", {"a": PAYLOAD})
    with zipfile.ZipFile(wheel) as zf:
        crc = zf.getinfo("a").CRC
    _patch(wheel, struct.pack("<L", crc), struct.pack("<L", crc ^ 1), count=2)
    with pytest.raises(ZipMemberError, match="CRC-32"):
        _read_all(wheel, "a")


def _declared_size(wheel: Path, name: str, size: int) -> None:
    """The central directory's uncompressed size of ``name`` set to ``size`` (the local header keeps its own)."""
    data = bytearray(wheel.read_bytes())
    central = data.rindex(b"PK\x01\x02")
    assert data[central + 46:central + 46 + len(name)] == name.encode()
    struct.pack_into("<L", data, central + 24, size)
    wheel.write_bytes(bytes(data))


def test_more_bytes_than_declared_are_refused_after_at_most_one_byte_more(tmp_path: Path) -> None:
    wheel = _zip(tmp_path / "w.whl", {"a": PAYLOAD})
    _declared_size(wheel, "a", 1000)
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo("a")
        with pytest.raises(ZipMemberError, match="a: unpacks to more than its declared 1000 bytes"):
            open_member(zf, info).read(100)
        raw = zipmember._MemberReader(zf.fp, info, zipmember._data_offset(zf.fp, info))  # type: ignore[arg-type]
        buffer = bytearray(100)  # in steps: the last asks for one byte past the size, not a whole step
        with pytest.raises(ZipMemberError):
            while raw.readinto(buffer):
                pass
        assert raw.tell() == 1001  # inflated no further than one byte past the size


def test_fewer_bytes_than_declared_are_refused(tmp_path: Path) -> None:
    wheel = _zip(tmp_path / "w.whl", {"a": PAYLOAD})
    _declared_size(wheel, "a", len(PAYLOAD) + 1)
    with pytest.raises(ZipMemberError, match=f"unpacks to {len(PAYLOAD)} bytes"):
        _read_all(wheel, "a")


def test_a_stored_member_whose_sizes_differ_is_refused(tmp_path: Path) -> None:
    wheel = _zip(tmp_path / "w.whl", {"a": PAYLOAD}, zipfile.ZIP_STORED)
    _declared_size(wheel, "a", len(PAYLOAD) - 1)
    with zipfile.ZipFile(wheel) as zf, pytest.raises(ZipMemberError, match="stored, but its sizes differ"):
        open_member(zf, zf.getinfo("a"))


def test_a_local_header_with_another_name_is_refused(tmp_path: Path) -> None:
    wheel = _zip(tmp_path / "w.whl", {"good.py": PAYLOAD})
    data = bytearray(wheel.read_bytes())
    data[30:37] = b"evil.py"  # the first local header's name; the central directory still says good.py
    wheel.write_bytes(bytes(data))
    with zipfile.ZipFile(wheel) as zf, pytest.raises(ZipMemberError, match="good.py: its local header names b'evil.py', not the central directory's name$"):
        open_member(zf, zf.getinfo("good.py"))


def test_no_local_header_at_the_offset_is_refused(tmp_path: Path) -> None:
    wheel = _zip(tmp_path / "w.whl", {"a": PAYLOAD})
    _patch(wheel, b"PK\x03\x04", b"PK\x00\x00")
    with zipfile.ZipFile(wheel) as zf, pytest.raises(ZipMemberError, match="no local header at offset 0"):
        open_member(zf, zf.getinfo("a"))


def test_a_truncated_deflate_stream_is_refused(tmp_path: Path) -> None:
    wheel = _zip(tmp_path / "w.whl", {"a": PAYLOAD})
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo("a")
        raw = zipmember._MemberReader(zf.fp, info, zipmember._data_offset(zf.fp, info))  # type: ignore[arg-type]
        raw._info = zipfile.ZipInfo("a")  # the same member, its compressed size cut to half
        raw._info.compress_type, raw._info.file_size = info.compress_type, info.file_size
        raw._info.compress_size, raw._info.CRC = info.compress_size // 2, info.CRC
        raw._restart()
        with pytest.raises(ZipMemberError, match="deflate stream ends early"):
            io.BufferedReader(raw).read()


def test_a_zip_cut_inside_a_members_data_is_refused(tmp_path: Path) -> None:
    wheel = _zip(tmp_path / "w.whl", {"a": PAYLOAD})
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo("a")
        start = zipmember._data_offset(zf.fp, info)  # type: ignore[arg-type]
    cut = tmp_path / "cut.bin"
    cut.write_bytes(wheel.read_bytes()[:start + info.compress_size // 2])
    with cut.open("rb") as fp, pytest.raises(ZipMemberError, match="ends inside its data"):
        io.BufferedReader(zipmember._MemberReader(fp, info, start)).read()  # type: ignore[arg-type]
