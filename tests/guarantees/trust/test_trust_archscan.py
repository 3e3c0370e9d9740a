"""arch-scan's binary reader is bounded in size and time and names malformed fatbin headers as such: 32 MiB
of fatbin magic is read in well under a second (it took 10.7 s), a container whose entries name no real
architecture is a malformed header (not a target sm_0, and not 100,000 groups of it), at most 65536
containers and 60 s per file, and a file above 4 GiB is named, not read."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from pinmatrix.archscan import binary
from pinmatrix.archscan.binary import FATBIN_MAGIC, read_binary


def container(*archs: int, kind: int = 2) -> bytes:
    """One fatbin container holding one entry per arch (64-byte entry headers, empty payloads)."""
    entries = b""
    for arch in archs:
        head = struct.pack("<HHIQ", kind, 0, 64, 0) + b"\0" * 12 + struct.pack("<I", arch)
        entries += head + b"\0" * (64 - len(head))
    return FATBIN_MAGIC + struct.pack("<HHQ", 1, 16, len(entries)) + entries


def test_a_file_of_fatbin_magic_is_read_quickly(tmp_path: Path) -> None:
    path = tmp_path / "magic.so"
    path.write_bytes(FATBIN_MAGIC * (8 << 20))  # 32 MiB
    start = time.monotonic()
    assert read_binary(path, None) is None
    assert time.monotonic() - start < 3


def test_malformed_headers_are_named_not_reported_as_sm_0(tmp_path: Path) -> None:
    path = tmp_path / "bogus.so"
    path.write_bytes(container(0) * 1000)
    found = read_binary(path, None)
    assert found is not None and found.groups == [] and found.targets == []
    assert found.notes == ["1000 malformed fatbin container header(s) (the first at offset 0: an entry for no "
                           "real architecture), not counted as targets"]


def test_good_containers_are_kept_beside_malformed_ones(tmp_path: Path) -> None:
    path = tmp_path / "mixed.so"
    path.write_bytes(b"\0" * 64 + container(90, 80) + container(7) + container(120, kind=1) + container(100000))
    found = read_binary(path, None)
    assert found is not None
    assert found.groups == [("sm_90", "sm_80"), ("compute_120",)]
    assert found.notes[-1].startswith("2 malformed fatbin container header(s) (the first at offset 208")


def test_at_most_so_many_containers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binary, "MAX_CONTAINERS", 100)
    path = tmp_path / "many.so"
    path.write_bytes(container(0) * 100_000)  # the shape that gave 100,000 bogus groups
    start = time.monotonic()
    found = read_binary(path, None)
    assert time.monotonic() - start < 5
    assert found is not None and found.groups == []
    assert found.notes == ["100 malformed fatbin container header(s) (the first at offset 0: an entry for no real "
                           "architecture), not counted as targets",
                           "the header parser stopped at offset 8000 after 100 containers"]
    good = tmp_path / "good.so"
    good.write_bytes(container(90) * 150)
    kept = read_binary(good, None)
    assert kept is not None and len(kept.groups) == 100 and kept.notes[-1].endswith("after 100 containers")


def test_the_parser_has_a_time_budget(tmp_path: Path) -> None:
    found, scanned = binary._scan(container(90) * 10, seconds=0.0)
    assert found == [] and scanned.stopped == "the header parser stopped at offset 0 after 0 containers and 0 s"
    found, scanned = binary._scan(container(90) * 10)
    assert len(found) == 10 and scanned.stopped is None and scanned.malformed == 0


def test_a_file_above_the_size_bound_is_named_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.so"
    path.write_bytes(container(90) * 4)
    monkeypatch.setattr(binary, "MAX_BINARY_BYTES", path.stat().st_size - 1)
    found = read_binary(path, None)
    assert found is not None and found.groups == [] and not found.grouped
    assert found.notes == [f"not read: {path.stat().st_size} bytes, more than the {path.stat().st_size - 1} a binary "
                           "may have"]
    monkeypatch.setattr(binary, "MAX_BINARY_BYTES", path.stat().st_size)
    assert read_binary(path, None).groups == [("sm_90",)] * 4  # type: ignore[union-attr]


def test_a_wheel_member_above_the_bound_is_named_not_extracted(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import zipfile

    from pinmatrix.archscan import wheels

    wheel = tmp_path / "bomb-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("bomb/libhuge.so", b"\0" * (8 << 20))  # 8 MiB of zeros: a few KiB compressed
        zf.writestr("bomb/libok.so", b"\0" * 64 + container(90))
    monkeypatch.setattr(binary, "MAX_BINARY_BYTES", 1 << 20)
    scan = wheels.scan_wheel(wheel, None, "header")
    by_path = {b.path: b for b in scan.binaries}
    assert by_path["bomb/libhuge.so"].notes == [f"not read: {8 << 20} bytes, more than the {1 << 20} a binary may have"]
    assert by_path["bomb/libok.so"].groups == [("sm_90",)]


def _zip_bomb(wheel: Path, mib: int) -> None:
    """A wheel whose one .so member is ``mib`` MiB of zeros, deflated to about a thousandth of that."""
    import zipfile

    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf, \
            zf.open("bomb/libbomb.so", "w", force_zip64=True) as out:
        chunk = b"\0" * (1 << 20)
        for _ in range(mib):
            out.write(chunk)


def test_a_512_mib_member_deflated_to_510_kb_is_named_not_extracted(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from pinmatrix.archscan import wheels

    wheel = tmp_path / "bomb-1.0-py3-none-any.whl"
    _zip_bomb(wheel, 512)
    assert wheel.stat().st_size < 600_000
    copies: list[int] = []
    monkeypatch.setattr(binary.Extraction, "copy", lambda self, src, dst, declared: copies.append(declared))
    scan = wheels.scan_wheel(wheel, None, "header")
    assert copies == []
    (bomb,) = scan.binaries
    assert bomb.path == "bomb/libbomb.so" and bomb.groups == []
    assert bomb.notes[0].startswith(f"not extracted: it declares {512 << 20} bytes from ")
    assert bomb.notes[0].endswith(" compressed, more than 100 times its size")


def _declare(wheel: Path, name: str, size: int) -> None:
    """Rewrite the sizes a zip declares for member ``name`` (local and central headers) to ``size``."""
    import struct

    data = bytearray(wheel.read_bytes())
    for sig, at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        pos = data.find(sig)
        while pos >= 0:
            name_at = pos + (30 if sig == b"PK\x03\x04" else 46)
            if data[name_at:name_at + len(name)] == name.encode():
                struct.pack_into("<I", data, pos + at, size)
            pos = data.find(sig, pos + 4)
    wheel.write_bytes(bytes(data))


def test_a_member_holding_more_than_it_declares_is_cut_at_its_declared_size_and_named(tmp_path: Path) -> None:
    import zipfile

    from pinmatrix.archscan import wheels

    wheel = tmp_path / "liar-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("liar/libliar.so", b"\0" * 64 + container(90) * 64)
        zf.writestr("liar/libok.so", b"\0" * 64 + container(90))
    _declare(wheel, "liar/libliar.so", 128)
    scan = wheels.scan_wheel(wheel, None, "header")
    by_path = {b.path: b for b in scan.binaries}
    assert by_path["liar/libliar.so"].groups == []
    assert by_path["liar/libliar.so"].notes[0].startswith("not extracted: BadZipFile: Bad CRC-32")
    assert by_path["liar/libok.so"].groups == [("sm_90",)]


def test_an_archive_extracts_at_most_its_total_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import zipfile

    from pinmatrix.archscan import wheels

    one = b"\0" * 64 + container(90)
    wheel = tmp_path / "many-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
        for i in range(3):
            zf.writestr(f"many/lib{i}.so", one)
    monkeypatch.setattr(binary, "MAX_EXTRACTED_BYTES", 2 * len(one))
    by_path = {b.path: b for b in wheels.scan_wheel(wheel, None, "header").binaries}
    assert by_path["many/lib0.so"].groups == by_path["many/lib1.so"].groups == [("sm_90",)]
    assert by_path["many/lib2.so"].notes == [f"not extracted: {len(one)} more bytes would pass the {2 * len(one)} "
                                             f"one archive may extract ({2 * len(one)} so far)"]


def test_a_layers_member_is_extracted_up_to_its_bound(tmp_path: Path) -> None:
    import gzip
    import hashlib
    import io
    import tarfile

    from pinmatrix.archscan.layers import AOT_FOLDER, scan_aot_layer

    ok = b"\0" * 64 + container(90)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, body in (("ok.so", ok), ("bomb.so", b"\0" * (20 << 20))):
            info = tarfile.TarInfo(f"{AOT_FOLDER}{name}")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    blob = gzip.compress(raw.getvalue(), 1)
    digest = hashlib.sha256(blob).hexdigest()
    (tmp_path / "blobs" / "sha256").mkdir(parents=True)
    (tmp_path / "blobs" / "sha256" / digest).write_bytes(blob)
    scan = scan_aot_layer(tmp_path, f"sha256:{digest}", "application/vnd.oci.image.layer.v1.tar+gzip", None, "h")
    by_path = {b.path: b for b in scan.binaries}
    assert by_path["ok.so"].groups == [("sm_90",)]
    assert by_path["bomb.so"].notes == [f"not extracted: {20 << 20} more bytes would pass the {16 << 20} one "
                                        f"archive may extract ({len(ok)} so far)"]
