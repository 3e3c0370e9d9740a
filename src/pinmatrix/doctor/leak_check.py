"""``pinmatrix doctor --leak-check``: the unified-memory leak measurement (issue 44), run for a few seconds in a
child process with the host's Python (leak_probe.py, through torch or cupy), and judged here.

Seed 003's GB10 lost memory on driver 590.48.01 that monitoring did not see: AnonPages and Slab stayed flat while
MemAvailable fell. So the check sets the system's drop of MemAvailable over the allocate / free rounds against
everything that accounts for memory: the growth of this process's RSS or of AnonPages (the larger: the process's
pages are in both), of Slab, and of what the CUDA allocator still reserves. What is left is the *unexplained
drop*; over half of one round's buffer is a leak (the smoke's limit, smoke/host.py's unified-memory-leak).

The child's output is data: only its last ``PINMATRIX-LEAK`` line of at most ``MAX_LINE`` characters is read,
from the last ``MAX_OUTPUT`` bytes, and it must fit ``ChildReport`` (known keys, integers in range)."""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Annotated, Any

from pydantic import Field, ValidationError

from pinmatrix.datamodel import Strict
from pinmatrix.doctor import leak_probe

MAX_OUTPUT = 64 * 1024  # bytes of the child's stdout read (its end)
MAX_LINE = 4096
DEFAULT_LEAK_SECONDS = 5.0
MAX_SECONDS = 300.0  # --leak-seconds at most
START_S = 120.0  # the child's own start on top of the rounds: importing torch, making a CUDA context
NEEDS = "needs torch or cupy"
PROBE = Path(leak_probe.__file__)  # the child, run as a file by the host's Python
MiB = 2**20
Bytes = Annotated[int, Field(ge=0, le=2**50)]


class Sample(Strict):
    """One look at memory, in bytes: the system's (/proc/meminfo) and the child's own."""

    mem_available: Bytes
    anon_pages: Bytes
    slab: Bytes
    rss: Bytes
    reserved: Bytes  # the CUDA allocator's: torch's memory_reserved, cupy's pool total
    allocated: Bytes
    gpu_used: Bytes


class ChildReport(Strict):
    backend: Annotated[str, Field(min_length=1, max_length=80)] | None
    why: Annotated[str, Field(max_length=300)] | None = None
    rounds: Annotated[int, Field(ge=1, le=leak_probe.MAX_ROUNDS)] | None = None
    buffer_bytes: Annotated[int, Field(ge=MiB, le=2**34)] | None = None
    seconds: Annotated[float, Field(ge=0, le=10 * MAX_SECONDS)] | None = None
    before: Sample | None = None
    after: Sample | None = None


@dataclass(frozen=True)
class Measurement:
    backend: str
    rounds: int
    buffer_bytes: int
    seconds: float
    before: Sample
    after: Sample

    def growth(self, key: str) -> int:
        return int(getattr(self.after, key)) - int(getattr(self.before, key))

    @property
    def drop(self) -> int:
        """How much MemAvailable fell."""
        return -self.growth("mem_available")

    @property
    def explained(self) -> int:
        """What this process and the kernel's own counters account for of a drop (only growth explains one)."""
        return (max(0, self.growth("rss"), self.growth("anon_pages")) + max(0, self.growth("slab"))
                + max(0, self.growth("reserved")))

    @property
    def unexplained(self) -> int:
        return self.drop - self.explained

    @property
    def limit(self) -> int:
        return self.buffer_bytes // 2

    @property
    def leaks(self) -> bool:
        return self.unexplained > self.limit


