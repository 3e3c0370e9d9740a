"""Locks from uv, for real against the package index: hashes, byte-stable relock, a failing cell reported
with uv's reason while the others lock."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pinmatrix.cli import main
from pinmatrix.lock.resolve import lock_path
from pinmatrix.matrix.expand import expand_matrix
from pinmatrix.matrix.schema import load_matrix

pytestmark = pytest.mark.network

MATRIX = """\
[matrix]
python = "3.13"
exclude_newer = "2026-11-01T00:00:00Z"
[stacks.tiny]
gpu_required = false
[stacks.tiny.packages]
six = ["1.16.0", "1.17.0"]
[stacks.broken]
gpu_required = false
[stacks.broken.packages]
six = ["1.16.0"]
idna = ["3.7"]
"""


def test_lock_hashes_relock_and_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 'broken' pins a six that the index does not have: uv must say so, and 'tiny' still locks.
    text = MATRIX.replace('six = ["1.16.0"]\nidna', 'six = ["1.99.99"]\nidna')
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    assert main(["lock", str(path)]) == 1
    err = capsys.readouterr().err
    assert "FAILED" in err and "1.99.99" in err and "2 locked, 1 failed" in err
    cells = expand_matrix(load_matrix(path)).cells
    tiny = [c for c in cells if c.stack == "tiny"]
    for cell in tiny:
        body = lock_path(cell, tmp_path).read_text()
        assert f"six=={cell.pins['six']}" in body
        assert "--hash=sha256:" in body
    before = {c.id: lock_path(c, tmp_path).read_bytes() for c in tiny}
    mtimes = {c.id: lock_path(c, tmp_path).stat().st_mtime_ns for c in tiny}
    assert main(["lock", str(path), "--stack", "tiny"]) == 0
    assert "unchanged" in capsys.readouterr().err
    for c in tiny:
        assert lock_path(c, tmp_path).read_bytes() == before[c.id]
        assert lock_path(c, tmp_path).stat().st_mtime_ns == mtimes[c.id]  # not even rewritten


def test_lock_targets_the_cells_platform_not_the_hosts(tmp_path: Path) -> None:
    # click needs colorama on Windows only: a lock for another platform than this Linux host must show it.
    text = """\
[matrix]
python = "3.13"
exclude_newer = "2026-11-01T00:00:00Z"
[stacks.win]
gpu_required = false
platform = "x86_64-pc-windows-msvc"
[stacks.win.packages]
click = ["8.1.7"]
[stacks.linux]
gpu_required = false
platform = "aarch64-manylinux_2_28"
[stacks.linux.packages]
click = ["8.1.7"]
"""
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    assert main(["lock", str(path)]) == 0
    cells = {c.stack: c for c in expand_matrix(load_matrix(path)).cells}
    win = lock_path(cells["win"], tmp_path).read_text()
    linux = lock_path(cells["linux"], tmp_path).read_text()
    assert "python 3.13 on aarch64-manylinux_2_28" in linux
    assert "colorama==" in win
    assert "colorama" not in linux


def test_shipped_demo_locks_are_current(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    shutil.copy(root / "matrix.toml", tmp_path / "matrix.toml")
    shutil.copytree(root / "patches", tmp_path / "patches")
    assert main(["lock", str(tmp_path / "matrix.toml"), "--stack", "demo"]) == 0
    for cell in expand_matrix(load_matrix(tmp_path / "matrix.toml")).cells:
        if cell.stack == "demo":
            assert lock_path(cell, tmp_path).read_bytes() == lock_path(cell, root).read_bytes()
