"""Which two cells the canary compares. The baseline is the stack's known-good cell (known-good.toml, read by the
promotion record's reader): the promoted cell nearest the candidate (fewest pins apart: its variant), the newest
of those; with none promoted, the matrix's current cell nearest the candidate stands in, and the verdict says so.
A candidate is a cell the matrix makes (with ``--set``: a one-off cell of the stack), else a cell known only from
its lock (``propose --lock-dir``) and the results imported for it (a GPU host's run of a candidate)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from pinmatrix.cell import Cell
from pinmatrix.errors import PinmatrixError
from pinmatrix.project.lockfile import LOCK_DIR
from pinmatrix.upgrade.canary import CanarySide
from pinmatrix.upgrade.canary_inputs import CanaryFacts, lock_pins

T = TypeVar("T")


class CanaryCandidate(NamedTuple):
    """The candidate as ``candidate_side`` found it: its stack, its facts, and its cell (None when it is known
    only from its lock and results)."""

    stack: str
    side: CanarySide
    cell: Cell | None


def nearest(pins: dict[str, str], options: Sequence[tuple[T, dict[str, str]]]) -> T:
    """The option whose pins differ from ``pins`` in the fewest axes; the first of those (options come in order
    of preference). Axes one side lacks are not counted."""
    def apart(other: dict[str, str]) -> int:
        return sum(1 for a, v in other.items() if a in pins and pins[a] != v)

    return min(options, key=lambda o: apart(o[1]))[0]


def variant_pins(pins: dict[str, str], cell: Cell | None) -> dict[str, str]:
    """``pins`` plus what tells a cell's variants apart beyond its versions and env label: the patches it applies
    (h200[xformers=0.0.35] and h200[xformers=0.0.35-int64] pin the same xformers). Without the cell (known from
    its lock alone) only the pins, so the patches count as unknown, not as different."""
    out = dict(pins)
    if cell is not None:
        out[" patches"] = ",".join(sorted(p.id for p in cell.patches_to_apply))
    return out


def _entry_side(facts: CanaryFacts, entry: dict[str, Any], cells: dict[str, Cell]) -> CanarySide:
    cell = cells.get(entry["cell_id"])
    pins = dict(entry.get("pins") or (cell.pins if cell else {}))
    name = entry.get("cell_name") or (cell.name if cell else entry["cell_id"])
    return facts.side(entry["stack"], entry["cell_id"], name, pins, cell)


def baseline_side(facts: CanaryFacts, candidate: CanarySide, stack: str, promoted: list[dict[str, Any]],
                  cells: list[Cell], known_good: str | None = None, candidate_cell: Cell | None = None
                  ) -> tuple[CanarySide, str]:
    """(the baseline's facts, where it comes from): ``known_good`` names it (a promoted cell or a matrix cell);
    else the stack's promoted cell nearest the candidate, newest first; else the matrix's cell nearest it.
    ``candidate_cell``: the candidate's cell where it is none of ``cells`` (a ``--set`` cell), for its patches."""
    by_id = {c.id: c for c in cells}
    entries = [e for e in reversed(promoted) if e.get("stack") == stack]
    if known_good is not None:
        entry = next((e for e in entries if e["cell_id"] == known_good), None)
        if entry is not None:
            return _entry_side(facts, entry, by_id), f"known-good, promoted {entry.get('promoted_at', '?')}"
        if known_good in by_id:
            return facts.of_cell(by_id[known_good]), "the matrix's cell --known-good names; not promoted"
        raise PinmatrixError(f"--known-good {known_good}: no promoted cell of stack {stack} and no cell of the "
                             "matrix has that id")
    wanted = variant_pins(candidate.pins, candidate_cell or by_id.get(candidate.cell_id))
    if entries:
        entry = nearest(wanted, [(e, variant_pins(dict(e.get("pins") or {}), by_id.get(e["cell_id"])))
                                 for e in entries])
        return _entry_side(facts, entry, by_id), f"known-good, promoted {entry.get('promoted_at', '?')}"
    own = [c for c in cells if c.stack == stack and c.id != candidate.cell_id]
    if not own:
        raise PinmatrixError(f"stack {stack}: no promoted cell and no cell of the matrix to compare the candidate with")
    cell = nearest(wanted, [(c, variant_pins(c.pins, c)) for c in reversed(own)])  # ties: the later values
    return facts.of_cell(cell), (f"no cell of stack {stack} is promoted: the matrix's current cell of the same "
                                 "variant stands in")


def candidate_side(facts: CanaryFacts, cell_id: str, cells: list[Cell], lock_dirs: list[Path],
                   package_axes: dict[str, list[str]]) -> CanaryCandidate:
    """The candidate: a cell of ``cells``, else one the results store holds records of (no cell), its pins from
    its lock (``lock_dirs``/locks/<id>.txt) and its name from the lock's header."""
    cell = next((c for c in cells if c.id == cell_id), None)
    if cell is not None:
        return CanaryCandidate(cell.stack, facts.of_cell(cell), cell)
    records = facts.store.query(cell_id=cell_id) if facts.store.path.is_file() else []
    if not records:
        raise PinmatrixError(f"--candidate {cell_id}: no cell of the matrix has that id (give its --stack and --set "
                             f"lines) and {facts.store.path} holds no result of it (`pinmatrix results --import`)")
    stack = records[0].stack
    lock = next((d / LOCK_DIR / f"{cell_id}.txt" for d in lock_dirs if (d / LOCK_DIR / f"{cell_id}.txt").is_file()),
                None)
    if lock is None:
        raise PinmatrixError(f"--candidate {cell_id}: its results are recorded but its lock is not in "
                             f"{', '.join(str(d / LOCK_DIR) for d in lock_dirs)} (give the --lock-dir propose wrote)")
    name, pins = lock_pins(lock, package_axes.get(stack, []))
    return CanaryCandidate(stack, facts.side(stack, cell_id, name, pins, None), None)

