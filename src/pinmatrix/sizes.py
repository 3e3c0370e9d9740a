"""Byte counts given on the command line: ``56MB`` (10^6), ``60MiB`` (2^20), ``1000`` (bytes); and a file read
no further than the byte count it may have."""

from __future__ import annotations

import re
from pathlib import Path

from pinmatrix.errors import PinmatrixError

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30}
_SIZE = re.compile(r"\s*([0-9]{1,15}(?:\.[0-9]{1,6})?)\s*([A-Za-z]{0,3})\s*")


class SizeError(PinmatrixError):
    """A byte count that is not one, or is below what its option allows."""


def parse_size(text: str, option: str, *, minimum: int = 1) -> int:
    """``text`` as a byte count of at least ``minimum``; a bad one is refused naming ``option``."""
    m = _SIZE.fullmatch(text)
    unit = m.group(2).upper() if m else ""
    if not m or unit not in _UNITS:
        raise SizeError(f"{option} {text!r}: expected a size such as 56MB, 60MiB or 1000000")
    size = int(float(m.group(1)) * _UNITS[unit])
    if size < minimum:
        raise SizeError(f"{option} {text!r}: at least {minimum} byte{'s' if minimum != 1 else ''}")
    return size


def read_capped(path: Path, limit: int, what: str, error: type[PinmatrixError]) -> bytes:
    """The bytes of ``path``, at most ``limit`` (one byte past it is read, no more): a file that cannot be read, or
    is larger, is ``error`` in one line naming the path and ``what`` it should be ("the bundle manifest")."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as err:
        raise error(f"{path}: cannot read {what}: {err.strerror or err}") from None
    if len(data) > limit:
        raise error(f"{path}: larger than {limit} bytes: not {what}")
    return data
