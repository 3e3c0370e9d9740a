"""The scratch root: ordered layers in order, the wheel layers side by side in worker processes, with the root an
overlay of the layers in their order would give."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from pathlib import Path

import pytest

from pinmatrix.oci import scratch_unpack
from pinmatrix.oci.compression import LayerCompression
from pinmatrix.oci.layer import LayerWriter
from pinmatrix.oci.scratch_unpack import RootLayers, ScratchRootError, unpack

GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"


def _layer(tmp_path: Path, files: dict[str, bytes], links: dict[str, str] | None = None,
           compression: str = "gzip:1") -> tuple[Path, str]:
    """A layer with ``files`` and ``links`` (link name -> target)."""
    writer = LayerWriter(tmp_path / "blobs", epoch=0, compression=LayerCompression.parse(compression))
    for name, target in sorted((links or {}).items()):
        writer.add_symlink(name, target)
    for name, data in files.items():
        writer.add_bytes(name, data)
    desc = writer.close()
    return tmp_path / "blobs" / desc.digest.split(":", 1)[1], desc.media_type


def _root(tmp_path: Path, layers: RootLayers, workers: int = 2) -> Path:
    root = tmp_path / f"root-{workers}"
    root.mkdir()
    unpack(root, layers, workers=workers)
    return root


def _tree(root: Path) -> dict[str, object]:
    """Every path under ``root``: a link's target, a file's bytes, a folder as None."""
    found: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        found[name] = (f"-> {os.readlink(path)}" if path.is_symlink() else path.read_bytes() if path.is_file()
                       else None)
    return found


def test_a_path_in_two_side_by_side_layers_ends_as_the_later_one_has_it_even_when_the_later_finishes_first(
        tmp_path: Path) -> None:
    # the earlier layer is long (and the largest: started first) and writes the shared path last
    early = _layer(tmp_path, {**{f"site/a/{i:04d}": os.urandom(512) for i in range(1500)}, "site/shared.py": b"early"})
    late = _layer(tmp_path, {"site/shared.py": b"late"}, compression="zstd:3")
    third = _layer(tmp_path, {"site/other.py": b"other"})
    root = _root(tmp_path, RootLayers((), [early, late, third]))
    assert (root / "site/shared.py").read_bytes() == b"late"
    assert (root / "site/other.py").read_bytes() == b"other" and len(list((root / "site/a").iterdir())) == 1500


def test_of_three_layers_holding_a_path_the_last_one_wins(tmp_path: Path) -> None:
    layers = [_layer(tmp_path, {"p": name.encode(), f"{name}/x": b"x" * size})
              for name, size in (("one", 10), ("two", 100_000), ("three", 1000))]
    root = _root(tmp_path, RootLayers((), layers))
    assert (root / "p").read_bytes() == b"three"


def test_a_later_file_replaces_an_earlier_link_without_writing_through_it(tmp_path: Path) -> None:
    early = _layer(tmp_path, {"target.txt": b"kept"}, links={"p": "target.txt"})
    late = _layer(tmp_path, {"p": b"late"})
    root = _root(tmp_path, RootLayers((), [early, late]))
    assert not (root / "p").is_symlink() and (root / "p").read_bytes() == b"late"
    assert (root / "target.txt").read_bytes() == b"kept"


def test_a_later_link_replaces_an_earlier_file(tmp_path: Path) -> None:
    early = _layer(tmp_path, {"p": b"early", "big": os.urandom(200_000)})
    late = _layer(tmp_path, {"q": b"q"}, links={"p": "q"})
    root = _root(tmp_path, RootLayers((), [early, late]))
    assert os.readlink(root / "p") == "q"


def test_side_by_side_gives_the_root_one_after_another_gives(tmp_path: Path) -> None:
    layers = [_layer(tmp_path, {"site/a.py": b"a", "site/shared": b"1", "bin/tool": os.urandom(4000)}),
              _layer(tmp_path, {"site/b.py": b"b", "site/shared": b"2"}, links={"site/link": "a.py"}),
              _layer(tmp_path, {"site/c/d.py": b"d"}, links={"site/shared": "c/d.py"}, compression="zstd:3")]
    side_by_side = _tree(_root(tmp_path, RootLayers((), layers), workers=2))
    in_turn = _tree(_root(tmp_path, RootLayers((), layers), workers=1))
    assert side_by_side == in_turn
    assert side_by_side["site/shared"] == "-> c/d.py" and side_by_side["site/link"] == "-> a.py"


def test_a_path_that_is_a_folder_in_one_layer_and_a_file_in_another_is_refused(tmp_path: Path) -> None:
    early = _layer(tmp_path, {"p/inside": b"x"})
    late = _layer(tmp_path, {"p": b"file"})
    # refused, by the worker that meets the other's entry or, when neither does, before anything is written in order
    with pytest.raises(ScratchRootError, match=r"( |/)p(/inside)?( is a folder in one layer and not in |'$)"):
        _root(tmp_path, RootLayers((), [early, late]))
    held = [scratch_unpack._Held(frozenset({"p"}), frozenset({"p/inside"}), frozenset()),
            scratch_unpack._Held(frozenset(), frozenset({"p"}), frozenset())]
    with pytest.raises(ScratchRootError, match=f"p is a folder in one layer and not in {late[0].name}"):
        scratch_unpack._left_to_each([early, late], held)


def test_the_largest_side_by_side_layer_starts_first() -> None:
    class Sized:
        def __init__(self, size: int) -> None:
            self.size = size

        def stat(self) -> object:
            if self.size < 0:
                raise FileNotFoundError("gone")
            return type("Stat", (), {"st_size": self.size})()

    layers = [(Sized(5), "t"), (Sized(50), "t"), (Sized(-1), "t"), (Sized(20), "t")]
    assert scratch_unpack._sizes_first(layers) == [1, 3, 0, 2]  # type: ignore[arg-type]


def test_ordered_layers_come_first_so_a_later_layer_writes_through_their_links(tmp_path: Path) -> None:
    base = _layer(tmp_path, {"usr/lib/base.so": b"b"}, links={"lib": "usr/lib"})
    wheels = [_layer(tmp_path, {"lib/wheel.so": b"w"}), _layer(tmp_path, {"lib/other.so": b"o"})]
    root = _root(tmp_path, RootLayers([base], wheels))
    assert (root / "lib").is_symlink()
    assert (root / "usr/lib/wheel.so").read_bytes() == b"w" and (root / "usr/lib/other.so").read_bytes() == b"o"
    assert (root / "usr/lib/base.so").read_bytes() == b"b"


def test_whiteouts_are_not_unpacked(tmp_path: Path) -> None:
    layer = _layer(tmp_path, {"a/.wh.gone": b"", "a/kept": b"k"})
    other = _layer(tmp_path, {"b/.wh.gone": b"", "b/kept": b"k"})
    root = _root(tmp_path, RootLayers([layer], [layer, other]))
    assert sorted(p.name for p in (root / "a").iterdir()) == ["kept"]
    assert sorted(p.name for p in (root / "b").iterdir()) == ["kept"]


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
    good = _layer(tmp_path, {"fine": b"f"})
    (tmp_path / "root").mkdir()
    layers = RootLayers([bad]) if where == "ordered" else RootLayers([], [bad, good])
    with pytest.raises(ScratchRootError, match=r"layer layer\.tar\.gz could not be unpacked: .*\.\./escape"):
        unpack(tmp_path / "root", layers)
    assert not (tmp_path / "escape").exists()


def test_the_first_error_stops_the_other_layers(tmp_path: Path) -> None:
    long = [_layer(tmp_path, {f"many{k}/{i:05d}": b"y" for i in range(3000)}) for k in range(3)]
    bad = _escaping_layer(tmp_path, padding=1 << 20)  # the largest: started first
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(ScratchRootError):
        unpack(root, RootLayers([], [bad, *long]), workers=2)
    written = sum(len(list(d.iterdir())) for d in root.glob("many*"))
    assert written < 3000 * 2  # the other worker stopped: at most one layer got through


def test_a_worker_writes_folders_and_regular_files_and_leaves_links_for_the_ordered_pass(tmp_path: Path) -> None:
    layer = _layer(tmp_path, {"site/a.py": b"a", "site/.wh.gone": b""}, links={"site/link": "a.py"})
    root = tmp_path / "root"
    root.mkdir()
    held = scratch_unpack._unpack_side_by_side(root, layer)
    assert held == scratch_unpack._Held(frozenset({"site"}), frozenset({"site/a.py"}), frozenset({"site/link"}))
    assert (root / "site/a.py").read_bytes() == b"a"
    assert not (root / "site/link").exists() and not (root / "site/.wh.gone").exists()


def _raw_layer(tmp_path: Path, name: str, entries: list[tarfile.TarInfo]) -> tuple[Path, str]:
    """A gzip layer of ``entries`` as given (modes and links not normalised as LayerWriter does)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for info in entries:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isreg() else None)
    blob = tmp_path / name
    blob.write_bytes(gzip.compress(raw.getvalue()))
    return blob, GZIP


