"""Arguments and loading shared by the subcommands that read matrix.toml."""

from __future__ import annotations

import argparse
from pathlib import Path

from pinmatrix.cell import Cell
from pinmatrix.errors import PinmatrixError
from pinmatrix.expand import Expansion, expand_matrix, select_cells
from pinmatrix.matrix import Matrix, load_matrix


def add_matrix_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("matrix", nargs="?", type=Path, default=Path("matrix.toml"),
                        help="the matrix file (default: ./matrix.toml)")


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stack", "-s", metavar="S", help="only the cells of stack S")
    parser.add_argument("-k", dest="keyword", metavar="EXPR",
                        help="only cells whose name or id matches EXPR, pytest-style: 'xformers and not int64'")


def load(path: Path) -> tuple[Matrix, Expansion]:
    matrix = load_matrix(path)
    return matrix, expand_matrix(matrix)


def selected(matrix: Matrix, expansion: Expansion, args: argparse.Namespace) -> list[Cell]:
    stack = getattr(args, "stack", None)
    if stack is not None and stack not in matrix.stacks:
        raise PinmatrixError(f"{matrix.path.name}: unknown stack {stack!r} (stacks: {', '.join(matrix.stacks)})")
    return select_cells(expansion.cells, stack=stack, keyword=getattr(args, "keyword", None))
