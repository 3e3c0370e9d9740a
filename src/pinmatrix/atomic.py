"""Write-then-rename: a reader never sees a half-written file, a crash leaves the old one in place."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """A temporary path next to ``target``; renamed over it when the block ends without an exception."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def atomic_open(target: Path, mode: str = "wb") -> Iterator[IO]:  # type: ignore[type-arg]
    """Open a temporary file for writing that replaces ``target`` when the block ends cleanly."""
    with atomic_path(target) as tmp:
        with open(tmp, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())


def atomic_write_bytes(target: Path, data: bytes) -> None:
    with atomic_open(target, "wb") as handle:
        handle.write(data)


def atomic_write_text(target: Path, text: str) -> None:
    atomic_write_bytes(target, text.encode("utf-8"))
