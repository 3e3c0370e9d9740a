"""`pinmatrix lock OTHER.toml` touches only the locks of that matrix: two matrices share one locks/ folder,
relocking either removes only the stale locks it made itself, and a lock nobody claims is kept (real uv)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pinmatrix.cli import main
from pinmatrix.matrix.selection import expand_matrix
from pinmatrix.project.lockfile import lock_path
from pinmatrix.project.matrix_toml import load_matrix

pytestmark = pytest.mark.network

HEAD = '[matrix]\npython = "3.13"\nexclude_newer = "2026-11-01T00:00:00Z"\n'
MAIN = HEAD + '[stacks.a]\ngpu_required = false\n[stacks.a.packages]\nsix = ["1.16.0", "1.17.0"]\n'
OTHER = HEAD + '[stacks.b]\ngpu_required = false\n[stacks.b.packages]\nidna = ["3.7"]\n'


def ids(path: Path) -> set[str]:
    return {c.id for c in expand_matrix(load_matrix(path)).cells}


def test_lock_of_another_matrix_never_removes_this_ones_locks(tmp_path: Path, capsys) -> None:
    main_toml, other_toml = tmp_path / "matrix.toml", tmp_path / "OTHER.toml"
    main_toml.write_text(MAIN)
    other_toml.write_text(OTHER)
    orphan = tmp_path / "locks" / "0123456789ab.txt"  # a lock no matrix on record made (e.g. committed earlier)
    orphan.parent.mkdir()
    orphan.write_text("# pinmatrix lock for cell 0123456789ab: old\n")

    assert main(["lock", str(main_toml)]) == 0
    mine = ids(main_toml)
    assert main(["lock", str(other_toml)]) == 0
    err = capsys.readouterr().err
    theirs = ids(other_toml)
    assert "kept      3 lock(s) that no cell of OTHER.toml has but that OTHER.toml did not make" in err
    for cell_id in mine | theirs:
        assert (tmp_path / "locks" / f"{cell_id}.txt").is_file()
    assert orphan.is_file()
    owners = json.loads((tmp_path / "locks" / "owners.json").read_text())
    assert owners == {"OTHER.toml": sorted(theirs), "matrix.toml": sorted(mine)}

    # matrix.toml drops a cell: its lock goes, OTHER.toml's and the orphan stay.
    main_toml.write_text(MAIN.replace('"1.16.0", ', ""))
    dropped = mine - ids(main_toml)
    assert len(dropped) == 1
    (kept,) = ids(main_toml)
    assert main(["lock", str(main_toml), "--cell", kept]) == 0  # one cell chosen: not a full lock, nothing removed
    assert all((tmp_path / "locks" / f"{cell_id}.txt").is_file() for cell_id in dropped)
    capsys.readouterr()
    assert main(["lock", str(main_toml)]) == 0
    err = capsys.readouterr().err
    (gone,) = dropped
    assert f"removed   {gone}.txt: matrix.toml made it and has no cell with this id any more" in err
    assert not (tmp_path / "locks" / f"{gone}.txt").exists()
    for cell_id in ids(main_toml) | theirs:
        assert (tmp_path / "locks" / f"{cell_id}.txt").is_file()
    assert orphan.is_file()


def test_a_partial_lock_removes_nothing_and_adds_to_its_owner(tmp_path: Path, capsys) -> None:
    main_toml = tmp_path / "matrix.toml"
    main_toml.write_text(MAIN)
    cells = expand_matrix(load_matrix(main_toml)).cells
    assert main(["lock", str(main_toml), "-k", cells[0].id]) == 0
    stale = tmp_path / "locks" / "ba9876543210.txt"
    stale.write_text("x\n")
    assert main(["lock", str(main_toml), "-k", cells[1].id]) == 0
    assert stale.is_file() and all(lock_path(c, tmp_path).is_file() for c in cells)
    owners = json.loads((tmp_path / "locks" / "owners.json").read_text())
    assert owners == {"matrix.toml": sorted(c.id for c in cells)}
