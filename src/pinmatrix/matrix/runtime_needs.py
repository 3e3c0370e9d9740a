"""What a cell's base must carry at run time because of what its lock holds: the check ``validate`` runs on every
locked cell, by the rules of ``data/runtime_needs.toml`` (their model: ``project/runtime_needs_rules``).

Triton compiles its launchers from C at first use, so a base without a compiler and ``Python.h`` builds an image
whose first Triton kernel fails; the rule says so before anything is built."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from pinmatrix.cell import Cell
from pinmatrix.project.lockfile import LockFileError, parse_lock
from pinmatrix.project.matrix_toml import Matrix
from pinmatrix.project.runtime_needs_rules import NeedRule, NeedsDoc, default_needs

MAX_LOCK_BYTES = 4 * 1024 * 1024  # a lock of 200 pins with hashes is ~100 kB


@dataclass(frozen=True)
class Shortfall:
    cell: Cell
    rule: NeedRule
    missing: tuple[tuple[str, ...], ...]

    def words(self) -> str:
        wanted = "; ".join(" or ".join(alts) for alts in self.missing)
        return (f"cell {self.cell.id} ({self.cell.name}) locks {self.rule.distribution}, so its base needs "
                f"{self.rule.what}: add {wanted} ({self.rule.reason}; source: {self.rule.source})")


def locked_distributions(lock_file: Path) -> set[str] | None:
    """The canonical names in a cell's lock; None when the cell has no lock yet (it is checked once locked)."""
    try:
        size = lock_file.stat().st_size
    except FileNotFoundError:
        return None
    if size > MAX_LOCK_BYTES:
        raise LockFileError(f"{lock_file}: {size} bytes is more than a lock may have ({MAX_LOCK_BYTES})")
    return set(parse_lock(lock_file.read_text(encoding="utf-8"), str(lock_file)).by_name())


def shortfalls(cell: Cell, locked: set[str], rules: NeedsDoc) -> list[Shortfall]:
    """The rules whose distribution ``cell`` locks and whose needs its mmdebstrap base does not meet (a pinned
    image's packages cannot be read from the matrix)."""
    if cell.base.kind != "mmdebstrap":
        return []
    out: list[Shortfall] = []
    for rule in rules.needs:
        if canonicalize_name(rule.distribution) in locked:
            missing = rule.missing(cell.base.packages, cell.python)
            if missing:
                out.append(Shortfall(cell, rule, tuple(tuple(m) for m in missing)))
    return out


_LOCK_NAME = re.compile(r"^[0-9a-f]{12}$")


def check_runtime_needs(matrix: Matrix, cells: Iterable[Cell], rules: NeedsDoc | None = None) -> list[str]:
    """One located line per cell whose lock (``locks/<id>.txt`` beside the matrix) holds a distribution whose
    runtime needs its base lacks; the line points at the base the cell takes (the stack's own, else matrix.base)."""
    rules = rules or default_needs()
    problems: list[str] = []
    for cell in cells:
        if not _LOCK_NAME.match(cell.id):
            continue
        locked = locked_distributions(matrix.root / "locks" / f"{cell.id}.txt")
        if locked is None:
            continue
        stack = matrix.stacks.get(cell.stack)
        path: tuple[str | int, ...] = (("stacks", cell.stack, "base", "packages") if stack is not None and stack.base
                                       else ("matrix", "base", "packages"))
        problems.extend(matrix.where(path, s.words()) for s in shortfalls(cell, locked, rules))
    return problems
