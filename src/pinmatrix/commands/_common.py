"""Arguments and loading shared by the subcommands that read matrix.toml."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pinmatrix.cell import Cell
from pinmatrix.errors import PinmatrixError
from pinmatrix.matrix.expand import Expansion
from pinmatrix.matrix.schema import Matrix
from pinmatrix.matrix.selection import STDIN, select


def add_matrix_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("matrix", nargs="?", type=Path, default=Path("matrix.toml"),
                        help="the matrix file (default: ./matrix.toml; - reads it from stdin)")
    add_limit_argument(parser)


def add_limit_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-combinations", type=int, metavar="N", default=None,
                        help="refuse a matrix with more than N combinations before expanding it "
                             "(default: [matrix].max_combinations, else 100000)")


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stack", "-s", metavar="S", help="only the cells of stack S")
    parser.add_argument("-k", dest="keyword", metavar="EXPR",
                        help="only cells whose name or id matches EXPR, pytest-style: 'xformers and not int64'")


def read_input(path: Path, what: str = "file") -> str:
    """The text of ``path``, or of stdin when it is ``-``; one clear error line when it cannot be read."""
    if path == STDIN:
        return sys.stdin.read()
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PinmatrixError(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise PinmatrixError(f"{path}: cannot read {what}: {err}") from None


def selected(matrix: Matrix, expansion: Expansion, args: argparse.Namespace) -> list[Cell]:
    """The cells --stack and -k choose."""
    return select(matrix, expansion, stack=getattr(args, "stack", None), keyword=getattr(args, "keyword", None))
