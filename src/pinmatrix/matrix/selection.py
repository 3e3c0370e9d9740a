"""Reading matrix.toml into its cells (parse, validate, expand), and choosing some of them: by stack, by a
pytest-style ``-k`` expression, by id prefix. Every command and test that needs the cells comes through here."""

from __future__ import annotations

import sys
from pathlib import Path

from pinmatrix.cell import Cell
from pinmatrix.errors import MatrixError
from pinmatrix.matrix.compat import CompatRules
from pinmatrix.matrix.expand import Expansion, expand_cells, select_cells
from pinmatrix.matrix.runtime_needs import check_runtime_needs
from pinmatrix.matrix.validation import validate
from pinmatrix.project.matrix_toml import Matrix, load_matrix, require_stack

STDIN = Path("-")


def load(path: Path) -> tuple[Matrix, Expansion]:
    """The matrix and its expansion; ``-`` reads the matrix from stdin (named <stdin>, root: this folder)."""
    if path == STDIN:
        matrix = load_matrix(Path.cwd() / "<stdin>", text=sys.stdin.read())
    else:
        matrix = load_matrix(path)
    return matrix, expand_matrix(matrix)


def expand_matrix(matrix: Matrix, rules: CompatRules | None = None, *,
                  max_combinations: int | None = None) -> Expansion:
    """A parsed matrix validated (``matrix.validation``), then expanded: every stack's cells and pruned
    combinations. MatrixError with every problem, located."""
    validate(matrix, rules)
    return expand_cells(matrix, rules, max_combinations=max_combinations)


def validate_matrix(path: Path) -> tuple[Matrix, Expansion]:
    """``pinmatrix validate``: the matrix and its expansion when everything holds, including what each locked
    cell's base must carry at run time (``runtime_needs``); MatrixError with every problem otherwise."""
    matrix, expansion = load(path)
    problems = check_runtime_needs(matrix, expansion.cells)
    if problems:
        raise MatrixError(list(dict.fromkeys(problems)))
    return matrix, expansion


def select(matrix: Matrix, expansion: Expansion, *, stack: str | None = None, keyword: str | None = None,
           cell_id: str | None = None) -> list[Cell]:
    """The cells of ``stack`` (which must exist) that match ``keyword`` and ``cell_id``; all when none is given."""
    if stack is not None:
        require_stack(matrix, stack)
    return select_cells(expansion.cells, stack=stack, keyword=keyword, cell_id=cell_id)
