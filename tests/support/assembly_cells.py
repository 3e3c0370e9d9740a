"""Shared by tests/unit/image/assembly/test_assemble_flow.py and tests/integration/test_assemble_bases.py."""

from __future__ import annotations

from conftest import REPO
from pinmatrix.matrix.expand import select_cells
from pinmatrix.matrix.selection import load


def demo_cells():  # noqa: ANN201
    matrix, expansion = load(REPO / "matrix.toml")
    return select_cells(expansion.cells, stack="demo")
