"""What cells need beyond a lock from the default index (``Cell.needs``: another index, a source build),
grouped so that ``validate``, ``cells`` and ``lock`` say each need once, with how many cells have it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pinmatrix.cell import Cell


@dataclass(frozen=True)
class Need:
    stack: str
    text: str  # compat.toml's words, with the source
    cell_ids: tuple[str, ...]

    def line(self) -> str:
        return f"{self.stack}: {len(self.cell_ids)} cell(s) need {self.text}"


def group_needs(cells: Iterable[Cell]) -> list[Need]:
    """One Need per (stack, need text), in the order they first appear."""
    groups: dict[tuple[str, str], list[str]] = {}
    for cell in cells:
        for text in cell.needs:
            groups.setdefault((cell.stack, text), []).append(cell.id)
    return [Need(stack, text, tuple(ids)) for (stack, text), ids in groups.items()]
