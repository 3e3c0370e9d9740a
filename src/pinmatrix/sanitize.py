"""Text that came from outside (smoke output, imported result rows) made inert where pinmatrix shows it.

- ``strip_ansi``: terminal escape sequences (CSI colours and cursor moves, OSC titles and hyperlinks, DCS,
  8-bit CSI) removed; smoke logs are classified and summarised only after this.
- ``terminal_text``: for a terminal line: escape sequences removed, and every other control, bidi or
  invisible character (names.char_kind) shown as ``\\u202e`` instead of acting on the terminal.
- ``markdown_text`` / ``markdown_code``: for summary.md (a CI job summary renders it): the terminal rules,
  one line, HTML special characters as entities and Markdown markup escaped, so no tag, link, image or
  table break survives.
- ``file_slug``: for a file or folder name: anything but letters, digits, ``_``, ``.`` and ``-`` becomes ``_``.
"""

from __future__ import annotations

import html
import re

from pinmatrix.names import char_kind

_ANSI = re.compile(
    r"""
      \x1b\[[0-?]*[ -/]*[@-~]              # CSI: colours, cursor movement, erase
    | \x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?   # OSC: window title, hyperlinks; ended by BEL or ST
    | \x1b[PX^_][^\x1b]*(?:\x1b\\)?        # DCS, SOS, PM, APC strings
    | \x1b[ -/]*[0-~]                      # other escape sequences (charset, keypad, RIS)
    | \x9b[0-?]*[ -/]*[@-~]                # 8-bit CSI
    | [\x1b\x9b\x9d\x90]                   # a lone introducer
    """,
    re.VERBOSE,
)
_MARKDOWN = re.compile(r"([\\`*_{}\[\]|~#!])")


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape sequences (and without the \\r of progress-bar redraws)."""
    return _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n")


def _escape(ch: str) -> str:
    cp = ord(ch)
    return f"\\x{cp:02x}" if cp <= 0xFF else (f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}")


def terminal_text(text: str, *, newlines: bool = False) -> str:
    """Safe to print on a terminal: no escape sequence, no other control, bidi or invisible character
    (shown escaped); ``newlines`` keeps line breaks and tabs."""
    if text.isascii() and (text.replace("\n", "").replace("\t", "") if newlines else text).isprintable():
        return text  # printable ASCII (U+0020..U+007E) holds nothing to strip or escape: the common case, fast
    return "".join(ch if char_kind(ch, newlines=newlines) is None else _escape(ch) for ch in strip_ansi(text))


def markdown_text(text: object) -> str:
    """One line of inert Markdown: no HTML, no link or image, no table break."""
    line = terminal_text(" ".join(str(text).split("\n")).replace("\t", " "))
    return _MARKDOWN.sub(r"\\\1", html.escape(line, quote=True))


def markdown_code(text: object) -> str:
    """An inline code span of ``text``: backticks cannot be escaped inside one, so they are dropped."""
    line = terminal_text(" ".join(str(text).split("\n")).replace("\t", " ")).replace("`", "")
    line = line.replace("|", "\\|")  # GFM splits table cells on a pipe even inside a code span
    return f"`{line}`" if line.strip() else "` `"


_NOT_FILE_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def file_slug(text: str) -> str:
    """A name made of ``text`` that is safe as one path component (no separator, no control character)."""
    return _NOT_FILE_SAFE.sub("_", text)
