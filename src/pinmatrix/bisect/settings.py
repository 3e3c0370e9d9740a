"""What both searches (``bisect param`` and ``bisect version``) are run with: one settings object, built once from
the command line (``commands/bisect.probe_settings``), that makes the prober and the smoke runner's options."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pinmatrix.bisect.probe import Prober
from pinmatrix.errors import PinmatrixError
from pinmatrix.paths import LOGS_DIR
from pinmatrix.project.catalogue import Smoke
from pinmatrix.results.store import DEFAULT_PATH, PROBE_RUN_PREFIX, HostFingerprint, ResultsStore
from pinmatrix.smoke.runner import RunOptions, new_run_id


@dataclass(frozen=True)
class ProbeSettings:
    results: Path = DEFAULT_PATH  # the results store every probe is recorded in (and found again from)
    logs_dir: Path = LOGS_DIR
    smoke_dir: Path | None = None
    timeout_s: float | None = None  # caps each probe's own timeout
    python: str = sys.executable  # the interpreter of the host runtime's probes
    max_probes: int | None = None  # new probes at most, then stop (a rerun resumes)
    max_seconds: float | None = None  # no new probe after this, then stop
    max_skips: int = 5  # points that cannot be probed before the search gives up

    def __post_init__(self) -> None:
        if self.max_probes is not None and self.max_probes < 1:
            raise PinmatrixError("--max-probes must be at least 1")
        if self.max_skips < 0:
            raise PinmatrixError("--max-skips must be at least 0")

    def run_options(self, repo_root: Path, *, overlay_dir: Path | None = None,
                    wheels_dir: Path | None = None) -> RunOptions:
        """The smoke runner's options for each probe (the host runtime adds its overlay and extra wheels)."""
        return RunOptions(smoke_dir=self.smoke_dir, timeout_s=self.timeout_s, python=self.python,
                          logs_dir=self.logs_dir, repo_root=repo_root, overlay_dir=overlay_dir, wheels_dir=wheels_dir)

    def prober(self, smoke: Smoke, echo: Callable[[str], None], *, any_digest: bool = False) -> Prober:
        """A prober on this host under a new run id, recording into the results store as probes (the run id's
        PROBE_RUN_PREFIX keeps them out of every cell's status, promotion and report)."""
        return Prober(ResultsStore(self.results), HostFingerprint.detect(), smoke,
                      run_id=f"{PROBE_RUN_PREFIX}{new_run_id()}",
                      logs_dir=self.logs_dir, echo=echo, max_probes=self.max_probes, any_digest=any_digest,
                      max_seconds=self.max_seconds)
