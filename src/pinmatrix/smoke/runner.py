"""Run smokes, one process each, with a timeout; classify; apply known issues; record.

Each smoke runs as ``python -X faulthandler -u smoke/<module>.py <name>`` in its own session (process
group), its stdout and stderr going to one log file. An illegal memory access, a segfault or a hang
fails that smoke only: on timeout the runner sends SIGABRT first (faulthandler prints every thread's
Python stack into the log), then SIGKILL to the whole group.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import os
import secrets
import select as io_select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pinmatrix.archscan.smokeenv import smoke_env_vars
from pinmatrix.matrix.keyword import compile_keyword
from pinmatrix.paths import LOGS_DIR, OVERLAY_DIR
from pinmatrix.project.catalogue import DEFAULT_TIMEOUT_S, Smoke, SmokeError, select
from pinmatrix.project.smoke_bundle import shipped_dir
from pinmatrix.results.store import HostFingerprint, SmokeRecord
from pinmatrix.sanitize import file_slug
from pinmatrix.smoke.classify import Outcome, classify
from pinmatrix.smoke.gpu_needs import unmet_need
from pinmatrix.smoke.guard import TOKEN_ENV, die_with_parent, name_group, start_guard
from pinmatrix.smoke.hostdiff import differences, environment_of
from pinmatrix.smoke.known import apply_known_issues
from pinmatrix.smoke.logcap import DEFAULT_LOG_CAP, CappedLog
from pinmatrix.smoke.overlay import Overlay, build_overlay
from pinmatrix.smoke.runtimes import CellSetup, ProcessResult, RuntimeOptions, SmokeRuntime
from pinmatrix.smoke.target import SmokeTarget

RESULT_PREFIX = "PINMATRIX-RESULT "
MAX_TIMEOUT_S = 6 * 3600  # no smoke runs longer than this, whatever its catalogue entry says
PARAMS_ENV = "PINMATRIX_PARAMS"
HOST_CELL_ID = "host"


@dataclass(frozen=True)
class HostCell:
    """The cell used when no matrix cell is named: whatever is installed here, every smoke."""

    id: str = HOST_CELL_ID
    stack: str = "host"
    name: str = "host (the current environment)"
    python: str | None = None  # whatever runs here
    smokes: tuple[str, ...] | None = None  # None: the whole catalogue
    env: dict[str, str] = field(default_factory=dict)
    known_issues: tuple[Any, ...] = ()
    patches: tuple[Any, ...] = ()
    requirements: tuple[str, ...] = ()
    pins: dict[str, str] = field(default_factory=dict)
    arch_flags: tuple[str, ...] = ()
    compute_capability: str | None = None
    min_driver: str | None = None
    torch_cuda_arch_list: str | None = None
    flashinfer_cuda_arch_list: str | None = None
    gpu_required: bool = False

    def without_known_issues(self, ids: frozenset[str]) -> HostCell:
        return replace(self, known_issues=tuple(ki for ki in self.known_issues if ki.id not in ids))

    def variables(self) -> dict[str, str]:
        return dict(self.env)


@dataclass(frozen=True)
class HostProcesses:
    """The host runtime: each smoke a process of ``options.python`` here, in the cell's folder; a cell gets its
    overlay (extra wheels, installed-tree patches) and, for a matrix cell, how this environment differs from its
    lock. Bisect's ``venv`` runtime is one of these with the venv's interpreter."""

    name: str = "host"

    def prepare_cell(self, cell: SmokeTarget, options: RuntimeOptions, echo: Callable[[str], None]) -> CellSetup:
        overlay = None
        if options.wheels_dir or cell.patches:
            overlay = build_overlay(cell, options.overlay_dir or OVERLAY_DIR,
                                    wheels_dir=options.wheels_dir, repo_root=options.repo_root,
                                    python=options.python, log=echo)
        if cell.id == HOST_CELL_ID:
            return CellSetup(overlay)
        lock_file = options.repo_root / "locks" / f"{cell.id}.txt"
        seen = environment_of(options.python, overlay.site if overlay else None)
        host_vs_lock = differences(cell, lock_file.read_text(encoding="utf-8") if lock_file.is_file() else None, seen)
        if not host_vs_lock["identical"]:
            n = len(host_vs_lock["packages"])
            echo(f"  host runtime differs from the cell: python {host_vs_lock['host_python']} (cell "
                 f"{host_vs_lock['cell_python']}), {n} locked package(s) at another version or absent")
        return CellSetup(overlay, host_vs_lock)

    def start(self, cell: SmokeTarget, smoke: Smoke, options: RuntimeOptions, env: dict[str, str], log_path: Path,
              result_path: Path, timeout: float, work: Path) -> ProcessResult:
        argv = [options.python, "-X", "faulthandler", "-u", str(smoke.module), smoke.name]
        return run_process(argv, env, log_path, result_path, timeout, cwd=work, kill_grace_s=options.kill_grace_s,
                           log_cap=options.log_cap)


@dataclass
class RunOptions:
    smoke_dir: Path | None = None
    keyword: str | None = None
    rerun: bool = False
    timeout_s: float | None = None  # caps every smoke's own timeout
    python: str = sys.executable
    logs_dir: Path = LOGS_DIR
    overlay_dir: Path | None = None  # where per-cell overlays are made (host runtime)
    wheels_dir: Path | None = None  # the cells' extra wheels
    repo_root: Path = Path(".")
    runtime: SmokeRuntime = field(default_factory=HostProcesses)  # where each smoke runs (smoke/runtimes.py)
    image_digest: str | None = None
    kill_grace_s: float = 3.0
    log_cap: int = DEFAULT_LOG_CAP  # bytes of log kept per smoke (head and tail), --log-cap
    kernel_cache: str | None = None  # image runtimes: keep, cold or off (smoke/kernel_cache.py), recorded
    batch: bool = True  # consecutive smokes of one batch group share a process (smoke/batch.py); --no-batch


def new_run_id() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def keyword_filter(expr: str | None) -> Callable[[str], bool]:
    if not expr:
        return lambda _name: True
    return compile_keyword(expr)


def cell_payload(cell: SmokeTarget) -> dict[str, Any]:
    """What a smoke may read about its cell ($PINMATRIX_CELL)."""
    return {"id": cell.id, "stack": cell.stack, "name": cell.name, "pins": dict(cell.pins),
            "requirements": list(cell.requirements), "arch_flags": list(cell.arch_flags),
            "compute_capability": cell.compute_capability, "min_driver": cell.min_driver,
            "torch_cuda_arch_list": cell.torch_cuda_arch_list,
            "flashinfer_cuda_arch_list": cell.flashinfer_cuda_arch_list, "gpu_required": cell.gpu_required,
            "env": dict(cell.env)}


def cell_smoke_env(cell: SmokeTarget) -> dict[str, str]:
    """What a smoke is given about its cell, on a host or in a k8s Job: the cell's variables and
    $PINMATRIX_CELL."""
    return {**cell.variables(), "PINMATRIX_CELL": json.dumps(cell_payload(cell), default=str)}


def smoke_env(cell: SmokeTarget, result_path: Path, overlay: Overlay | None,
              params: dict[str, Any] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop(PARAMS_ENV, None)
    if params:  # a bisect probe: the smoke reads its parameter values from here
        env[PARAMS_ENV] = json.dumps(params, sort_keys=True)
    env.update(cell_smoke_env(cell))  # the cell's variables win over the host's
    env["PINMATRIX_SMOKE_RESULT"] = str(result_path)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONSAFEPATH", None)  # the smoke imports its catalogue neighbours from its own directory
    for key, value in smoke_env_vars().items():  # arch-coverage: pinmatrix.archscan and cuobjdump
        env.setdefault(key, value)
    # the in-cell runtime (_smokelib, _oracles) after the smoke's own folder; an overlay's patched site first
    paths = [str(overlay.site)] if overlay is not None else []
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*paths, str(shipped_dir()), os.environ.get("PYTHONPATH")]))
    if overlay is not None:
        env["PINMATRIX_OVERLAY"] = str(overlay.site)
    return env


def effective_timeout(timeout_s: float | None) -> float:
    """Every smoke gets a timeout: a missing, zero, negative or infinite one becomes the catalogue default,
    and none is longer than MAX_TIMEOUT_S."""
    if timeout_s is None or not math.isfinite(timeout_s) or timeout_s <= 0:
        return float(DEFAULT_TIMEOUT_S)
    return float(min(timeout_s, MAX_TIMEOUT_S))


def run_process(argv: Sequence[str], env: dict[str, str], log_path: Path, result_path: Path, timeout_s: float,
                cwd: Path, kill_grace_s: float = 3.0, *, log_cap: int = DEFAULT_LOG_CAP,
                cleanup: Sequence[str] | None = None) -> ProcessResult:
    """Start ``argv`` in its own session, logging to ``log_path`` (capped at ``log_cap`` bytes, head and tail
    kept); enforce ``timeout_s``. The smoke dies with the runner, even on ``kill -9`` of the runner (guard.py);
    ``cleanup`` is run after it either way (e.g. removing its container)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    result_path.unlink(missing_ok=True)
    timeout_s = effective_timeout(timeout_s)
    token = secrets.token_hex(16)
    guard_env, env = env, {**env, TOKEN_ENV: token}
    t0 = time.monotonic()
    timed_out = False
    with CappedLog(log_path, log_cap) as log:
        log.write(f"$ {' '.join(argv)}\n".encode())
        # the guard first: whatever the smoke starts carries its token from the first instant
        guard, guard_fd = start_guard(token, list(cleanup) if cleanup else None, env=guard_env)
        read_end, write_end = os.pipe()
        try:
            proc = subprocess.Popen(list(argv), stdout=write_end, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, cwd=cwd, start_new_session=True,
                                    preexec_fn=functools.partial(die_with_parent, os.getpid()))
        except BaseException:
            os.close(read_end)
            os.close(guard_fd)
            guard.wait()
            raise
        finally:
            os.close(write_end)
        stop = threading.Event()
        pump = threading.Thread(target=_pump, args=(read_end, log, stop), daemon=True)
        pump.start()
        try:
            name_group(guard_fd, proc.pid)
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop_group(proc, kill_grace_s)
        finally:
            if proc.poll() is None:
                _stop_group(proc, kill_grace_s)
            # The smoke's own children (spawned ranks, compilers) go with its group; the guard sweeps what left it.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            os.close(guard_fd)  # the guard sweeps the group and the token now (and runs the clean-up)
            try:
                guard.wait(timeout=150)
            except subprocess.TimeoutExpired:
                guard.kill()
            pump.join(timeout=5)
            stop.set()
            pump.join()
            os.close(read_end)
    seconds = time.monotonic() - t0
    return ProcessResult(proc.returncode, timed_out, _read_result(result_path, log_path), seconds)


