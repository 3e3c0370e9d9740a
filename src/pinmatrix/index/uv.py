"""Where uv is: pinmatrix resolves locks, fetches wheels for arch-scan, installs the CUDA tool wheels and the
host runtime's overlay, and builds bisect environments with it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from pinmatrix.errors import LockError


class UvMissing(LockError):
    """uv is neither beside pinmatrix's Python, on PATH, nor installed as the uv wheel."""


def find_uv() -> str:
    """uv from the same environment as pinmatrix, else from PATH."""
    candidate = Path(sys.executable).with_name("uv")
    if candidate.is_file():
        return str(candidate)
    found = shutil.which("uv")
    if found:
        return found
    try:
        from uv import find_uv_bin  # noqa: PLC0415 - the uv wheel ships the binary; a uv on PATH serves without it

        return find_uv_bin()
    except Exception:  # noqa: BLE001 - any failure means: not installed
        raise UvMissing("uv is not installed: pip install uv (pinmatrix resolves locks with it)") from None
