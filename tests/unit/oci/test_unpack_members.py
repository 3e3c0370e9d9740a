"""The unpacker's member application against hostile layers: no setuid or setgid bit survives, no device node or
FIFO is made on the host's file system (they are counted in one line), whoever unpacks."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from hostile_images import add_image, layer, member

from pinmatrix.oci.unpack import unpack_image


def test_setuid_and_setgid_bits_are_dropped_from_files_and_folders(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    digest = add_image(layout, "t:suid", [layer([
        member("bin", "dir", mode=0o755), member("bin/su", data=b"\x7fELF", mode=0o4755),
        member("bin/wall", data=b"\x7fELF", mode=0o2755), member("bin/both", data=b"x", mode=0o6777),
        member("shared", "dir", mode=0o2775), member("bin/linked", "hard", link="bin/su")])])
    root = unpack_image(layout, digest, tmp_path / "roots").path
    modes = {name: stat.S_IMODE(os.lstat(root / name).st_mode)
             for name in ("bin/su", "bin/wall", "bin/both", "shared", "bin/linked")}
    assert modes == {"bin/su": 0o755, "bin/wall": 0o755, "bin/both": 0o777, "shared": 0o775, "bin/linked": 0o755}


def test_device_nodes_and_fifos_are_not_made_and_are_counted_in_one_line(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    digest = add_image(layout, "t:nodes", [layer([
        member("dev", "dir", mode=0o755), member("dev/mem", "chr", mode=0o666, dev=(1, 1)),
        member("dev/sda", "blk", mode=0o666, dev=(8, 0)), member("tmp", "dir", mode=0o1777),
        member("tmp/pipe", "fifo", mode=0o666), member("etc", "dir"), member("etc/kept", data=b"x")])])
    lines: list[str] = []
    root = unpack_image(layout, digest, tmp_path / "roots", echo=lines.append).path
    assert not any(os.path.lexists(root / p) for p in ("dev/mem", "dev/sda", "tmp/pipe"))
    assert (root / "etc" / "kept").read_bytes() == b"x"
    assert "  3 device node(s) and FIFO(s) in the layers not made (the runtime gives /dev)" in lines
    quiet: list[str] = []
    plain = add_image(layout, "t:plain", [layer([member("etc", "dir"), member("etc/kept", data=b"y")])])
    unpack_image(layout, plain, tmp_path / "roots", echo=quiet.append)
    assert not [line for line in quiet if "not made" in line]
