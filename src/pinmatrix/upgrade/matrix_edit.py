"""``propose --write``: the locked candidates written into matrix.toml as ``include`` entries of their stacks,
so that the stack's existing cells stay as they are. Only the stack's own ``[stacks.NAME]`` section is parsed and
rewritten (tomlkit, which keeps its comments); every other byte of the file stays as it was, since tomlkit
regroups a whole document's split ``[[known_issues]]`` on output. The edit is checked twice before it is
written: the new text must mean the old document plus those entries, and it must expand with no existing cell
lost."""

from __future__ import annotations

import itertools
import re
import tomllib
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import Array, InlineTable, Table

from pinmatrix.atomic import atomic_write_text
from pinmatrix.errors import PinmatrixError
from pinmatrix.matrix.selection import expand_matrix
from pinmatrix.project.matrix_toml import Matrix, load_matrix
from pinmatrix.upgrade.propose import Proposal, moved_values


class ProposalRefused(PinmatrixError):
    """Writing the proposals would break the matrix or one of its existing cells."""


def include_entries(matrix: Matrix, proposal: Proposal) -> list[dict[str, Any]]:
    """The include entries of one candidate: one per combination of the moved axes' variants."""
    stack = matrix.stacks[proposal.candidate.stack]
    columns: list[list[tuple[str, Any]]] = []
    for axis, version in proposal.candidate.pins.items():
        current = getattr(stack.axes, axis, None) if axis in type(stack.axes).model_fields else stack.packages.get(axis)
        if current is None:
            continue
        values = [version] if axis in ("cuda", "driver", "gpu", "arch") else moved_values(matrix, list(current), version)
        columns.append([(axis, v) for v in values])
    return [dict(combo) for combo in itertools.product(*columns)]


def _inline(entry: dict[str, Any]) -> InlineTable:
    table = tomlkit.inline_table()
    for key, value in entry.items():
        if isinstance(value, dict):
            inner = tomlkit.inline_table()
            inner.update(value)
            table[key] = inner
        else:
            table[key] = value
    return table


_HEADER = re.compile(r"\s*\[")  # a table or array-of-tables header (a guess the meaning check below confirms)


def _section(lines: list[str], stack: str) -> tuple[int, int]:
    """The lines of ``[stacks.<stack>]``: its header up to the next header."""
    header = re.compile(r'\s*\[\s*stacks\s*\.\s*(?:"' + re.escape(stack) + '"|' + re.escape(stack) + r")\s*\]\s*(#.*)?$")
    start = next((i for i, line in enumerate(lines) if header.match(line)), None)
    if start is None:
        raise ProposalRefused(f"stack {stack!r} has no [stacks.{stack}] table to add include entries to")
    end = next((i for i in range(start + 1, len(lines)) if _HEADER.match(lines[i])), len(lines))
    return start, end


def _with_entries(section: str, stack: str, entries: list[dict[str, Any]]) -> str:
    try:
        doc = tomlkit.parse(section)
    except TOMLKitError as err:  # the next-header guess cut a multi-line value
        raise ProposalRefused(f"[stacks.{stack}] could not be edited in place ({err}); nothing written: add the "
                              "entries `propose` printed by hand") from None
    table = doc["stacks"][stack]  # type: ignore[index]
    assert isinstance(table, Table)
    if "include" not in table:
        table["include"] = tomlkit.array()
    include = table["include"]
    if not isinstance(include, Array):
        raise ProposalRefused(f"stacks.{stack}.include is not an array")
    for entry in entries:
        include.append(_inline(entry))
    return tomlkit.dumps(doc)


def edited_text(matrix: Matrix, proposals: list[Proposal]) -> str:
    """matrix.toml's text with each locked proposal's include entries appended to its stack; refused unless the
    new text parses to the old document with exactly those entries added."""
    text = matrix.text
    expected = tomllib.loads(text)
    for proposal in proposals:
        if proposal.status != "locked":
            continue
        stack = proposal.candidate.stack
        entries = include_entries(matrix, proposal)
        lines = text.splitlines(keepends=True)
        start, end = _section(lines, stack)
        text = "".join([*lines[:start], _with_entries("".join(lines[start:end]), stack, entries), *lines[end:]])
        expected["stacks"][stack].setdefault("include", []).extend(
            tomllib.loads(f"e = {_inline(entry).as_string()}")["e"] for entry in entries)
    try:
        meaning = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        meaning = {"unparsable": str(err)}
    if meaning != expected:
        raise ProposalRefused(f"{matrix.path.name}: the edit would change more than the stacks' include entries "
                              "(its layout defeats the in-place edit); nothing written: add the entries `propose` "
                              "printed by hand")
    return text


def write_proposals(matrix: Matrix, proposals: list[Proposal]) -> str:
    """Write the edit; refused (nothing written) when the edited matrix does not expand or loses an existing
    cell. Returns the new text."""
    text = edited_text(matrix, proposals)
    before = {c.id for c in expand_matrix(matrix).cells}
    try:
        after = {c.id for c in expand_matrix(load_matrix(matrix.path, text=text)).cells}
    except PinmatrixError as err:
        raise ProposalRefused(f"{matrix.path.name}: the proposals would make the matrix invalid: {err}") from None
    lost = before - after
    if lost:
        raise ProposalRefused(f"{matrix.path.name}: the proposals would drop {len(lost)} existing cells "
                              f"({', '.join(sorted(lost)[:5])}); nothing written")
    atomic_write_text(matrix.path, text)
    return text
