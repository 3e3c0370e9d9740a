"""The scratch root: ordered layers in order, the wheel layers side by side with the later one winning a path."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import threading
from pathlib import Path

import pytest

from pinmatrix.image.datapath import scratchroot
from pinmatrix.image.datapath.scratchroot import RootLayers, unpack
from pinmatrix.image.format.compression import LayerCompression
from pinmatrix.image.format.layer import LayerWriter

GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"


def _layer(tmp_path: Path, files: dict[str, bytes], links: dict[str, str] | None = None,
           compression: str = "gzip:1") -> tuple[Path, str]:
    writer = LayerWriter(tmp_path / "blobs", epoch=0, compression=LayerCompression.parse(compression))
    for target, name in sorted((links or {}).items()):
        writer.add_symlink(name, target)
    for name, data in files.items():
        writer.add_bytes(name, data)
    desc = writer.close()
    return tmp_path / "blobs" / desc.digest.split(":", 1)[1], desc.media_type


def test_a_path_in_two_side_by_side_layers_ends_as_the_later_one_has_it_even_when_the_later_finishes_first(
        tmp_path: Path) -> None:
    # the earlier layer is long and writes the shared path last; the later one is one entry and done at once
    early = _layer(tmp_path, {**{f"site/a/{i:04d}": b"x" * 4096 for i in range(1500)}, "site/shared.py": b"early"})
    late = _layer(tmp_path, {"site/shared.py": b"late"}, compression="zstd:3")
    root = tmp_path / "root"
    root.mkdir()
    unpack(root, RootLayers((), [early, late]), workers=2)
    assert (root / "site/shared.py").read_bytes() == b"late"
    assert len(list((root / "site/a").iterdir())) == 1500


def test_the_later_layer_wins_whichever_thread_writes_first(tmp_path: Path) -> None:
    # the later layer's entry is written first and the earlier one's afterwards: the earlier one leaves it alone
    late_written = threading.Event()
    early = _layer(tmp_path, {"p": b"early"})
    late = _layer(tmp_path, {"p": b"late", "q": b"q"})
    original = scratchroot._extract

    def extract(tar: tarfile.TarFile, member: tarfile.TarInfo, root: Path) -> None:
        original(tar, member, root)
        if member.name == "p" and (root / "p").read_bytes() == b"late":
            late_written.set()

    root = tmp_path / "root"
    root.mkdir()
    claims = scratchroot._Claims()
    stop = threading.Event()
    scratchroot._extract = extract  # type: ignore[assignment]
    try:
        scratchroot._unpack_layer(root, late, claims, 1, stop)
        assert late_written.is_set()
        scratchroot._unpack_layer(root, early, claims, 0, stop)
    finally:
        scratchroot._extract = original  # type: ignore[assignment]
    assert (root / "p").read_bytes() == b"late"


def test_an_earlier_layer_written_first_is_replaced_by_the_later_one(tmp_path: Path) -> None:
    early = _layer(tmp_path, {"p": b"early"})
    late = _layer(tmp_path, {"p": b"late"})
    root = tmp_path / "root"
    root.mkdir()
    claims, stop = scratchroot._Claims(), threading.Event()
    scratchroot._unpack_layer(root, early, claims, 0, stop)
    scratchroot._unpack_layer(root, late, claims, 1, stop)
    assert (root / "p").read_bytes() == b"late"


def test_ordered_layers_come_first_so_a_later_layer_writes_through_their_links(tmp_path: Path) -> None:
    base = _layer(tmp_path, {"usr/lib/base.so": b"b"}, links={"usr/lib": "lib"})
    wheel = _layer(tmp_path, {"lib/wheel.so": b"w"})
    root = tmp_path / "root"
    root.mkdir()
    unpack(root, RootLayers([base], [wheel]))
    assert (root / "lib").is_symlink()
    assert (root / "usr/lib/wheel.so").read_bytes() == b"w"
    assert (root / "usr/lib/base.so").read_bytes() == b"b"


def test_whiteouts_are_not_unpacked(tmp_path: Path) -> None:
    layer = _layer(tmp_path, {"a/.wh.gone": b"", "a/kept": b"k"})
    root = tmp_path / "root"
    root.mkdir()
    unpack(root, RootLayers([layer], [layer]))
    assert sorted(p.name for p in (root / "a").iterdir()) == ["kept"]


def _escaping_layer(tmp_path: Path, padding: int = 0) -> tuple[Path, str]:
    """A layer whose first member is outside the root, then ``padding`` random bytes (a large blob, started first)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("../escape")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
        info = tarfile.TarInfo("padding")
        info.size = padding
        tar.addfile(info, io.BytesIO(os.urandom(padding)))
    blob = tmp_path / "layer.tar.gz"
    blob.write_bytes(gzip.compress(raw.getvalue()))
    return blob, GZIP


@pytest.mark.parametrize("where", ["ordered", "side_by_side"])
def test_unpack_refuses_a_member_outside_the_root(tmp_path: Path, where: str) -> None:
    bad = _escaping_layer(tmp_path)
    (tmp_path / "root").mkdir()
    layers = RootLayers([bad]) if where == "ordered" else RootLayers([], [bad])
    with pytest.raises(tarfile.OutsideDestinationError):
        unpack(tmp_path / "root", layers)
    assert not (tmp_path / "escape").exists()


def test_the_first_error_stops_the_other_layers(tmp_path: Path) -> None:
    long = _layer(tmp_path, {f"many/{i:05d}": b"y" for i in range(3000)})
    bad = _escaping_layer(tmp_path, padding=1 << 20)  # the largest: started first
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(tarfile.OutsideDestinationError):
        unpack(root, RootLayers([], [bad, long, long, long]), workers=2)
    written = len(list((root / "many").iterdir())) if (root / "many").exists() else 0
    assert written < 3000


def test_the_largest_side_by_side_layer_starts_first_and_keeps_its_rank(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    small = _layer(tmp_path, {"s": b"s"})
    large = _layer(tmp_path, {f"l/{i}": bytes(range(256)) * 64 for i in range(50)})
    started: list[tuple[Path, int]] = []
    original = scratchroot._unpack_layer

    def record(root: Path, blob: tuple[Path, str], claims: object, rank: int, stop: threading.Event) -> None:
        started.append((blob[0], rank))
        original(root, blob, claims, rank, stop)  # type: ignore[arg-type]

    monkeypatch.setattr(scratchroot, "_unpack_layer", record)
    (tmp_path / "root").mkdir()
    unpack(tmp_path / "root", RootLayers([], [small, large]), workers=1)
    assert started == [(large[0], 1), (small[0], 0)]
