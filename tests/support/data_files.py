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
