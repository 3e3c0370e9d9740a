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
    monkeypatch.setattr(wheels, "MAX_BINARY_BYTES", 1 << 20)
    scan = wheels.scan_wheel(wheel, None, "header")
    by_path = {b.path: b for b in scan.binaries}
    assert by_path["bomb/libhuge.so"].notes == [f"not read: {8 << 20} bytes, more than the {1 << 20} a binary may have"]
    assert by_path["bomb/libok.so"].groups == [("sm_90",)]