def _entry(name: str, *, link: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = mode
    if link:
        info.type, info.linkname = tarfile.SYMTYPE, link
    else:
        info.size = 1
    return info


def test_a_worker_refuses_a_file_under_an_ordered_layers_link_to_outside_the_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    base = _raw_layer(tmp_path, "base.tar.gz", [_entry("opt", link=str(outside))])
    wheel = _raw_layer(tmp_path, "wheel.tar.gz", [_entry("opt/venv/x.py")])
    with pytest.raises(ScratchRootError, match=r"wheel\.tar\.gz could not be unpacked: .*opt/venv/x\.py"):
        _root(tmp_path, RootLayers([base], [wheel, _layer(tmp_path, {"fine": b"f"})]))
    assert list(outside.iterdir()) == []


def test_a_worker_does_not_write_through_a_link_at_a_files_own_path_to_outside(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"kept")
    dir_entry = _entry("site", mode=0o755)
    dir_entry.type, dir_entry.size = tarfile.DIRTYPE, 0
    base = _raw_layer(tmp_path, "base.tar.gz", [dir_entry, _entry("site/evil", link=str(outside))])
    wheel = _raw_layer(tmp_path, "wheel.tar.gz", [_entry("site/evil")])
    with pytest.raises(ScratchRootError, match=r"wheel\.tar\.gz could not be unpacked"):
        _root(tmp_path, RootLayers([base], [wheel, _layer(tmp_path, {"fine": b"f"})]))
    assert outside.read_bytes() == b"kept"


def test_a_worker_drops_high_mode_bits_and_group_and_other_write(tmp_path: Path) -> None:
    wheel = _raw_layer(tmp_path, "wheel.tar.gz", [_entry("tool", mode=0o6777), _entry("data", mode=0o666)])
    root = tmp_path / "root"
    root.mkdir()
    scratch_unpack._unpack_side_by_side(root, wheel)
    assert (root / "tool").stat().st_mode & 0o7777 == 0o755
    assert (root / "data").stat().st_mode & 0o7777 == 0o644


def test_a_worker_resolves_each_folder_once_not_each_member(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layer = _layer(tmp_path, {f"site/pkg/{i:03d}.py": b"x" for i in range(200)})
    resolved: list[str] = []
    real = os.path.realpath

    def counting(path: str, *args: object, **kwargs: object) -> str:
        resolved.append(str(path))
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os.path, "realpath", counting)
    root = tmp_path / "root"
    root.mkdir()
    scratch_unpack._unpack_side_by_side(root, layer)
    assert len(list((root / "site/pkg").iterdir())) == 200
    assert len(resolved) < 10  # the root, site, site/pkg (and tarfile's own for the folders), not 200 files