def _pump(fd: int, log: CappedLog, stop: threading.Event) -> None:
    """Copy the smoke's output into the log until end-of-file, or until told to stop (a process that left
    the group may hold the pipe open after the smoke is gone)."""
    while True:
        ready, _, _ = io_select.select([fd], [], [], 0.2)
        if ready:
            data = os.read(fd, 1 << 16)
            if not data:
                return
            log.write(data)
        if stop.is_set():  # also while something still writes: a runaway must not keep the runner here
            return


def _stop_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    try:
        os.kill(proc.pid, signal.SIGABRT)  # faulthandler writes the stacks of a hang to the log
        proc.wait(timeout=grace)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _result_object(text: str) -> dict[str, Any] | None:
    """A smoke's result: a JSON object, or None (not JSON, too deep, or another JSON value)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def read_result_file(result_path: Path) -> dict[str, Any] | None:
    """The result file a smoke wrote, or None."""
    try:
        return _result_object(result_path.read_text(errors="replace"))
    except OSError:
        return None


def _read_result(result_path: Path, log_path: Path) -> dict[str, Any] | None:
    found = read_result_file(result_path)
    if found is not None:
        return found
    try:  # the result line on stdout, when no result file could be written (a container, say)
        text = log_path.read_text(errors="replace")
    except OSError:
        return None
    for line in reversed(text.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return _result_object(line[len(RESULT_PREFIX):])
    return None


def plan_smokes(cell: SmokeTarget, catalogue: list[Smoke], keyword: str | None) -> list[Smoke]:
    selectors = cell.smokes
    chosen, unmatched = select(catalogue, list(selectors) if selectors is not None else None)
    if unmatched:
        raise SmokeError(f"cell {cell.id} ({cell.name}): no smoke named "
                         f"{', '.join(repr(u) for u in unmatched)} in the catalogue")
    keep = keyword_filter(keyword)
    return [s for s in chosen if keep(s.name)]


def decided_by_host(smoke: Smoke, host: HostFingerprint) -> str | None:
    """Why ``smoke`` would only skip on this host's GPU (capability, count, native FP4: ``_smokelib.unmet_need``),
    decided from the host probe so that no process starts just to say so; None where it may run, or where the
    probe saw no GPU (the smoke's own driver check is the word on that)."""
    if not smoke.gpu or host.gpu_count < 1 or not host.capability:
        return None
    return unmet_need(smoke.needs, host.gpu_count, host.capability)


def skipped_by_host(cell: SmokeTarget, smoke: Smoke, reason: str, *, host: HostFingerprint, run_id: str, work: Path,
                    image_digest: str | None) -> SmokeRecord:
    log_path = work / f"{file_slug(smoke.name)}.log"
    text = f"{reason} (decided from the host's GPU before starting the smoke)"
    log_path.write_text(f"[{smoke.name}] skip: {text}\n", encoding="utf-8")
    stamp = now()
    return SmokeRecord(
        cell_id=cell.id, stack=cell.stack, host=host, smoke=smoke.name, run_id=run_id,
        status="skip", failure_class=None, reason=text, metrics={}, log_path=str(log_path), started_at=stamp,
        finished_at=stamp, duration_s=0.0, known_issue=None, image_digest=image_digest,
        environment={"decided_by": "host-probe"}, params={},
    )


def smoke_timeout(smoke: Smoke, options: RunOptions) -> float:
    return effective_timeout(smoke.timeout_s if options.timeout_s is None else min(smoke.timeout_s, options.timeout_s))


def smoke_files(work: Path, label: str) -> tuple[Path, Path]:
    """A smoke's log and result file in its cell's work folder."""
    return work / f"{file_slug(label)}.log", work / f".{file_slug(label)}.result.json"


def run_one(cell: SmokeTarget, smoke: Smoke, options: RunOptions, *, host: HostFingerprint, run_id: str, work: Path,
            overlay: Overlay | None, params: dict[str, Any] | None = None) -> SmokeRecord:
    """Run ``smoke`` once; ``params`` (a bisect probe's parameter values) reach it as $PINMATRIX_PARAMS."""
    timeout = smoke_timeout(smoke, options)
    label = smoke.name + ("[" + ",".join(f"{k}={v}" for k, v in sorted(params.items())) + "]" if params else "")
    log_path, result_path = smoke_files(work, label)
    env = smoke_env(cell, result_path, overlay, params)
    started = now()
    proc = options.runtime.start(cell, smoke, options, env, log_path, result_path, timeout, work)
    finished = now()
    return smoke_record(cell, smoke, options, proc, log_path, timeout, host=host, run_id=run_id, started=started,
                        finished=finished, overlay=overlay, params=params)


def smoke_record(cell: SmokeTarget, smoke: Smoke, options: RunOptions, proc: ProcessResult, log_path: Path,
                 timeout: float, *, host: HostFingerprint, run_id: str, started: str, finished: str,
                 overlay: Overlay | None, params: dict[str, Any] | None = None) -> SmokeRecord:
    """What a smoke's process (or its share of a batch) says: classified from its result and log, known issues
    applied."""
    log_text = log_path.read_text(errors="replace") if log_path.exists() else ""
    outcome: Outcome = classify(result=proc.result, returncode=proc.returncode, timed_out=proc.timed_out,
                                log_text=log_text, timeout_s=timeout, infra=proc.infra)
    verdict = apply_known_issues(smoke.name, outcome.status, outcome.failure_class, outcome.reason,
                                 cell.known_issues)
    metrics = dict((proc.result or {}).get("metrics") or {})
    metrics.update(outcome.metrics)
    metrics = {k: v if isinstance(v, (int, float, str)) else json.dumps(v) for k, v in metrics.items()}
    environment = dict((proc.result or {}).get("environment") or {})
    environment["runtime"] = options.runtime.name  # host, venv, docker, podman, chroot
    if options.kernel_cache is not None:
        environment["kernel_cache"] = options.kernel_cache
    if overlay is not None:
        environment["overlay_wheels"] = overlay.wheels
        environment["overlay_patches"] = overlay.patches
    return SmokeRecord(
        cell_id=cell.id, stack=cell.stack, host=host, smoke=smoke.name, run_id=run_id,
        status=verdict.status, failure_class=verdict.failure_class, reason=verdict.reason, metrics=metrics,
        log_path=str(log_path), started_at=started, finished_at=finished, duration_s=round(proc.seconds, 3),
        known_issue=verdict.known_issue, image_digest=options.image_digest, environment=environment,
        params=dict(params or {}),
    )
