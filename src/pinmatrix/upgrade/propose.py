"""``pinmatrix propose``: each candidate (``candidates.py``) made into the stack's cells by the same expansion
every cell goes through (the compatibility rules, the wheels' own pins first), then each cell locked with uv as
``lock`` does (as the index stands now: a candidate is newer than the matrix's exclude_newer), or pruned with the
reason. A patch variant of an axis stays a variant where its patch still applies to the new version."""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from pinmatrix.cell import Cell
from pinmatrix.errors import MatrixError
from pinmatrix.lock.resolve import lock_cell, page_reader
from pinmatrix.matrix.selection import expand_matrix
from pinmatrix.project.matrix_toml import AxisValue, Matrix, Stack
from pinmatrix.upgrade.candidates import UpgradeCandidate

_EVERY_PRUNED = re.compile(r"^every cell is pruned, e\.g\. [^:\s]+: ")


@dataclass
class CellOutcome:
    id: str
    name: str
    locked: bool
    reason: str = ""
    lock: Path | None = None
    patches: list[str] = field(default_factory=list)  # "PATCH on PKG VERSION (still needed: ...)"


@dataclass
class Proposal:
    candidate: UpgradeCandidate
    status: Literal["locked", "pruned", "not-locked"]  # not-locked: uv could not ask an index (no verdict)
    reasons: list[str] = field(default_factory=list)
    cells: list[CellOutcome] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        c = self.candidate
        return {"stack": c.stack, "candidate": c.label, "pins": c.pins, "sets": c.sets, "why": c.why,
                "status": self.status, "reasons": self.reasons,
                "cells": [{"id": o.id, "name": o.name, "locked": o.locked, "reason": o.reason,
                           "lock": str(o.lock) if o.lock else None, "patches": o.patches} for o in self.cells]}


def moved_values(matrix: Matrix, values: list[Any], version: str) -> list[Any]:
    """An axis's values moved to ``version``: one plain value, and each patch variant whose patches all still
    apply to ``version`` (its label and patches kept)."""
    out: list[Any] = [version]
    for value in values:
        if not isinstance(value, AxisValue) or not value.patches or value.source_build:
            continue
        specs = [matrix.patches.get(p) for p in value.patches]
        if all(s is not None and Version(version) in SpecifierSet(s.applies_to) for s in specs):
            moved = value.model_copy(update={"version": version}).model_dump(exclude_none=True, exclude_defaults=True)
            if moved not in out:
                out.append({"version": version, **moved})
    return out


def candidate_matrix(matrix: Matrix, cand: UpgradeCandidate) -> Matrix:
    """The matrix with the candidate's stack narrowed to its pins (zip groups of moved axes and includes dropped)."""
    stack = matrix.stacks[cand.stack]
    data = stack.model_dump(mode="python", exclude_none=True)
    for axis, version in cand.pins.items():
        table = "axes" if axis in data.get("axes", {}) else "packages"
        if axis not in data.get(table, {}):
            continue
        current = getattr(stack.axes, axis, None) if table == "axes" else stack.packages.get(axis)
        data[table][axis] = moved_values(matrix, list(current or []), version) if axis not in (
            "cuda", "driver", "gpu", "arch") else [version]
    data["zip"] = [g for g in stack.zip if not set(g) & set(cand.pins)]
    data["include"] = []
    doc = matrix.doc.model_copy(update={"stacks": {**matrix.stacks, cand.stack: Stack.model_validate(data)}})
    return Matrix(doc, matrix.path, matrix.text)


def candidate_cells(matrix: Matrix, cand: UpgradeCandidate) -> tuple[list[Cell], list[str]]:
    """(the candidate's cells, the reasons none is left): what expansion makes of it."""
    if cand.problems:
        return [], list(cand.problems)
    try:
        expansion = expand_matrix(candidate_matrix(matrix, cand))
    except MatrixError as err:  # the stack's every cell pruned: its first reason (expansion names one)
        return [], [_EVERY_PRUNED.sub("", line.split(": ", 2)[-1]) for line in err.lines()]
    cells = [c for c in expansion.cells if c.stack == cand.stack]
    if cells:
        return cells, []
    reasons = [r for p in expansion.pruned if p.stack == cand.stack for r in p.reasons]
    return [], list(dict.fromkeys(reasons))


def patch_words(cell: Cell) -> list[str]:
    return [f"{p.id} on {p.package} {p.version}: "
            + ("already upstream" if p.status != "apply" else f"still needed (upstream: {p.upstream or 'none named'})")
            for p in cell.patches]


def propose(matrix: Matrix, cands: list[UpgradeCandidate], now: datetime, lock_dir: Path | None = None,
            uv: str | None = None) -> list[Proposal]:
    """Each candidate's cells locked (into ``lock_dir``/locks, else a scratch folder that is removed) or pruned."""
    scratch = Path(tempfile.mkdtemp(prefix="pinmatrix-propose-")) if lock_dir is None else None
    root = lock_dir or scratch
    assert root is not None
    extra = tuple(p for p in (Path(matrix.root) / c for c in matrix.settings.ca_certificates) if p.exists())
    fetcher = page_reader(extra)
    try:
        return [_locked(matrix, cand, root, now, uv, fetcher, keep=scratch is None) for cand in cands]
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _locked(matrix: Matrix, cand: UpgradeCandidate, root: Path, now: datetime, uv: str | None, fetcher: Any, *,
            keep: bool) -> Proposal:
    """The candidate's cells locked; a cell whose requirements, Python, platform and indexes failed to lock for
    another cell is not locked again (the same reason), and each reason is said once with its cell count."""
    cells, reasons = candidate_cells(matrix, cand)
    if not cells:
        return Proposal(cand, "pruned", reasons)
    failed: dict[tuple[Any, ...], str] = {}
    done = []
    for cell in cells:
        key = (cell.requirements, cell.python, cell.platform, cell.indexes)
        if key in failed:
            done.append(CellOutcome(cell.id, cell.name, False, failed[key], None, patch_words(cell)))
            continue
        res = lock_cell(cell, root, now.strftime("%Y-%m-%dT%H:%M:%SZ"), uv, fetcher)
        if not res.ok:
            failed[key] = res.reason
        done.append(CellOutcome(cell.id, cell.name, res.ok, res.reason, res.path if res.ok and keep else None,
                                patch_words(cell)))
    why: dict[str, list[str]] = {}
    for o in done:
        if not o.locked:
            why.setdefault(o.reason, []).append(o.name)
    lines = [f"{len(names)} cell(s) ({names[0]}{', ...' if len(names) > 1 else ''}): {reason}"
             for reason, names in why.items()]
    unresolvable = any("No solution found" in reason for reason in why)
    status: Literal["locked", "pruned", "not-locked"] = "locked" if not why else "pruned" if unresolvable else "not-locked"
    return Proposal(cand, status, lines, done)


def proposal_lines(proposals: list[Proposal]) -> list[str]:
    lines: list[str] = []
    for p in proposals:
        c = p.candidate
        lines.append(f"{c.stack}: {c.label}: {p.status.upper()}")
        lines.append(f"    pinmatrix cells --stack {c.stack} {' '.join(c.sets)}")
        lines += [f"    because {w}" for w in c.why]
        lines += [f"    {'pruned' if p.status == 'pruned' else 'not locked'}: {r}" for r in p.reasons]
        for o in p.cells:
            if o.locked:
                lines.append(f"    cell {o.id} {o.name}: locked")
        lines += [f"    patch {w}" for w in dict.fromkeys(w for o in p.cells for w in o.patches)]
    return lines
