"""`pinmatrix lock --check` (for CI, as `uv lock --check`): resolves again, writes nothing, exits 1 when a lock is
missing or stale or this matrix's lock has no cell any more, and 0 when every lock is up to date."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pinmatrix.cli import main
from pinmatrix.lock.resolve import record_owner
from pinmatrix.matrix.selection import expand_matrix
from pinmatrix.project.lockfile import lock_path
from pinmatrix.project.matrix_toml import load_matrix

pytestmark = pytest.mark.network
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "matrix.toml", tmp_path / "matrix.toml")
    shutil.copytree(ROOT / "patches", tmp_path / "patches")
    (tmp_path / "locks").mkdir()
    for cell in expand_matrix(load_matrix(tmp_path / "matrix.toml")).cells:
        if cell.stack == "demo":
            shutil.copy(lock_path(cell, ROOT), lock_path(cell, tmp_path))
    return tmp_path


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_lock_check(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    matrix = str(project / "matrix.toml")
    locks = project / "locks"
    assert main(["lock", matrix, "--stack", "demo", "--check"]) == 0
    err = capsys.readouterr().err
    assert "4 fresh, 0 missing, stale or failed" in err and "every lock is up to date" in err
    # a lock made by another uv version is still fresh: only the pins and hashes count
    first = sorted(locks.glob("*.txt"))[0]
    first.write_text(first.read_text().replace("# resolved by uv ", "# resolved by uv 0.0.1 was "))
    assert main(["lock", matrix, "--stack", "demo", "--check"]) == 0
    capsys.readouterr()
    # a hash edited by hand: stale; a lock deleted: missing; nothing is written either way
    second, third = sorted(locks.glob("*.txt"))[1:3]
    second.write_text(second.read_text().replace("--hash=sha256:", "--hash=sha256:0", 1))
    third.unlink()
    before = _snapshot(locks)
    assert main(["lock", matrix, "--stack", "demo", "--check", "--json"]) == 1
    out, err = capsys.readouterr()
    assert f"STALE     {second.stem}" in err and f"MISSING   {third.stem}" in err
    assert "2 fresh, 2 missing, stale or failed" in err and "run `pinmatrix lock` to update" in err
    assert '"status": "stale"' in out and '"status": "missing"' in out
    assert _snapshot(locks) == before and not (locks / "owners.json").exists()


TINY = """\
[matrix]
python = "3.13"
exclude_newer = "2026-11-01T00:00:00Z"
[stacks.tiny]
gpu_required = false
[stacks.tiny.packages]
six = ["1.17.0"]
"""


def test_lock_check_names_an_orphaned_lock(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A full check also fails on a lock this matrix made for a cell it no longer has, and keeps the file."""
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(TINY)
    assert main(["lock", str(matrix)]) == 0
    assert main(["lock", str(matrix), "--check"]) == 0
    orphan = tmp_path / "locks" / "0123456789ab.txt"
    orphan.write_text("# an old cell's lock\n")
    record_owner(tmp_path, "matrix.toml", ["0123456789ab"], replace=False)
    capsys.readouterr()
    assert main(["lock", str(matrix), "--check"]) == 1
    err = capsys.readouterr().err
    assert "orphan    0123456789ab.txt: matrix.toml made it" in err and "1 fresh, 0 missing, stale or failed, 1 orphaned" in err
    assert orphan.is_file()
