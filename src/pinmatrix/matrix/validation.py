""""Is this matrix valid?", answered in one place: the schema and the expansion's checks (``selection.load``:
names, patches and their sha256, known versions, rules, pruned stacks, duplicate ids) and each stack's
promotion policy, whose schema lives with promotion; and what each locked cell's base must carry at run time
(``runtime_needs``). Every problem is one located line of one MatrixError."""

from __future__ import annotations

from pathlib import Path

from pinmatrix.errors import MatrixError, PinmatrixError
from pinmatrix.matrix.expand import Expansion
from pinmatrix.matrix.runtime_needs import check_runtime_needs
from pinmatrix.matrix.selection import load
from pinmatrix.project.matrix_toml import Matrix
from pinmatrix.project.policy import policy_for


def validate_matrix(path: Path) -> tuple[Matrix, Expansion]:
    """The matrix and its expansion when everything holds; MatrixError with every problem otherwise."""

    matrix, expansion = load(path)
    problems: list[str] = []
    for stack in matrix.stacks:
        try:
            policy_for(matrix, stack)
        except PinmatrixError as err:
            problems.append(str(err))
    problems.extend(check_runtime_needs(matrix, expansion.cells))
    if problems:
        raise MatrixError(list(dict.fromkeys(problems)))
    return matrix, expansion
