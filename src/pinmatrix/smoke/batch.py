"""Several smokes of one batch group in one process (the in-cell side is ``_smokelib.run_batch``).

Every smoke alone pays a Python start, torch's import and a CUDA context (3.5-5 s on the H200) before its own
work. A batch pays them once for a run of consecutive smokes of one group, where the catalogue says that is
sound (``"batch": "<group>"``). The rules that keep one smoke's trouble from touching another's result:

- each smoke has its own log and result file, and its own timeout inside the process; the device is
  synchronised after it, so an asynchronous fault is its result, not the next smoke's;
- the process stops after the first smoke that does not pass or skip; the smokes after it start again in a fresh
  process;
- when the process dies (a crash, its timeout, an exit without a result), the smoke it was running is run again
  alone, exactly as without batches, and that run is its record; the rest go on in a fresh batch.

So a batch can shorten a run but never changes which smokes pass or fail, nor how a failure is classed."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from pinmatrix.project.catalogue import Smoke
from pinmatrix.results.store import HostFingerprint, SmokeRecord
from pinmatrix.smoke.logcap import cap_file
from pinmatrix.smoke.overlay import Overlay
from pinmatrix.smoke.runner import (
    MAX_TIMEOUT_S,
    RunOptions,
    effective_timeout,
    now,
    read_result_file,
    run_one,
    smoke_env,
    smoke_files,
    smoke_record,
    smoke_timeout,
)
from pinmatrix.smoke.runtimes import ProcessResult
from pinmatrix.smoke.target import SmokeTarget

BATCH_ENV = "PINMATRIX_BATCH_PLAN"  # the same names as the in-cell runtime's (shipped/_smokelib.py)
BATCH_ARG = "--batch"
START_SLACK_S = 60  # the interpreter's start, on top of the smokes' own timeouts
CONTINUES = ("pass", "skip")


def run_batch(cell: SmokeTarget, smokes: list[Smoke], options: RunOptions, *, host: HostFingerprint, run_id: str,
              work: Path, overlay: Overlay | None) -> list[SmokeRecord]:
    """Records of ``smokes``, in order, run in as few processes as the rules above allow."""
    records: list[SmokeRecord] = []
    remaining = list(smokes)
    number = 0
    while remaining:
        if len(remaining) == 1:
            records.append(run_one(cell, remaining[0], options, host=host, run_id=run_id, work=work, overlay=overlay))
            break
        number += 1
        done, proc = _one_process(cell, remaining, options, host=host, run_id=run_id, work=work, overlay=overlay,
                                  number=number)
        records += done
        remaining = remaining[len(done):]
        ended_badly = proc.infra is not None or proc.timed_out or proc.returncode != 0
        if remaining and (ended_badly or not done):
            # the smoke the process was running when it ended: alone, as if there were no batches
            records.append(run_one(cell, remaining[0], options, host=host, run_id=run_id, work=work, overlay=overlay))
            remaining = remaining[1:]
    return records


def _one_process(cell: SmokeTarget, smokes: list[Smoke], options: RunOptions, *, host: HostFingerprint, run_id: str,
                 work: Path, overlay: Overlay | None, number: int) -> tuple[list[SmokeRecord], ProcessResult]:
    """One batch process over ``smokes``; the records of those it finished (up to the first that did not pass or
    skip) and how the process ended."""
    entries: list[dict[str, Any]] = []
    for smoke in smokes:
        log_path, result_path = smoke_files(work, smoke.name)
        result_path.unlink(missing_ok=True)
        entries.append({"module": smoke.module.name, "name": smoke.name, "result": result_path.name,
                        "log": log_path.name, "timeout_s": smoke_timeout(smoke, options)})
    log_path, result_path = smoke_files(work, f"batch-{number}")
    env = smoke_env(cell, result_path, overlay)
    env[BATCH_ENV] = json.dumps({"smokes": entries})
    timeout = effective_timeout(min(MAX_TIMEOUT_S, sum(e["timeout_s"] for e in entries) + START_SLACK_S))
    lead = replace(smokes[0], name=BATCH_ARG)  # <first module>.py --batch
    started = now()
    proc = options.runtime.start(cell, lead, options, env, log_path, result_path, timeout, work)
    finished = now()
    records: list[SmokeRecord] = []
    for position, (smoke, entry) in enumerate(zip(smokes, entries, strict=True), start=1):
        smoke_log = work / entry["log"]
        result = read_result_file(work / entry["result"])
        if result is None or result.get("smoke") != smoke.name:
            break
        cap_file(smoke_log, options.log_cap)
        share = ProcessResult(0, False, result, _seconds(result.get("duration_s"), proc.seconds))
        record = smoke_record(cell, smoke, options, share, smoke_log, entry["timeout_s"], host=host, run_id=run_id,
                              started=started, finished=finished, overlay=overlay)
        record.environment["batch"] = {"process": number, "position": position, "of": len(smokes),
                                       "process_s": round(proc.seconds, 3)}
        records.append(record)
        if result.get("status") not in CONTINUES:
            break
    return records, proc


def _seconds(reported: object, process_s: float) -> float:
    """A batched smoke's own duration as it reported it, kept within its process's."""
    if isinstance(reported, (int, float)) and not isinstance(reported, bool) and math.isfinite(reported):
        return min(max(0.0, float(reported)), process_s)
    return process_s
