"""How pinmatrix prints a table (cells, results, build's summary): rich's boxes on a terminal; without one
(a CI log, a pipe) one plain line per row, its columns aligned and never wrapped; JSON with ``--format json``
(the command's ``--json``). ``NO_COLOR`` (any non-empty value, no-color.org) drops colour from the boxes; the
plain and JSON forms never carry any."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from pinmatrix.sanitize import terminal_text

FORMATS = ("table", "plain", "json")


def add_format_argument(parser: argparse.ArgumentParser) -> None:
    """``--format table|plain|json``, beside the command's own ``--json`` (which stays: it is ``--format json``)."""
    parser.add_argument("--format", dest="output_format", choices=FORMATS, default=None,
                        help="table: boxes (the default on a terminal); plain: one line per row, never wrapped (the "
                             "default without a terminal, as in CI); json: the same as --json")


def output_format(args: argparse.Namespace, stream: TextIO | None = None) -> str:
    """The format asked for: ``--json``, else ``--format``, else a table on a terminal and plain text elsewhere."""
    if getattr(args, "json", False) or getattr(args, "output_format", None) == "json":
        return "json"
    return table_format(args, stream)


def table_format(args: argparse.Namespace, stream: TextIO | None = None) -> str:
    """How a table is drawn on ``stream`` (stdout by default): ``--format table|plain``, else boxes on a terminal
    and plain lines elsewhere (for a command whose JSON goes to stdout and its table to stderr)."""
    chosen = getattr(args, "output_format", None)
    if chosen in ("table", "plain"):
        return str(chosen)
    out = stream if stream is not None else sys.stdout
    return "table" if out.isatty() else "plain"


def no_color(environ: dict[str, str] | None = None) -> bool:
    return bool((os.environ if environ is None else environ).get("NO_COLOR"))


def console(stream: TextIO | None = None) -> Console:
    """A rich console for ``stream`` (stdout by default) that colours nothing under NO_COLOR and wraps no line."""
    return Console(file=stream if stream is not None else sys.stdout, highlight=False, markup=False,
                   soft_wrap=True, no_color=no_color())


@dataclass
class TableData:
    """A table as text: a title, the column headers, the rows, each row's style (rich's name, e.g. ``red``)."""

    title: str
    headers: Sequence[str]
    rows: list[tuple[str, ...]] = field(default_factory=list)
    styles: list[str | None] = field(default_factory=list)
    right: frozenset[str] = frozenset()  # columns aligned right

    def add(self, *values: str, style: str | None = None) -> None:
        self.rows.append(tuple(values))
        self.styles.append(style)

    def plain(self) -> str:
        """The title, then a line per row: columns padded to the widest value, two spaces apart, no box."""
        shown = [tuple(terminal_text(v).replace("\n", " ") for v in row) for row in [tuple(self.headers), *self.rows]]
        widths = [max(len(row[i]) for row in shown) for i in range(len(self.headers))]
        lines = [self.title] if self.title else []
        for row in shown:
            cells = [v.rjust(w) if h in self.right else v.ljust(w) for v, w, h in zip(row, widths, self.headers)]
            lines.append("  ".join(cells).rstrip())
        return "\n".join(lines) + "\n"

    def rich(self) -> Table:
        table = Table(title=self.title or None)
        for header in self.headers:
            table.add_column(header, overflow="fold", justify="right" if header in self.right else "left")
        for row, style in zip(self.rows, self.styles):
            table.add_row(*(Text(terminal_text(v)) for v in row), style=style)
        return table


def print_table(table: TableData, fmt: str, stream: TextIO | None = None) -> None:
    """``table`` as ``fmt`` says (``table`` or ``plain``; a command prints its own JSON) on ``stream``."""
    out = stream if stream is not None else sys.stdout
    if fmt == "table":
        console(out).print(table.rich())
    else:
        out.write(table.plain())