@dataclass(frozen=True)
class LeakCheck:
    python: str
    measurement: Measurement | None
    why_not: str | None = None  # why it was not run, one line

    @property
    def verdict(self) -> str:
        if self.measurement is None:
            return "not run"
        return "leak" if self.measurement.leaks else "clean"

    def finding(self) -> str | None:
        m = self.measurement
        if m is None or not m.leaks:
            return None
        return (f"unified-memory leak: MemAvailable fell {m.drop / MiB:.1f} MiB over {m.rounds} freed rounds, "
                f"{m.unexplained / MiB:.1f} MiB of it unexplained (limit {m.limit / MiB:.0f} MiB)")

    def lines(self) -> list[str]:
        m = self.measurement
        if m is None:
            return [f"not run: {self.why_not}"]
        mib = {k: m.growth(k) / MiB for k in ("rss", "anon_pages", "slab", "reserved", "allocated", "gpu_used")}
        return [f"{m.backend} in {self.python}: {m.rounds} rounds of {m.buffer_bytes // MiB} MiB (allocator and "
                f"managed) in {m.seconds:.1f} s",
                f"MemAvailable {-m.drop / MiB:+.1f} MiB; accounted for: RSS {mib['rss']:+.1f}, AnonPages "
                f"{mib['anon_pages']:+.1f}, Slab {mib['slab']:+.1f}, allocator reserved {mib['reserved']:+.1f} "
                f"(allocated {mib['allocated']:+.1f}) MiB; GPU memory in use {mib['gpu_used']:+.1f} MiB",
                f"unexplained drop {m.unexplained / MiB:.1f} MiB (limit {m.limit / MiB:.0f} MiB): "
                + ("LEAK" if m.leaks else "clean")]

    def to_dict(self) -> dict[str, Any]:
        m = self.measurement
        out: dict[str, Any] = {"verdict": self.verdict, "python": self.python, "why_not_run": self.why_not}
        if m is not None:
            out |= {"backend": m.backend, "rounds": m.rounds, "buffer_bytes": m.buffer_bytes, "seconds": m.seconds,
                    "before": m.before.model_dump(), "after": m.after.model_dump(),
                    "mem_available_drop": m.drop, "explained": m.explained, "unexplained_drop": m.unexplained,
                    "limit": m.limit}
        return out


def read_report(stdout: str, python: str) -> LeakCheck:
    """The check from the child's stdout (already cut to its end): the last result line, parsed and checked."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith(leak_probe.RESULT_PREFIX)]
    if not lines:
        return LeakCheck(python, None, "the child printed no result line")
    text = lines[-1][len(leak_probe.RESULT_PREFIX):]
    if len(text) > MAX_LINE:
        return LeakCheck(python, None, f"the child's result line is over {MAX_LINE} characters")
    try:
        report = ChildReport.model_validate(json.loads(text))
    except (ValueError, ValidationError) as err:
        first = str(err).splitlines()
        return LeakCheck(python, None, f"the child's result is not a measurement: {' '.join(first[:3])[:200]}")
    if report.backend is None:
        if report.why is None:
            return LeakCheck(python, None, f"the leak check {NEEDS}; neither imports in {python}")
        return LeakCheck(python, None, f"the leak check cannot run in {python}: {report.why}")
    if (report.rounds is None or report.buffer_bytes is None or report.seconds is None or report.before is None
            or report.after is None):
        return LeakCheck(python, None, "the child's result lacks its samples")
    return LeakCheck(python, Measurement(report.backend, report.rounds, report.buffer_bytes, report.seconds,
                                         report.before, report.after))


def _tail(stream: IO[bytes], size: int) -> str:
    stream.seek(0, 2)
    end = stream.tell()
    stream.seek(max(0, end - size))
    return stream.read(size).decode("utf-8", "replace")


def run_leak_check(python: str, seconds: float) -> LeakCheck:
    """Run leak_probe.py for ``seconds`` in ``python`` (its start on top, at most START_S) and judge it."""
    cmd = [python, "-P", str(PROBE), f"{seconds:g}"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            done = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, timeout=seconds + START_S,
                                  check=False)
        except subprocess.TimeoutExpired:
            return LeakCheck(python, None, f"the child did not finish in {seconds + START_S:.0f} s")
        except OSError as error:
            return LeakCheck(python, None, f"cannot start {python}: {error.strerror}")
        if done.returncode != 0:
            last = (_tail(err, 2048).strip().splitlines() or ["no output"])[-1]
            return LeakCheck(python, None, f"the child exited with status {done.returncode}: {last[:200]}")
        return read_report(_tail(out, MAX_OUTPUT), python)
