"""Reading matrix.toml into its cells, and choosing some of them: by stack, by a pytest-style ``-k``
expression, by id prefix. Every command and test that needs the cells comes through here."""

from __future__ import annotations

import sys
from pathlib import Path

from pinmatrix.cell import Cell
from pinmatrix.matrix.expand import Expansion, expand_matrix, select_cells
from pinmatrix.project.matrix_toml import Matrix, load_matrix, require_stack

STDIN = Path("-")


def load(path: Path) -> tuple[Matrix, Expansion]:
    """The matrix and its expansion; ``-`` reads the matrix from stdin (named <stdin>, root: this folder)."""
    if path == STDIN:
        matrix = load_matrix(Path.cwd() / "<stdin>", text=sys.stdin.read())
    else:
        matrix = load_matrix(path)
    return matrix, expand_matrix(matrix)


def select(matrix: Matrix, expansion: Expansion, *, stack: str | None = None, keyword: str | None = None,
           cell_id: str | None = None) -> list[Cell]:
    """The cells of ``stack`` (which must exist) that match ``keyword`` and ``cell_id``; all when none is given."""
    if stack is not None:
        require_stack(matrix, stack)
    return select_cells(expansion.cells, stack=stack, keyword=keyword, cell_id=cell_id)
