"""Map a key path of a parsed TOML document back to a line of its text, for located error messages.

tomllib gives no positions, so this scans the text: table headers (``[a.b]``, ``[[a.b]]``) and
``key = value`` lines, tracking array-of-tables indices, and returns the line of the longest prefix of
the path that the text spells out."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence

_KEY = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_DOTTED = rf"{_KEY}(?:\s*\.\s*{_KEY})*"
_HEADER = re.compile(rf"^\s*(\[\[?)\s*({_DOTTED})\s*\]\]?")
_ASSIGN = re.compile(rf"^\s*({_DOTTED})\s*=")
_PART = re.compile(_KEY)


def _split(dotted: str) -> list[str]:
    return [_unquote(p) for p in _PART.findall(dotted)]


def _unquote(part: str) -> str:
    """A bare key as is; a quoted key as TOML reads it (escapes such as \\u202e decoded)."""
    if part[:1] in "\"'":
        try:
            return str(tomllib.loads(f"k = {part}")["k"])
        except tomllib.TOMLDecodeError:
            return part.strip("\"'")
    return part


def nesting_problem(text: str, limit: int) -> int | None:
    """The line where arrays and inline tables first nest deeper than ``limit``, or None. Scans the text
    (strings and comments skipped) so that a hostile depth is refused before a recursive parser sees it."""
    depth, line, i, n = 0, 1, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
        elif ch == "#":
            end = text.find("\n", i)
            i = n if end == -1 else end
            continue
        elif ch in "\"'":
            i, line = _skip_string(text, i, line)
            continue
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return line
        elif ch in "]}":
            depth = max(0, depth - 1)
        i += 1
    return None


def _skip_string(text: str, i: int, line: int) -> tuple[int, int]:
    """Index just past the string that starts at ``i``, and the line it ends on."""
    quote = text[i]
    triple = text.startswith(quote * 3, i)
    j = i + (3 if triple else 1)
    n = len(text)
    while j < n:
        ch = text[j]
        if ch == "\\" and quote == '"':
            line += text[j + 1: j + 2] == "\n"
            j += 2
            continue
        if ch == "\n":
            line += 1
            if not triple:
                return j, line - 1  # an unterminated one-line string: the parser will say so
        if ch == quote and (not triple or text.startswith(quote * 3, j)):
            return j + (3 if triple else 1), line
        j += 1
    return n, line


def _indexed(parts: list[str], aot_counts: dict[tuple[str, ...], int]) -> tuple[str | int, ...]:
    """A header's path with the index of each array of tables it is in (or is): ``[toolchain.cuda]`` after the
    second ``[[toolchain]]`` is ``("toolchain", 1, "cuda")``."""
    out: list[str | int] = []
    for i, part in enumerate(parts):
        out.append(part)
        seen = aot_counts.get(tuple(parts[: i + 1]))
        if seen:
            out.append(seen - 1)
    return tuple(out)


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
                    aot_counts[tuple(parts)] = aot_counts.get(tuple(parts), 0) + 1
                table = _indexed(parts, aot_counts)
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
