"""How the unpacker applies a layer's members (oci/unpack.py): folders made for members whose parents the layer
does not list, whiteouts and opaque folders against the layers below only, hard links that stay inside the root
and never follow a symlink, and one exact line for every member it refuses."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import tarfile
from pathlib import Path
from typing import Any

import pytest
from hostile_images import add_image, layer, member

from pinmatrix.oci.unpack import CHUNK, RootfsError, _Layer, _Verified, unpack_image

TAR = "application/vnd.oci.image.layer.v1.tar"


def _unpack(tmp_path: Path, *layers: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    layout = tmp_path / "oci"
    digest = add_image(layout, "t:layers", [layer(entries) for entries in layers])
    return unpack_image(layout, digest, tmp_path / "roots").path


def _refused(tmp_path: Path, *layers: list[tuple[tarfile.TarInfo, bytes]]) -> tuple[str, str]:
    """The refusal's line and the digest of the last layer."""
    blobs = [layer(entries) for entries in layers]
    layout = tmp_path / "oci"
    digest = add_image(layout, "t:refused", blobs)
    with pytest.raises(RootfsError) as err:
        unpack_image(layout, digest, tmp_path / "roots")
    assert [p for p in (tmp_path / "roots").iterdir() if not p.name.endswith(".lock")] == []
    return str(err.value), "sha256:" + hashlib.sha256(blobs[-1]).hexdigest()


def test_folders_a_layer_does_not_list_are_made_as_0755_and_count_as_its_own(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        root = _unpack(tmp_path, [member("p0", data=b"below"), member("keep", data=b"below")],
                       [member("p/q/f", data=b"deep"), member(".wh.p"), member("p/.wh.q")])
    finally:
        os.umask(old)
    assert (root / "p" / "q" / "f").read_bytes() == b"deep"  # its whiteouts do not hide what it made
    assert [stat.S_IMODE(os.stat(root / d).st_mode) for d in ("p", "p/q")] == [0o755, 0o755]
    assert sorted(os.listdir(root)) == ["keep", "p", "p0"]


def test_a_whiteout_in_a_folder_spares_what_its_own_layer_made_there(tmp_path: Path) -> None:
    root = _unpack(tmp_path, [member("d", "dir", mode=0o755), member("d/old", data=b"1"), member("d/f", data=b"1")],
                   [member("d/f", data=b"2"), member("d/.wh.f"), member("d/.wh.old")])
    assert sorted(os.listdir(root / "d")) == ["f"] and (root / "d" / "f").read_bytes() == b"2"


def test_an_opaque_root_empties_the_layers_below_and_keeps_its_own(tmp_path: Path) -> None:
    root = _unpack(tmp_path, [member("old", data=b"1"), member("d", "dir"), member("d/x", data=b"1")],
                   [member("new", data=b"2"), member("sub/n", data=b"2"), member(".wh..wh..opq")])
    assert sorted(os.listdir(root)) == ["new", "sub"]


def test_a_file_of_a_lower_layer_is_replaced_by_a_folder(tmp_path: Path) -> None:
    root = _unpack(tmp_path, [member("x", data=b"file")], [member("x", "dir", mode=0o750), member("x/y", data=b"y")])
    assert stat.S_ISDIR(os.lstat(root / "x").st_mode) and (root / "x" / "y").read_bytes() == b"y"
    assert stat.S_IMODE(os.lstat(root / "x").st_mode) == 0o750


@pytest.mark.parametrize("name", [".wh.", ".wh..", ".wh...", "d/.wh.."])
def test_a_whiteout_that_names_nothing_is_refused(tmp_path: Path, name: str) -> None:
    line, digest = _refused(tmp_path, [member("d", "dir"), member("d/f")], [member(name)])
    assert line == f"layer {digest}: member {name!r}: a whiteout that names nothing; refused"


def test_a_path_through_a_file_is_refused_naming_it(tmp_path: Path) -> None:
    line, digest = _refused(tmp_path, [member("f", data=b"x")], [member("f/g/h", data=b"y")])
    assert line == f"layer {digest}: member 'f/g/h': its path passes through /f, which is not a directory; refused"


def test_hard_links_inside_the_root_only(tmp_path: Path) -> None:
    root = _unpack(tmp_path, [member("x/y/z", data=b"deep"), member("h", "hard", link="x/y/z")])
    assert os.stat(root / "h").st_ino == os.stat(root / "x" / "y" / "z").st_ino
    cases = {"./": "a hard link to the root folder",
             "x/y": "a hard link to a directory",
             "x/missing": "a hard link to 'x/missing', which is not in the root (outside it, or not yet unpacked)",
             "new/f": "a hard link to 'new/f', which is not in the root"}
    for n, (link, why) in enumerate(cases.items()):
        line, digest = _refused(tmp_path / str(n), [member("x/y/z", data=b"deep"), member("h", "hard", link=link)])
        assert line == f"layer {digest}: member 'h': {why}; refused"
    long = "x/y/" + "m" * 250
    line, digest = _refused(tmp_path / "long", [member("x/y/z", data=b"deep"), member("h", "hard", link=long)])
    assert line == (f"layer {digest}: member 'h': a hard link to {long[:200]!r}, which is not in the root (outside "
                    "it, or not yet unpacked); refused")


def test_a_hard_link_to_a_symlink_links_the_symlink_not_what_it_names(tmp_path: Path) -> None:
    outside = tmp_path / "host-secret"
    outside.write_text("secret")
    root = _unpack(tmp_path, [member("s", "sym", link=str(outside)), member("h", "hard", link="s")])
    assert os.readlink(root / "h") == str(outside) and os.lstat(root / "h").st_ino == os.lstat(root / "s").st_ino
    assert os.lstat(outside).st_nlink == 1


def test_a_symlink_keeps_the_layers_time_without_touching_what_it_names(tmp_path: Path) -> None:
    root = _unpack(tmp_path, [member("dangling", "sym", link="/nowhere/at/all")])
    assert os.lstat(root / "dangling").st_mtime == 1735689600


def test_a_time_the_file_system_cannot_hold_is_skipped_and_any_other_failure_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def utime(path: Any, times: Any, **_kw: Any) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "utime", utime)
    for code in (errno.EINVAL, errno.EOVERFLOW):
        assert (_unpack(tmp_path / str(code), [member("f", data=b"x")]) / "f").read_bytes() == b"x"
    code = errno.EPERM
    line, digest = _refused(tmp_path / "eperm", [member("f", data=b"x")])
    assert line == f"layer {digest}: member 'f': cannot be made here: Operation not permitted"


