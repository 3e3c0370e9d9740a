"""Arguments and loading shared by the subcommands that read matrix.toml."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pinmatrix.cell import Cell
from pinmatrix.errors import PinmatrixError
from pinmatrix.matrix.expand import Expansion
from pinmatrix.matrix.overrides import with_overrides
from pinmatrix.matrix.selection import STDIN, choose_cells
from pinmatrix.project.matrix_toml import Matrix


class ExamplesFormatter(argparse.HelpFormatter):
    """The description wrapped as usual; an epilog that starts with ``Examples:`` kept line by line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("Examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def examples(*lines: str) -> dict[str, Any]:
    """``add_parser`` keywords for an ``Examples:`` section: each line a command, optionally ``  # why``."""
    return {"epilog": "Examples:\n" + "".join(f"  {line}\n" for line in lines), "formatter_class": ExamplesFormatter}


def existing_file(text: str) -> Path:
    """An argparse type: a file that exists, checked when the command line is read (before any setup), or '-'."""
    path = Path(text)
    if text != "-" and not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: not a regular file" if path.exists() else f"{text}: no such file")
    return path


def existing_dir(text: str) -> Path:
    """An argparse type: a directory that exists, checked when the command line is read."""
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no such directory")
    return path


def add_matrix_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("matrix", nargs="?", type=Path, default=Path("matrix.toml"),
                        help="the matrix file (default: ./matrix.toml; - reads it from stdin)")
    add_limit_argument(parser)


def add_limit_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-combinations", type=int, metavar="N", default=None,
                        help="refuse a matrix with more than N combinations before expanding it "
                             "(default: [matrix].max_combinations, else 100000)")


def add_selection_arguments(parser: argparse.ArgumentParser, *, one_off: bool = True, cell: str = "id or name",
                            keyword: str = "name or id") -> None:
    """--stack, --cell and -k, as every command that chooses cells has them (``selected`` for the matrix's);
    ``one_off``: and --set, for the commands that can make a cell the matrix does not list; ``cell`` and
    ``keyword``: what --cell takes and -k matches where a command reads records, not the matrix."""
    parser.add_argument("--stack", "-s", metavar="S", help="only the cells of stack S")
    parser.add_argument("--cell", "-c", action="append", default=[], metavar="ID",
                        help=f"only this cell, by its {cell} (repeatable)")
    parser.add_argument("-k", dest="keyword", metavar="EXPR",
                        help=f"only cells whose {keyword} matches EXPR, pytest-style: 'xformers and not int64'")
    if one_off:
        parser.add_argument("--set", dest="set", action="append", default=[], metavar="AXIS=VALUE",
                            help="a one-off cell: narrow --stack's AXIS to VALUE (one of its values, or a new version "
                            "of a package axis) without editing the matrix; repeatable. Rules still apply")


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
    """The cells --stack, --cell and -k choose (with --set AXIS=VALUE: among the one-off cells of --stack that it
    makes); a selection that matches no cell is one line (``matrix.selection.choose_cells``)."""
    sets = getattr(args, "set", None) or []
    if sets:
        matrix, expansion = with_overrides(matrix, args.stack, sets)
    return choose_cells(matrix, expansion, stack=args.stack, cells=args.cell, keyword=args.keyword)
