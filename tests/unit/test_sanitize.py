"""terminal_text's fast path for printable ASCII gives what the character rule gives: every ASCII character alone
and inside plain text, escape sequences, carriage returns, tabs and newlines with and without ``newlines``."""

from __future__ import annotations

import pytest

from pinmatrix.names import char_kind
from pinmatrix.sanitize import strip_ansi, terminal_text


def by_rule(text: str, newlines: bool) -> str:
    """The rule the fast path must agree with, one character at a time."""
    out = []
    for ch in strip_ansi(text):
        cp = ord(ch)
        out.append(ch if char_kind(ch, newlines=newlines) is None
                   else f"\\x{cp:02x}" if cp <= 0xFF else f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}")
    return "".join(out)


SAMPLES = [chr(c) for c in range(128)] + [f"ok {chr(c)} ok" for c in range(128)] + [
    "CUDA error: an illegal memory access was encountered", "", " ", "\x1b[31mred\x1b[0m", "a\r\nb", "a\rb",
    "tab\there", "line\nnext", "\x1b]0;title\x07x", "ok\u202eliaf", "caf\u00e9", "\u200b", "a\x7fb", "~!@#$%^&*()"]


@pytest.mark.parametrize("newlines", [False, True])
def test_the_fast_path_agrees_with_the_rule(newlines: bool) -> None:
    wrong = [s for s in SAMPLES if terminal_text(s, newlines=newlines) != by_rule(s, newlines)]
    assert wrong == []
    assert terminal_text("a\x1b[1mb\x07", newlines=newlines) == "ab\\x07"  # the rule itself still applies
