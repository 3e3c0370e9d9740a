"""A transfer's progress as a person reads it: bytes done of the total, the rate so far and the time left
(``12.0 MiB of 48.0 MiB (25%), 4.0 MiB/s, 0:09 left``), for wheel downloads, layer writes, loads into an engine
and bundle parts. The clock is given (``time.monotonic`` by default) so that tests use a fake one; ``due`` says
when a new line is worth printing (at most one per ``every`` seconds). A copy another tool makes (skopeo, an
engine's pull), whose bytes cannot be watched, is said once it ended: ``summary`` of the total its manifest
names, the time it took and the rate over it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(count: float) -> str:
    """``512 B``, ``1.5 KiB``, ``12.0 MiB``, ``1.2 GiB``: binary units, one decimal past bytes."""
    value, unit = float(count), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{int(value)} B" if unit == 0 else f"{value:.1f} {_UNITS[unit]}"


def human_seconds(seconds: float) -> str:
    """``0:09``, ``12:05``, ``1:02:03``."""
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@dataclass
class TransferMeter:
    """Bytes moved so far of ``total`` (None: not known, then no share and no time left is said)."""

    total: int | None
    clock: Callable[[], float] = time.monotonic
    every: float = 1.0  # seconds between two lines ``due`` allows
    done: int = 0
    started: float = field(init=False)
    _last: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self._last = self.clock()

    def advance(self, count: int) -> None:
        self.done += count

    def rate(self) -> float | None:
        """Bytes per second since the start; None before any byte or any time has passed."""
        elapsed = self.clock() - self.started
        return self.done / elapsed if elapsed > 0 and self.done > 0 else None

    def left(self) -> float | None:
        """Seconds to the end at the rate so far; None without a total or a rate."""
        rate = self.rate()
        if self.total is None or rate is None:
            return None
        return max(0, self.total - self.done) / rate

    def due(self) -> bool:
        """Whether ``every`` seconds passed since the last line it allowed (then the next one starts now)."""
        now = self.clock()
        if now - self._last < self.every:
            return False
        self._last = now
        return True

    def summary(self) -> str:
        """``48.0 MiB in 0:04, 12.0 MiB/s``: the bytes moved, the time since the start, and the rate (when any
        time passed)."""
        rate = self.rate()
        words = f"{human_bytes(self.done)} in {human_seconds(self.clock() - self.started)}"
        return words + (f", {human_bytes(rate)}/s" if rate is not None else "")

    def line(self) -> str:
        words = human_bytes(self.done)
        if self.total:
            words += f" of {human_bytes(self.total)} ({min(100, self.done * 100 // self.total)}%)"
        rate, left = self.rate(), self.left()
        if rate is not None:
            words += f", {human_bytes(rate)}/s"
        if left is not None:
            words += f", {human_seconds(left)} left"
        return words


@contextmanager
def opaque_copy(what: str, total: int | None, say: Callable[[str], None], *, tool: str,
                clock: Callable[[], float] = time.monotonic) -> Iterator[TransferMeter]:
    """A copy another tool makes, whose bytes cannot be watched (skopeo, an engine's pull): ``say`` hears ``total``
    (the bytes its manifest names) as it starts and, once it ended, the time it took and the rate over ``total``;
    nothing more when it failed. A tool that skips what the other side has already moves less: the rate is at
    most the one said."""
    meter = TransferMeter(total, clock=clock)
    say(f"{what}: {human_bytes(total) if total is not None else 'size not known'} ({tool}; no progress until it "
        "ends)")
    yield meter
    if total is None:
        say(f"{what}: done in {human_seconds(clock() - meter.started)}")
        return
    meter.advance(total)
    say(f"{what}: done, {meter.summary()}")