def test_a_file_member_never_writes_through_a_link_even_one_left_in_its_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The removal before each entry is the first guard; the exclusive, no-follow open the second."""
    outside = tmp_path / "host-file"
    outside.write_text("host")
    monkeypatch.setattr(_Layer, "remove", lambda _self, _path: None)
    line, digest = _refused(tmp_path, [member("s", "sym", link=str(outside))], [member("s", data=b"planted")])
    assert line.startswith(f"layer {digest}: member 's': cannot be made here: ")
    assert outside.read_text() == "host"


def test_a_member_name_is_cut_in_its_line_and_bounded(tmp_path: Path) -> None:
    long = "n" * 300
    line, digest = _refused(tmp_path, [member(long, data=b"x")])
    assert line == f"layer {digest}: member {long[:200]!r}: cannot be made here: File name too long"
    line, digest = _refused(tmp_path / "2", [member("a/" + "." * 2 + "/" + long, data=b"x")])
    assert line == f"layer {digest}: member {('a/../' + long)[:200]!r}: a '..' path; refused"
    line, digest = _refused(tmp_path / "3", [member("/abs", data=b"x")])
    assert line == f"layer {digest}: member '/abs': absolute path; refused"
    line, digest = _refused(tmp_path / "4", [member("h", "hard", link="x/" + long)])
    assert line == f"layer {digest}: member 'h': a hard link to {('x/' + long)[:200]!r}, which is not in the root; refused"
    unpacker = _Layer(tmp_path, "sha256:" + "0" * 64, as_root=False)
    assert unpacker.clean("a//b/./c/", "m") == "a/b/c"
    assert unpacker.clean("d/" * 2047 + "ef", "m") == "d/" * 2047 + "ef"  # 4096 characters
    for name in ("d/" * 2048 + "e", "a\0b"):
        with pytest.raises(RootfsError) as err:
            unpacker.clean(name, "m")
        assert str(err.value) == f"layer sha256:{'0' * 64}: member 'm': name too long or holds a NUL byte; refused"


def test_an_entry_of_a_type_it_does_not_make_is_refused(tmp_path: Path) -> None:
    info = tarfile.TarInfo("odd")
    info.type = b"Z"
    line, digest = _refused(tmp_path, [(info, b"")])
    assert line == f"layer {digest}: member 'odd': an entry of tar type b'Z' this runtime does not make; refused"


def test_a_blob_that_is_no_tar_is_one_line(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    junk = b"\x01not a tar at all" * 64
    digest = add_image(layout, "t:junk", [junk], media=TAR)
    with pytest.raises(RootfsError) as err:
        unpack_image(layout, digest, tmp_path / "roots")
    assert str(err.value).startswith(f"layer sha256:{hashlib.sha256(junk).hexdigest()}: not a readable tar (")


def test_device_nodes_of_every_layer_are_counted(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    digest = add_image(layout, "t:fifos", [layer([member("a", "fifo")]), layer([member("b", "fifo")])])
    lines: list[str] = []
    unpack_image(layout, digest, tmp_path / "roots", echo=lines.append)
    assert lines[-1] == "  2 device node(s) and FIFO(s) in the layers not made (the runtime gives /dev)"


def test_a_blob_read_is_bounded_to_a_chunk(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(b"x" * (CHUNK + 10))
    reader = _Verified(path, "sha256:" + hashlib.sha256(b"x" * (CHUNK + 10)).hexdigest(), CHUNK + 10)
    try:
        assert reader.read(0) == b""
        assert len(reader.read()) == CHUNK
        assert len(reader.read(-1)) == 10
        reader.finish()
    finally:
        reader.close()



def test_until_its_layer_is_done_a_new_folder_or_file_is_its_owners_alone(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Folders are made 0700 and files 0600; the layer's own modes come only once the entry (a file) or the
    whole layer (folders, children first) is written."""
    seen: list[tuple[str, int]] = []
    real_attributes = _Layer.attributes

    def attributes(self: _Layer, path: Path, info: tarfile.TarInfo) -> None:
        seen.append((path.name, stat.S_IMODE(os.lstat(path).st_mode)))
        real_attributes(self, path, info)

    monkeypatch.setattr(_Layer, "attributes", attributes)
    root = _unpack(tmp_path, [member("x", data=b"file")],
                   [member("new", "dir", mode=0o755), member("new/f", data=b"f", mode=0o644),
                    member("x", "dir", mode=0o755)])
    assert seen == [("x", 0o600), ("f", 0o600), ("x", 0o700), ("new", 0o700)]  # x: a file, then a folder
    assert [stat.S_IMODE(os.lstat(root / p).st_mode) for p in ("new", "new/f", "x")] == [0o755, 0o644, 0o755]
