"""report.json written a piece at a time: the report's head, then each failure and each cell as one compact JSON
line, so a fleet's report (thousands of cells, each with its results and history) is never one string in memory,
and a reader can take it line by line (``pinmatrix-report/1``: ``model.report_head``, then each stack's
``stack_head`` with its ``cells``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TextIO

from pinmatrix.report.model import Report, cell_to_dict, report_head, stack_head


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _array(items: Iterator[str], indent: str) -> Iterator[str]:
    """A JSON array of already encoded items, one per line."""
    yield "["
    first = True
    for item in items:
        yield ("\n" if first else ",\n") + indent + item
        first = False
    yield "]" if first else "\n" + indent[:-2] + "]"


def json_chunks(report: Report) -> Iterator[str]:
    """The JSON form, in pieces: every piece is at most one cell, one failure or one field of the head."""
    head = report_head(report)
    yield "{\n"
    for key, value in head.items():
        if key == "failures":
            yield f"  {_dumps(key)}: "
            yield from _array((_dumps(f) for f in value), "    ")
            yield ",\n"
        else:
            yield f"  {_dumps(key)}: {_dumps(value)},\n"
    yield '  "stacks": ['
    for i, stack in enumerate(report.stacks):
        fields = stack_head(stack)
        yield ("\n" if i == 0 else ",\n") + "    {" + "".join(f"{_dumps(k)}: {_dumps(v)}, " for k, v in fields.items())
        yield '"cells": '
        yield from _array((_dumps(cell_to_dict(c, stack.hosts)) for c in stack.cells), "      ")
        yield "}"
    yield "\n  ]\n}\n" if report.stacks else "]\n}\n"


def write_json(report: Report, handle: TextIO) -> None:
    """Write the JSON form to ``handle`` as it is made."""
    for chunk in json_chunks(report):
        handle.write(chunk)
