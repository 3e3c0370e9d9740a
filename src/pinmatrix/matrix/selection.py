"""Reading matrix.toml into its cells (parse, validate, expand), and choosing some of them: by stack, by a
pytest-style ``-k`` expression, by id or name (``choose_cells``: what every command's --stack, --cell and -k mean).
Every command and test that needs the cells comes through here."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from pinmatrix.cell import Cell
from pinmatrix.errors import MatrixError, PinmatrixError
from pinmatrix.matrix.compat import CompatRules, rules_for
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
    combinations. MatrixError with every problem, located. By default the rules read the project's cached wheel
    metadata first (``compat.rules_for``)."""
    rules = rules or rules_for(matrix.root, matrix.settings.python)
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


def choose_cells(matrix: Matrix, expansion: Expansion, *, stack: str | None = None, cells: Sequence[str] = (),
                 keyword: str | None = None) -> list[Cell]:
    """The cells of ``stack`` (all stacks: None) that ``cells`` name (each an id or a name; none: every cell) and
    that match ``keyword`` (``-k``, over name and id). A name in ``cells`` that no cell has, and a selection that
    leaves no cell, are each one line naming what was asked."""
    pool = select(matrix, expansion, stack=stack)
    where = f"stack {stack}" if stack is not None else matrix.path.name
    chosen = pool
    if cells:
        chosen = []
        for key in dict.fromkeys(cells):
            hit = [c for c in pool if key in (c.id, c.name)]
            if not hit:
                raise PinmatrixError(f"no cell with id or name {key!r} in {where} (see `pinmatrix cells`)")
            chosen += [c for c in hit if all(c.id != seen.id for seen in chosen)]
    if keyword:
        chosen = select_cells(chosen, keyword=keyword)
    if not chosen:
        asked = " and ".join(filter(None, [f"--cell {' '.join(cells)}" if cells else "",
                                           f"-k {keyword!r}" if keyword else ""]))
        raise PinmatrixError(f"no cell matches {asked} in {where}" if asked else f"no cell in {where}")
    return chosen
