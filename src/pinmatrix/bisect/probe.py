"""One probe: a smoke run at one point of a search (a parameter value of one cell, or one cell of an axis),
looked up in the results store first and recorded there when it has to run."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pinmatrix.bisect.search import ProbeLimit, ProbeOutcome
from pinmatrix.project.catalogue import Smoke
from pinmatrix.results.store import HostFingerprint, ResultsStore, SmokeRecord
from pinmatrix.sanitize import file_slug
from pinmatrix.smoke.overlay import Overlay
from pinmatrix.smoke.runner import RunOptions, run_one
from pinmatrix.smoke.target import SmokeTarget

# How a smoke's status counts in a search: an expected failure still fails, an unexpected pass still passes.
VERDICTS: dict[str, ProbeOutcome] = {"pass": "pass", "xpass": "pass", "fail": "fail", "xfail": "fail",
                                "degraded": "fail", "skip": "skip"}


class CannotProbe(Exception):
    """The point cannot be made (it does not resolve, does not build, ...): the search skips it."""


@dataclass(frozen=True)
class PointEnv:
    """How to run the smoke at a point: the runner's options (interpreter, runtime, image digest) and the
    host runtime's overlay, if any."""

    options: RunOptions
    overlay: Overlay | None = None


@dataclass
class Probe:
    index: int
    value: Any  # the parameter value, or the axis value as shown
    cell_id: str
    status: str  # the smoke's status; "skip" also when the point could not be made
    verdict: ProbeOutcome
    failure_class: str | None
    reason: str
    duration_s: float
    reused: bool  # taken from the results store, not run again
    run_id: str | None = None
    log_path: str | None = None
    recorded: bool = True  # False for a point that could not be made (nothing ran, nothing recorded)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Prober:
    """Runs probes for one smoke on one host, never twice for the same cell, host and parameter values."""

    def __init__(self, store: ResultsStore, host: HostFingerprint, smoke: Smoke, *, run_id: str,
                 logs_dir: Path, echo: Callable[[str], None] = print, max_probes: int | None = None,
                 any_digest: bool = False, max_seconds: float | None = None) -> None:
        self.store = store
        self.host = host
        self.smoke = smoke
        self.run_id = run_id
        self.logs_dir = logs_dir
        self.echo = echo
        self.max_probes = max_probes
        self.deadline = None if max_seconds is None else time.monotonic() + max_seconds
        self.max_seconds = max_seconds
        self.any_digest = any_digest  # version search: a cell's result counts whatever image it ran in
        self.ran = 0
        self.probes: list[Probe] = []

    def recorded(self, cell_id: str, params: dict[str, Any], digest: str | None) -> SmokeRecord | None:
        """The latest result of this smoke for this cell, host and parameter values."""
        recs = self.store.query(cell_id=cell_id, host_id=self.host.id, smoke=self.smoke.name, probe_params=params,
                                probes=True)  # the cell's own runs and earlier probes
        if not self.any_digest:
            recs = [r for r in recs if r.image_digest == digest]
        return max(recs, key=lambda r: (r.finished_at, r.started_at)) if recs else None

    def probe(self, index: int, value: Any, label: str, cell: SmokeTarget, params: dict[str, Any],
              prepare: Callable[[], PointEnv], digest: str | None = None) -> Probe:
        """The verdict at one point: the recorded result if there is one, else a new run (``prepare`` makes
        the point: overlay, lock, venv or image). A point that cannot be made is a skip."""
        rec = self.recorded(cell.id, params, digest)
        if rec is not None:
            p = Probe(index, value, cell.id, rec.status, VERDICTS.get(rec.status, "fail"), rec.failure_class,
                      rec.reason, rec.duration_s, True, rec.run_id, rec.log_path)
            return self._done(p, label)
        if self.max_probes is not None and self.ran >= self.max_probes:
            raise ProbeLimit(f"--max-probes {self.max_probes} reached; rerun to resume")
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise ProbeLimit(f"--max-seconds {self.max_seconds:g} spent; rerun to resume")
        try:
            env = prepare()
        except CannotProbe as err:
            p = Probe(index, value, cell.id, "skip", "skip", None, f"cannot probe: {err}", 0.0, False,
                      recorded=False)
            return self._done(p, label)
        self.ran += 1
        run_id = f"{self.run_id}.{self.ran:03d}"
        work = (self.logs_dir / self.run_id / file_slug(cell.id)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        rec = run_one(cell, self.smoke, env.options, host=self.host, run_id=run_id, work=work, overlay=env.overlay,
                      params=params or None)
        self.store.record(rec)
        p = Probe(index, value, cell.id, rec.status, VERDICTS.get(rec.status, "fail"), rec.failure_class,
                  rec.reason, rec.duration_s, False, rec.run_id, rec.log_path)
        return self._done(p, label)

    def skip(self, index: int, value: Any, label: str, cell_id: str, reason: str) -> ProbeOutcome:
        """A point that cannot even be expanded into a cell (pruned by the rules): skipped, nothing recorded."""
        return self._done(Probe(index, value, cell_id, "skip", "skip", None, reason, 0.0, False, recorded=False),
                          label).verdict

    def _done(self, p: Probe, label: str) -> Probe:
        self.probes.append(p)
        how = "recorded" if p.reused else ("skipped" if not p.recorded else f"{p.duration_s:.1f}s")
        cls = f" [{p.failure_class}]" if p.failure_class else ""
        reason = p.reason if len(p.reason) <= 160 else p.reason[:157] + "..."
        self.echo(f"  probe {len(self.probes):>2} {label:<28} {p.status.upper():8} {how:>8}{cls} {reason}".rstrip())
        return p

