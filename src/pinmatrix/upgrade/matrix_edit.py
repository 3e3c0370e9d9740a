"""``propose --write``: the locked candidates written into matrix.toml as ``include`` entries of their stacks
(tomlkit keeps every comment and the layout), so that the stack's existing cells stay as they are. The edited
text is expanded before it is written: a proposal that would lose or change an existing cell is refused."""

from __future__ import annotations

import itertools
from typing import Any

import tomlkit
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


def edited_text(matrix: Matrix, proposals: list[Proposal]) -> str:
    """matrix.toml's text with each locked proposal's include entries appended to its stack."""
    doc = tomlkit.parse(matrix.text)
    for proposal in proposals:
        if proposal.status != "locked":
            continue
        stack = doc["stacks"][proposal.candidate.stack]  # type: ignore[index]
        assert isinstance(stack, Table)
        if "include" not in stack:
            stack["include"] = tomlkit.array()
        include = stack["include"]
        assert isinstance(include, Array)
        for entry in include_entries(matrix, proposal):
            include.append(_inline(entry))
    return tomlkit.dumps(doc)


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
