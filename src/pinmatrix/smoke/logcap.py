"""A smoke log with a size cap: the first half of the cap is written as it arrives, the last half is kept in
memory and written when the smoke ends, and a line in between says how much was left out. A smoke that
prints without end (314 MB was seen) then costs at most the cap on disk, and both its start (the command,
the first error) and its end (the result line, faulthandler's stacks) survive."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from types import TracebackType

DEFAULT_LOG_CAP = 8 * 1024 * 1024


class CappedLog:
    def __init__(self, path: Path, cap: int = DEFAULT_LOG_CAP) -> None:
        self.path = Path(path)
        self.cap = max(1024, int(cap))
        self.head_left = self.cap // 2
        self.tail_cap = self.cap - self.head_left
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.total = 0
        self.omitted = 0
        self._fh = open(self.path, "wb")  # noqa: SIM115 - closed by close()

    def write(self, data: bytes) -> None:
        self.total += len(data)
        if self.head_left > 0:
            n = min(self.head_left, len(data))
            self._fh.write(data[:n])
            self._fh.flush()
            self.head_left -= n
            data = data[n:]
        if not data:
            return
        self.tail.append(bytes(data))
        self.tail_size += len(data)
        while self.tail and self.tail_size - len(self.tail[0]) >= self.tail_cap:
            dropped = self.tail.popleft()
            self.tail_size -= len(dropped)
            self.omitted += len(dropped)

    def close(self) -> None:
        if self._fh.closed:
            return
        tail = b"".join(self.tail)
        if len(tail) > self.tail_cap:
            self.omitted += len(tail) - self.tail_cap
            tail = tail[-self.tail_cap:]
        if self.omitted:
            self._fh.write(f"\n[pinmatrix: log capped at {self.cap} bytes: {self.omitted} of {self.total} bytes "
                           f"omitted here, the first and the last {self.tail_cap} kept]\n".encode())
        self._fh.write(tail)
        self._fh.close()

    def __enter__(self) -> CappedLog:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def cap_file(path: Path, cap: int = DEFAULT_LOG_CAP) -> None:
    """Cut a log another process wrote (a batched smoke's) to ``cap`` bytes the way CappedLog keeps them."""
    try:
        if path.stat().st_size <= max(1024, int(cap)):
            return
    except OSError:
        return
    tmp = path.with_name(f".{path.name}.capping")
    with open(path, "rb") as source, CappedLog(tmp, cap) as log:
        while chunk := source.read(1 << 20):
            log.write(chunk)
    tmp.replace(path)
