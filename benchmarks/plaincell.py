"""The cell a one-cell benchmark measures: the first cell of a stack without a patch, with what it needs around it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pinmatrix.cell import Cell
from pinmatrix.matrix.expand import select_cells
from pinmatrix.matrix.selection import expand_matrix
from pinmatrix.project.matrix_toml import load_matrix


@dataclass(frozen=True)
class PlainCell:
    root: Path  # the project (the working directory)
    cell: Cell
    extra_ca: tuple[Path, ...]  # the matrix's ca_certificates that exist here
    work_root: Path  # .pinmatrix/bench, made


def plain_cell(stack: str) -> PlainCell:
    root = Path(".").resolve()
    matrix = load_matrix(root / "matrix.toml")
    cells = select_cells(expand_matrix(matrix).cells, stack=stack)
    cell = next((c for c in cells if not c.patches_to_apply), cells[0])
    work_root = root / ".pinmatrix" / "bench"
    work_root.mkdir(parents=True, exist_ok=True)
    return PlainCell(root, cell, tuple(Path(p) for p in matrix.settings.ca_certificates if Path(p).exists()),
                     work_root)
