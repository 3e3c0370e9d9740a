"""Map a key path of a parsed TOML document back to a line of its text, for located error messages.

tomllib gives no positions, so this scans the text: table headers (``[a.b]``, ``[[a.b]]``) and
``key = value`` lines, tracking array-of-tables indices, and returns the line of the longest prefix of
the path that the text spells out."""

from __future__ import annotations

import re
from collections.abc import Sequence

_KEY = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_DOTTED = rf"{_KEY}(?:\s*\.\s*{_KEY})*"
_HEADER = re.compile(rf"^\s*(\[\[?)\s*({_DOTTED})\s*\]\]?")
_ASSIGN = re.compile(rf"^\s*({_DOTTED})\s*=")
_PART = re.compile(_KEY)


def _split(dotted: str) -> list[str]:
    return [p.strip("\"'") for p in _PART.findall(dotted)]


class TomlLocator:
    def __init__(self, text: str) -> None:
        self._entries: list[tuple[tuple[str | int, ...], int]] = []
        aot_counts: dict[tuple[str, ...], int] = {}
        table: tuple[str | int, ...] = ()
        in_multiline = False
        for lineno, line in enumerate(text.splitlines(), start=1):
            if in_multiline:
                if line.count('"""') % 2 == 1 or line.count("'''") % 2 == 1:
                    in_multiline = False
                continue
            header = _HEADER.match(line)
            if header:
                parts = _split(header.group(2))
                if header.group(1) == "[[":
                    key = tuple(parts)
                    index = aot_counts.get(key, 0)
                    aot_counts[key] = index + 1
                    table = (*parts, index)
                else:
                    table = tuple(parts)
                self._entries.append((table, lineno))
                continue
            assign = _ASSIGN.match(line)
            if assign:
                self._entries.append(((*table, *_split(assign.group(1))), lineno))
                if line.count('"""') % 2 == 1 or line.count("'''") % 2 == 1:
                    in_multiline = True

    def line_of(self, path: Sequence[str | int]) -> int:
        """The line that spells the longest prefix of ``path`` (1 when nothing matches)."""
        best_len, best_line = -1, 1
        target = tuple(path)
        for key, lineno in self._entries:
            n = len(key)
            if n <= len(target) and target[:n] == key and n > best_len:
                best_len, best_line = n, lineno
            # An array-of-tables entry matches a path that uses the index.
        return best_line
