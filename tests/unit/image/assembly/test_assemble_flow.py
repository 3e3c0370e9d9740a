"""The hermetic builder on real inputs: locks are checked against their cell before any layer is written, a
wheel whose bytes differ from the lock is refused, a Python the base cannot provide is refused by validate, and
every layer is a deterministic tar. An aarch64 cell and a base pinned by digest: tests/integration/
test_assemble_bases.py."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest
from assembly_cells import demo_cells
from pep691 import serve_pages

from conftest import REPO
from pinmatrix.cell import BaseSpec
from pinmatrix.errors import MatrixError
from pinmatrix.image.assembly.assemble import Assembler, AssemblySettings
from pinmatrix.image.assembly.lockcheck import LockMismatch, checked_lock
from pinmatrix.index.wheel_index import Target, WheelError, WheelFetcher
from pinmatrix.matrix.selection import load
from pinmatrix.oci.layer import LayerWriter
from pinmatrix.project.lockfile import lock_path, parse_lock

TRIXIE = BaseSpec(kind="mmdebstrap", suite="trixie", source_date_epoch=1735689600,
                  packages=("ca-certificates", "python3"))


def test_a_lock_whose_body_is_another_cells_is_refused_naming_the_package() -> None:
    a, b = [c for c in demo_cells() if c.pins["idna"] == "3.7"][:1] + [c for c in demo_cells() if c.pins["idna"] == "3.10"][:1]
    lock_a, lock_b = lock_path(a, REPO).read_text(), lock_path(b, REPO).read_text()
    header = "".join(line for line in lock_a.splitlines(keepends=True) if line.startswith("#"))
    body = "".join(line for line in lock_b.splitlines(keepends=True) if not line.startswith("# pinmatrix")
                   and not line.startswith("# python"))
    with pytest.raises(LockMismatch, match=r"idna is 3\.10 in the lock, the cell pins idna==3\.7"):
        checked_lock(a, header + body, "locks/x.txt")
    with pytest.raises(LockMismatch, match=f"the lock was made for cell {b.id}"):
        checked_lock(a, lock_b, "locks/x.txt")
    checked_lock(a, lock_a, "locks/x.txt")  # its own lock passes


def test_a_lock_line_without_hashes_or_pin_is_refused() -> None:
    cell = demo_cells()[0]
    text = lock_path(cell, REPO).read_text()
    unhashed = "\n".join(line for line in text.splitlines() if "--hash" not in line).replace(" \\", "")
    with pytest.raises(LockMismatch, match=r"has no --hash"):
        checked_lock(cell, unhashed, "locks/x.txt")


def _wheel(name: str, version: str, text: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(f"{name}.py", text)
        zf.writestr(f"{name}-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(f"{name}-{version}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{name}-{version}.dist-info/RECORD", "")
    return buf.getvalue()


def test_a_wheel_whose_bytes_differ_from_the_lock_is_refused_and_not_cached(tmp_path: Path) -> None:
    good, evil = _wheel("tiny", "1.0", "x = 1\n"), _wheel("tiny", "1.0", "import os; os.system('touch /tmp/x')\n")
    locked = hashlib.sha256(good).hexdigest()
    pages = {
        "/simple/tiny/": json.dumps({"files": [{"filename": "tiny-1.0-py3-none-any.whl", "url": "/files/tiny.whl",
                                                "hashes": {"sha256": locked}}]}).encode(),
        "/files/tiny.whl": evil,
    }
    with serve_pages(pages) as url:
        entry = parse_lock(f"tiny==1.0 --hash=sha256:{locked}\n").entries[0]
        from pinmatrix.cell import IndexSpec

        fetcher = WheelFetcher(tmp_path / "wheels")
        wheel = fetcher.choose(entry, Target("3.13", "x86_64-manylinux_2_28"),
                               [IndexSpec(name="test", url=f"{url}/simple", default=True)])
        with pytest.raises(WheelError, match="does not match the lock"):
            fetcher.fetch(wheel)
        assert not list((tmp_path / "wheels").rglob("*.whl"))
        other = parse_lock(f"tiny==1.0 --hash=sha256:{'0' * 64}\n").entries[0]
        with pytest.raises(WheelError, match="no wheel with a locked hash"):
            fetcher.choose(other, Target("3.13", "x86_64-manylinux_2_28"),
                           [IndexSpec(name="test", url=f"{url}/simple", default=True)])


def test_layers_are_deterministic_tars(tmp_path: Path) -> None:
    digests = set()
    for run in range(2):
        writer = LayerWriter(tmp_path / f"blobs{run}", epoch=1735689600)
        writer.add_bytes("opt/a/b.txt", b"hello")
        writer.add_symlink("opt/a/c", "b.txt")
        digests.add(writer.close().digest)
    assert len(digests) == 1
    blob = next((tmp_path / "blobs0").iterdir())
    with tarfile.open(blob, "r:gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["opt", "opt/a", "opt/a/b.txt", "opt/a/c"]
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", 1735689600)}
    writer = LayerWriter(tmp_path / "blobs2", epoch=0)
    with pytest.raises(ValueError, match="outside the image root"):
        writer.add_bytes("opt/../../etc/passwd", b"x")
    writer.abort()


def test_validate_refuses_a_python_the_base_cannot_provide(tmp_path: Path) -> None:
    text = (REPO / "matrix.toml").read_text().replace('python = "3.13"\nplatform', 'python = "3.12"\nplatform', 1)
    (tmp_path / "matrix.toml").write_text(text)
    shutil.copytree(REPO / "patches", tmp_path / "patches")
    with pytest.raises(MatrixError) as err:
        load(tmp_path / "matrix.toml")
    lines = err.value.lines()
    assert any("matrix.toml:" in ln and "matrix.python" in ln and "wants Python 3.12 but its Debian trixie base has 3.13"
               in ln for ln in lines), lines


def test_a_cell_whose_layers_would_not_fit_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    import subprocess

    from pinmatrix.image.assembly.assemble import AssemblyError
    from pinmatrix.index.wheel_index import WheelFile

    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(small)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root)")  # CI runs as root: this runs there
    try:
        assembler = Assembler(AssemblySettings(root=REPO, cache_dir=small / "cache", layout_dir=small / "oci"))
        cell = demo_cells()[0]
        big = WheelFile("torch", "2.11.0", "torch-2.11.0-cp313-cp313-manylinux_2_28_x86_64.whl", "https://x.invalid/t",
                        "0" * 64, 530_000_000)
        with pytest.raises(AssemblyError, match=r"not enough disk: its 1 new layer\(s\) need about 1\.7 GB free"):
            assembler._check_disk(cell, [big])
        assembler._check_disk(cell, [])  # nothing new: nothing to check
    finally:
        subprocess.run(["umount", str(small)], check=False)


