"""For the tests of the project's data files (tests/unit/project): edit a shipped file, read a refusal's one line."""

from __future__ import annotations

import pytest

from pinmatrix.errors import PinmatrixError


def edited(text: str, old: str, new: str) -> str:
    """``text`` with the last ``old`` (the comments above the tables quote some keys) replaced by ``new``."""
    assert old in text, old
    i = text.rindex(old)
    return text[:i] + new + text[i + len(old):]


def one_line(err: pytest.ExceptionInfo[PinmatrixError]) -> str:
    text = str(err.value)
    assert "\n" not in text and err.value.exit_code == 2
    return text


def without_line(text: str, file: str) -> str:
    """A located line ``FILE:LINE: rest`` as ``FILE: rest`` (it must name a line), for the tests that pin the rest
    and check the line apart."""
    head = f"{file}:"
    assert text.startswith(head), text
    number, sep, rest = text[len(head):].partition(": ")
    assert number.isdigit() and int(number) >= 1 and sep, text
    return f"{file}: {rest}"


def line_of(text: str, fragment: str) -> int:
    """The line of ``text`` where the last ``fragment`` starts."""
    return text[:text.rindex(fragment)].count("\n") + 1
