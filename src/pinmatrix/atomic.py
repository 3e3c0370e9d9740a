"""Write-then-rename: a reader never sees a half-written file, a crash leaves the old one in place. The one
place pinmatrix writes files that others read (locks, records, reports, keys)."""

from __future__ import annotations

import fcntl
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs on this host (one of someone else's counts): a temporary file or an
    owner record left by a process that is gone may be removed."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _temporary(target: Path) -> Path:
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """A fresh temporary path next to ``target``; renamed over it when the block ends without an exception."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(target)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def atomic_open(target: Path, mode: str = "wb", *, perms: int = 0o666) -> Iterator[IO]:  # type: ignore[type-arg]
    """Open a new temporary file (created with ``perms`` less the umask; 0o600 for secrets) that replaces
    ``target`` when the block ends cleanly."""
    with atomic_path(target) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, perms)
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())


def atomic_write_bytes(target: Path, data: bytes, *, perms: int = 0o666) -> None:
    with atomic_open(target, "wb", perms=perms) as handle:
        handle.write(data)


def atomic_write_text(target: Path, text: str, *, perms: int = 0o666) -> None:
    atomic_write_bytes(target, text.encode("utf-8"), perms=perms)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) for the block: one process at a time makes what
    the lock guards (a base root filesystem, the embedded registry's start)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
