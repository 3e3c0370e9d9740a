"""How a candidate's locks become its verdict: uv's "No solution found" prunes (said once with its cell count), an
index uv could not reach leaves it NOT-LOCKED (no verdict), and a failed lock is not tried again for a cell with
the same requirements (the env variants of one candidate)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from upgrade_matrix import head

import pinmatrix.upgrade.propose as prop
from pinmatrix.cell import Cell
from pinmatrix.lock.resolve import LockResult
from pinmatrix.project.matrix_toml import load_matrix
from pinmatrix.upgrade.candidates import UpgradeCandidate

MATRIX = head() + """[stacks.d]
smokes = ["host-probe"]
gpu_required = false
[stacks.d.packages]
six = ["1.16.0"]
[stacks.d.axes]
env = [{}, { label = "other", vars = { X = "1" } }]
"""


def _propose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reason: str) -> tuple[prop.Proposal, list[str]]:
    (tmp_path / "matrix.toml").write_text(MATRIX, encoding="utf-8")
    matrix = load_matrix(tmp_path / "matrix.toml")
    calls: list[str] = []

    def fake_lock(cell: Cell, root: Path, *args: object) -> LockResult:
        calls.append(cell.name)
        return LockResult(cell, root / f"{cell.id}.txt", ok=not reason, reason=reason)

    monkeypatch.setattr(prop, "lock_cell", fake_lock)
    [proposal] = prop.propose(matrix, [UpgradeCandidate("d", "six 1.17.0", {"six": "1.17.0"})],
                              datetime(2026, 12, 4, tzinfo=UTC), tmp_path / "out")
    return proposal, calls


def test_no_solution_prunes_and_is_said_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proposal, calls = _propose(tmp_path, monkeypatch, "error: No solution found when resolving dependencies")
    assert proposal.status == "pruned"
    assert proposal.reasons == ["2 cell(s) (d[env=default], ...): error: No solution found when resolving dependencies"]
    assert calls == ["d[env=default]"]  # the other env variant has the same requirements: not locked again


def test_an_unreachable_index_gives_no_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proposal, _ = _propose(tmp_path, monkeypatch, "error: Request failed after 3 retries: dns error")
    assert proposal.status == "not-locked"


def test_every_cell_locked_is_locked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proposal, calls = _propose(tmp_path, monkeypatch, "")
    assert proposal.status == "locked" and len(calls) == 2
    assert all(o.lock is not None for o in proposal.cells)
    assert "    cell " in "\n".join(prop.proposal_lines([proposal]))
