"""pytest-style ``-k`` expressions over cell names and ids: ``xformers and not int64``, ``sm_121 or demo``.

Each bare word matches when it is a case-insensitive substring of the cell's name or id; words combine
with ``and``, ``or``, ``not`` and parentheses."""

from __future__ import annotations

import re
from collections.abc import Callable

from pinmatrix.errors import PinmatrixError

_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")


class KeywordError(PinmatrixError):
    pass


def compile_keyword(expr: str) -> Callable[[str], bool]:
    tokens = [t for t in _TOKEN.findall(expr) if t]
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        if pos >= len(tokens):
            raise KeywordError(f"-k {expr!r}: expression ends early")
        pos += 1
        return tokens[pos - 1]

    def parse_or() -> Callable[[str], bool]:
        left = parse_and()
        while peek() == "or":
            take()
            right = parse_and()
            left = (lambda a, b: lambda s: a(s) or b(s))(left, right)
        return left

    def parse_and() -> Callable[[str], bool]:
        left = parse_not()
        while peek() == "and":
            take()
            right = parse_not()
            left = (lambda a, b: lambda s: a(s) and b(s))(left, right)
        return left

    def parse_not() -> Callable[[str], bool]:
        if peek() == "not":
            take()
            inner = parse_not()
            return lambda s: not inner(s)
        return parse_atom()

    def parse_atom() -> Callable[[str], bool]:
        token = take()
        if token == "(":
            inner = parse_or()
            if take() != ")":
                raise KeywordError(f"-k {expr!r}: missing ')'")
            return inner
        if token in (")", "and", "or"):
            raise KeywordError(f"-k {expr!r}: unexpected {token!r}")
        word = token.lower()
        return lambda s: word in s

    if not tokens:
        raise KeywordError("-k: empty expression")
    matcher = parse_or()
    if pos != len(tokens):
        raise KeywordError(f"-k {expr!r}: unexpected {tokens[pos]!r}")
    return lambda text: matcher(text.lower())
