"""Read back what ``pinmatrix ci slurm`` submitted: each task's results, and how each task ended.

A task's smokes are the records its ``pinmatrix smoke`` wrote (``--json``, else its own store, where every
finished smoke is recorded as it ends). Every planned smoke without one is recorded as a failure whose class
says how the task ended: ``slurm-timeout`` (its time limit), ``slurm-cancelled`` (scancel), ``slurm-preempted``,
``slurm-node-fail``, ``slurm-out-of-memory``, ``slurm-task-failed`` (it exited non-zero without a result),
``slurm-no-result`` (it completed without one), ``slurm-lost`` (the scheduler no longer knows it). Never a
pass. A task whose node could not start the sandbox (its ``refused`` line) records its smokes as infrastructure
errors (status error, ``sandbox-unavailable``), never as the cell's failures. How a task ended comes from the controller (``scontrol show job``, which keeps finished jobs for
MinJobAge), else from slurmstepd's own line in the task's output (``*** JOB 12 ON n1 CANCELLED AT ... DUE TO
TIME LIMIT ***``). Every record gets the task's Slurm job, array task, node and pool in
``environment["slurm"]``, the node as its host's name, and ``slurm-<array job>_<task>`` as its run id.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pinmatrix.ci.dispatch import bind, read_regular
from pinmatrix.ci.slurm import MANIFEST, NODE_REFUSED, REFUSED, ArrayEntry, Submission, TaskEntry, task_dispatch
from pinmatrix.errors import PinmatrixError
from pinmatrix.project.document import load_document
from pinmatrix.results.store import HostFingerprint, ResultsStore, SmokeRecord
from pinmatrix.results.storefile import ResultsError
from pinmatrix.sanitize import terminal_text

MAX_MANIFEST_BYTES = 4 * 1024 * 1024
MAX_RESULTS_BYTES = 64 * 1024 * 1024
MAX_SCHEDULER_BYTES = 16 * 1024 * 1024
ACTIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
                           "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED",
                           "RESV_DEL_HOLD", "SPECIAL_EXIT"})
STATE_CLASS = {
    "TIMEOUT": "slurm-timeout", "DEADLINE": "slurm-timeout", "CANCELLED": "slurm-cancelled",
    "PREEMPTED": "slurm-preempted", "NODE_FAIL": "slurm-node-fail", "BOOT_FAIL": "slurm-boot-fail",
    "OUT_OF_MEMORY": "slurm-out-of-memory", "FAILED": "slurm-task-failed", "COMPLETED": "slurm-no-result",
}
_STEPD = re.compile(r"\*\*\* JOB (\d+) ON (\S+) CANCELLED AT (\S+)(?: DUE TO ([A-Z ]+?))?(?: \*\*\*|$)", re.M)
_DUE = {"TIME LIMIT": "TIMEOUT", "PREEMPTION": "PREEMPTED", "NODE FAILURE": "NODE_FAIL"}
_STARTED = re.compile(r"job=(\d*) array=(\d*) task=(\d+) node=([A-Za-z0-9._-]*) started=(\S+)")

Runner = Callable[[list[str]], "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class TaskState:
    """How the scheduler (or slurmstepd's line) says a task stands."""

    state: str  # COMPLETED, TIMEOUT, CANCELLED, ... (Slurm's JobState)
    job_id: str | None = None
    node: str | None = None
    exit_code: str | None = None
    time_limit: str | None = None
    source: str = "scontrol"


@dataclass
class Collected:
    records: list[SmokeRecord] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # tasks still pending or running
    dropped: list[str] = field(default_factory=list)  # per task: records not dispatched to it, and why
    tasks: int = 0


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def read_submission(directory: Path) -> Submission:
    path = Path(directory) / MANIFEST
    if not path.exists() and not path.is_symlink():
        raise PinmatrixError(f"{directory}: no {MANIFEST} (not a `pinmatrix ci slurm` submission)")
    raw = read_regular(path, MAX_MANIFEST_BYTES)
    return load_document(path, Submission, what="a submission manifest", content=raw, form="json",
                         max_bytes=MAX_MANIFEST_BYTES)


def parse_scontrol(text: str, array_job_id: str) -> dict[int, TaskState]:
    """``scontrol show job -o <array job>``: one line per task (pending ones grouped, ``ArrayTaskId=3-5``)."""
    out: dict[int, TaskState] = {}
    for line in text.splitlines():
        fields = dict(re.findall(r"(?:^|\s)(JobId|ArrayJobId|ArrayTaskId|JobState|NodeList|ExitCode|TimeLimit)="
                                 r"(\S*)", line))
        if fields.get("ArrayJobId") != array_job_id or "JobState" not in fields:
            continue
        node = fields.get("NodeList")
        st = TaskState(state=fields["JobState"], job_id=fields.get("JobId"),
                       node=node if node and node != "(null)" else None, exit_code=fields.get("ExitCode"),
                       time_limit=fields.get("TimeLimit"))
        for index in _indexes(fields.get("ArrayTaskId", "")):
            out[index] = st
    return out


def _indexes(spec: str) -> list[int]:
    """``0``, ``3-5``, ``1,4-6%2`` (a throttle after '%') -> the indexes."""
    out: list[int] = []
    for part in spec.split("%", 1)[0].split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", part)
        if not m:
            continue
        lo, hi, step = int(m[1]), int(m[2] or m[1]), int(m[3] or 1)
        out.extend(range(lo, min(hi, lo + 100_000) + 1, max(step, 1)))
    return out


def scheduler_states(job_id: str, run: Runner = _run) -> dict[int, TaskState]:
    """Every task of an array the controller still knows; {} when it knows none (or there is no Slurm)."""
    try:
        proc = run(["scontrol", "show", "job", "-o", job_id])
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if proc.returncode != 0:
        return {}
    return parse_scontrol(proc.stdout[:MAX_SCHEDULER_BYTES], job_id)


def state_from_output(text: str) -> TaskState | None:
    """slurmstepd's line in a task's output when it ended the task (time limit, scancel, preemption)."""
    matches = list(_STEPD.finditer(text))
    if not matches:
        return None
    m = matches[-1]
    due = (m[4] or "").strip()
    return TaskState(state=_DUE.get(due, "CANCELLED"), job_id=m[1], node=m[2], source="slurmstepd")


def _read_text(path: Path, limit: int, *, tail: bool = False) -> str:
    """A task's small file (a regular file, no link followed, never waited on), at most ``limit`` bytes: the
    first ones, or the last with ``tail``; a larger file read from the start is refused (PinmatrixError)."""
    return read_regular(path, limit, tail=tail).decode("utf-8", "replace")


def _started(task_dir: Path) -> dict[str, str]:
    try:
        text = _read_text(task_dir / "started", 4096)
    except PinmatrixError:
        return {}
    m = _STARTED.search(text)
    if not m:
        return {}
    return {"job_id": m[1], "array_job_id": m[2], "array_task_id": m[3], "node": m[4], "started_at": m[5]}


def _finished(task_dir: Path) -> int | None:
    try:
        text = _read_text(task_dir / "finished", 32).strip()
    except PinmatrixError:
        return None
    return int(text) if re.fullmatch(r"\d{1,3}", text) else None


def _task_records(task_dir: Path) -> list[SmokeRecord]:
    """The task's own records: its --json file when it got that far, else its store."""
    path = task_dir / "results.json"
    if path.exists() or path.is_symlink():
        raw = read_regular(path, MAX_RESULTS_BYTES)
        try:
            rows = json.loads(raw.decode("utf-8"))
            if not isinstance(rows, list):
                raise ValueError("not a JSON list")
            return [SmokeRecord.from_dict(r) for r in rows]
        except (ValueError, ResultsError) as err:
            raise PinmatrixError(f"{path}: not the results `pinmatrix smoke --json` writes: {err}") from None
    store = task_dir / "results.sqlite"
    if store.is_file() and not store.is_symlink():
        try:
            return ResultsStore(store).query()
        except ResultsError as err:
            raise PinmatrixError(f"{store}: {err}") from None
    return []


def _tail(task_dir: Path, limit: int = 200) -> str:
    try:
        text = _read_text(task_dir / "slurm.out", 65536, tail=True)
    except PinmatrixError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return terminal_text(lines[-1])[:limit] if lines else ""


def _refused(task_dir: Path) -> str | None:
    """The one line a task's node wrote when it could not start the task's runtime (``ci slurm-node-check``)."""
    try:
        text = _read_text(task_dir / REFUSED, 4096).strip()
    except PinmatrixError:
        return None
    return terminal_text(text.splitlines()[0])[:500] if text else None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def collect_task(array: ArrayEntry, task: TaskEntry, states: dict[int, TaskState],
                 dropped: list[str] | None = None) -> tuple[list[SmokeRecord], str | None]:
    """(records, waiting line). A task still pending or running yields no record and a waiting line. Only the
    records whose cell, image digest and smoke the task was given are kept (ci.dispatch.bind); a line for the
    others goes to ``dropped``, and the task's smokes left without a kept record are recorded as not run."""
    task_dir = Path(array.directory) / str(task.index)
    started = _started(task_dir)
    state = states.get(task.index)
    if state is not None and state.state in ACTIVE_STATES:
        return [], f"{array.name} task {task.index} (cell {task.cell_id}): {state.state}"
    try:
        output = _read_text(task_dir / "slurm.out", 1024 * 1024, tail=True)
    except PinmatrixError:
        output = ""
    stepd = state_from_output(output)
    if state is None:
        state = stepd
    if state is None and array.job_id is None and not started:
        return [], f"{array.name} task {task.index} (cell {task.cell_id}): not submitted"
    bound = bind(f"{array.name} task {task.index}", task_dispatch(task), _task_records(task_dir))
    records = bound.kept
    if bound.dropped and dropped is not None:
        dropped.append(bound.dropped)
    array_job = started.get("array_job_id") or array.job_id or "?"
    node = started.get("node") or (state.node if state else None) or (stepd.node if stepd else None)
    job_id = started.get("job_id") or (state.job_id if state else None)
    finished = _finished(task_dir)
    end = state.state if state else ("COMPLETED" if finished == 0 else "FAILED" if finished is not None else None)
    slurm: dict[str, Any] = {"array_job_id": array_job, "array_task_id": task.index, "job_id": job_id,
                             "node": node, "pool": task.pool, "array": array.name, "state": end,
                             "exit_code": finished if finished is not None else (state.exit_code if state else None)}
    run_id = f"slurm-{array_job}_{task.index}"
    out: list[SmokeRecord] = []
    for rec in records:
        host = replace(rec.host, hostname=node or rec.host.hostname)
        out.append(replace(rec, host=host, run_id=run_id, environment={**rec.environment, "slurm": slurm}))
    missing = [s for s in task.smokes if s not in {r.smoke for r in records}]
    if not missing:
        return out, None
    refused = _refused(task_dir)
    if refused:  # the node could not start the task's runtime: no verdict on the cell
        cls, how = NODE_REFUSED, f"could not start the sandbox: {refused}"
    elif end is None:
        cls, how = "slurm-lost", "no result, and the scheduler no longer knows the task"
    else:
        cls = STATE_CLASS.get(end, "slurm-task-failed")
        how = f"ended {end}"
        if end in ("TIMEOUT", "DEADLINE"):
            how += f" at its time limit ({array.time_limit_min} min)"
        elif finished is not None:
            how += f" with exit status {finished}"
        how += " before this smoke had a result"
    tail = _tail(task_dir)
    where = f"Slurm task {array_job}_{task.index}" + (f" (job {job_id})" if job_id else "") + (f" on {node}" if node else "")
    reason = f"{where} {how}" + (f"; last output: {tail}" if tail and cls not in ("slurm-timeout", NODE_REFUSED)
                                 else "")
    host = records[0].host if records else HostFingerprint.make(
        hostname=node or "unknown", gpu_name=task.gpu_product, gpu_count=task.gpus if task.gpu_product else 0,
        driver=task.driver, capability=task.capability)
    if records:
        host = replace(host, hostname=node or host.hostname)
    t = started.get("started_at") or _now()
    for smoke in missing:
        out.append(SmokeRecord(
            cell_id=task.cell_id, stack=task.stack, host=host, smoke=smoke, run_id=run_id,
            status="error" if cls == NODE_REFUSED else "fail",
            failure_class=cls, reason=reason, metrics={}, log_path=str(task_dir / "slurm.out"), started_at=t,
            finished_at=_now(), duration_s=0.0, known_issue=None, image_digest=task.image_digest,
            environment={"slurm": {**slurm, "host": "measured" if records else "declared by the pool"}}))
    return out, None


def collect(directory: Path, run: Runner = _run) -> Collected:
    sub = read_submission(directory)
    out = Collected()
    for array in sub.arrays:
        states = scheduler_states(array.job_id, run) if array.job_id else {}
        for task in array.tasks:
            out.tasks += 1
            records, waiting = collect_task(array, task, states, out.dropped)
            out.records.extend(records)
            if waiting:
                out.waiting.append(waiting)
    return out


def wait(directory: Path, *, timeout_s: float, poll_s: float = 2.0, run: Runner = _run,
         echo: Callable[[str], None] = print) -> None:
    """Until no task of the submission is pending or running in the controller's view."""
    sub = read_submission(directory)
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        active = []
        for array in sub.arrays:
            if array.job_id:
                active += [f"{array.name}[{i}] {s.state}" for i, s in sorted(scheduler_states(array.job_id, run).items())
                           if s.state in ACTIVE_STATES]
        if not active:
            return
        line = f"waiting for {len(active)} task(s): {', '.join(active[:6])}" + (" ..." if len(active) > 6 else "")
        if line != last:
            echo(line)
            last = line
        if time.monotonic() > deadline:
            raise PinmatrixError(f"ci slurm-collect: {len(active)} task(s) still pending or running after "
                                 f"{timeout_s:g} s (collect again later)")
        time.sleep(poll_s)
