"""Infrastructure errors are a class of their own: a container runtime that cannot start the container
(`docker run` / `podman run` exit 125, no result) is recorded as status "error", class "infra", not as a
failure of the cell; JUnit reports it as <error> (counted in `errors`, not `failures`); promotion never counts
it against a cell (nor for it), and it hides no earlier result."""

from __future__ import annotations

import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, ClassVar

from promotion import DIGEST, GPU_CELL, record

from pinmatrix.imageref import ImageRef
from pinmatrix.project.policy import PromotionPolicy
from pinmatrix.release.attest import test_result_statement as statement_for
from pinmatrix.release.promote import check_policy
from pinmatrix.report.junit import render_junit
from pinmatrix.report.model import build_report, worst
from pinmatrix.results.store import HostFingerprint, ResultsStore
from pinmatrix.smoke.cellrun import run_cells
from pinmatrix.smoke.classify import classify
from pinmatrix.smoke.container import ContainerSmokes
from pinmatrix.smoke.runner import HostCell, RunOptions
from pinmatrix.statuses import SEVERITY, STATUS_LABELS, STATUSES

HOST = HostFingerprint.make(hostname="test")
SMOKE = '''
import json, os, sys
SMOKES = {"tiny": {"func": "tiny", "timeout_s": 60}}
if __name__ == "__main__":
    with open(os.environ["PINMATRIX_SMOKE_RESULT"], "w") as fh:
        json.dump({"smoke": sys.argv[1], "status": "fail", "reason": "ran"}, fh)
'''


class _Engine:
    """What ContainerSmokes needs of an engine; its `run` is a process that exits as the real engine would."""

    name: ClassVar[str] = "podman"
    env: ClassVar[dict[str, str]] = {}

    def __init__(self, code: str) -> None:
        self.code = code
        self.calls: list[list[str]] = []

    def _argv(self, args: list[str]) -> list[str]:
        if args[:1] == ["rm"]:
            return [sys.executable, "-c", "pass"]
        return [sys.executable, "-c", self.code]

    def call(self, args: list[str], **kwargs: Any) -> None:
        self.calls.append(args)

    def gpu_args(self) -> list[str]:
        return []


def _run(tmp_path: Path, code: str) -> ResultsStore:
    smokes = tmp_path / "smoke"
    smokes.mkdir(parents=True, exist_ok=True)
    (smokes / "tiny.py").write_text(textwrap.dedent(SMOKE))
    store = ResultsStore(tmp_path / "r.sqlite")
    container = ContainerSmokes(_Engine(code), "img:1", smokes, gpus=False)  # type: ignore[arg-type]
    opts = RunOptions(smoke_dir=smokes, logs_dir=tmp_path / "logs", runtime=container)
    run_cells([HostCell()], store, opts, host=HOST, echo=lambda _line: None)
    return store


def test_a_runtime_that_cannot_start_the_container_is_an_infrastructure_error(tmp_path: Path) -> None:
    code = "import sys; print('Error: crun: creating container: no such device'); sys.exit(125)"
    (rec,) = _run(tmp_path, code).query(smoke="tiny")
    assert (rec.status, rec.failure_class) == ("error", "infra")
    assert rec.reason == ("podman could not start the container (exit status 125): Error: crun: creating "
                          "container: no such device")


def test_an_exit_125_of_the_smoke_itself_with_a_result_or_another_status_is_the_smokes(tmp_path: Path) -> None:
    (rec,) = _run(tmp_path / "a", "import sys; sys.exit(127)").query(smoke="tiny")
    assert (rec.status, rec.failure_class) == ("fail", "error")  # the image lacks the command: the cell's
    assert classify(result={"status": "pass"}, returncode=125, timed_out=False, log_text="", timeout_s=1,
                    infra="x").status == "fail"  # a result was written: a smoke ran
    timed = classify(result=None, returncode=None, timed_out=True, log_text="", timeout_s=1, infra="x")
    assert (timed.status, timed.failure_class) == ("fail", "timeout")
    infra = classify(result=None, returncode=125, timed_out=False, log_text="", timeout_s=1, infra="no \x1b[31mgo")
    assert (infra.status, infra.failure_class, infra.reason) == ("error", "infra", "no go")


def test_error_is_a_status_of_its_own_below_a_verdict() -> None:
    assert "error" in STATUSES and STATUS_LABELS["error"] == "infrastructure error"
    assert SEVERITY["missing"] < SEVERITY["error"] < SEVERITY["xfail"] < SEVERITY["fail"]
    assert worst(["error", "pass"]) == "error" and worst(["error", "fail"]) == "fail"


def test_junit_reports_an_error_element_not_a_failure() -> None:
    cell = GPU_CELL
    recs = [record(cell, "host-probe", "pass", DIGEST),
            record(cell, "boundary", "error", DIGEST, failure_class="infra", reason="podman could not start"),
            record(cell, "fwd-bwd", "fail", DIGEST, failure_class="wrong-result", reason="bad")]
    root = ET.fromstring(render_junit(build_report(recs, [cell])))
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("errors"), suite.get("failures"), root.get("errors"), root.get("failures")) == ("1", "1", "1", "1")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    error = cases["boundary"].find("error")
    assert error is not None and error.get("type") == "infra"
    assert error.get("message") == "infrastructure error: podman could not start"
    assert cases["boundary"].find("failure") is None and cases["boundary"].find("system-out") is None
    assert cases["fwd-bwd"].find("failure") is not None and cases["fwd-bwd"].find("error") is None


def test_promotion_never_counts_an_infrastructure_error(tmp_path: Path) -> None:
    clean = [record(GPU_CELL, s, "pass", DIGEST) for s in GPU_CELL.smokes]
    later_error = record(GPU_CELL, "boundary", "error", DIGEST, run="r2", failure_class="infra", reason="x")
    later_error = type(later_error)(**{**later_error.__dict__, "finished_at": "2026-11-29T21:00:00Z"})
    check = check_policy(GPU_CELL, PromotionPolicy(), [*clean, later_error])
    assert check.ok, check.problems  # the error finished last, and hides nothing
    only_errors = [r for r in clean if r.smoke != "boundary"] + [later_error]
    check = check_policy(GPU_CELL, PromotionPolicy(), only_errors)
    assert check.problems == ["missing result: smoke 'boundary' has no result on a sm_90 host "
                              "(1 infrastructure error(s), not counted)"]
    image = ImageRef.parse(f"127.0.0.1:5000/promoted/xf@{DIGEST}")
    predicate = statement_for(image, GPU_CELL, [*clean, later_error])["predicate"]
    assert predicate["result"] == "PASSED" and len(predicate["passedTests"]) == len(GPU_CELL.smokes)


def test_a_policy_cannot_accept_an_infrastructure_error() -> None:
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"unknown status 'error' \(statuses: pass, fail, skip, xfail, xpass, "
                                              r"degraded\)"):
        PromotionPolicy.model_validate({"accept": ["pass", "error"]})


# ------------------------------------------------------------------ the runner's own bounds: a runaway, Ctrl-C
def test_a_silent_runaway_holding_the_smokes_output_keeps_the_runner_at_most_seconds(tmp_path: Path) -> None:
    """A grandchild that left the group and dropped the token (so neither the runner nor the guard ends it) and
    holds the smoke's stdout without writing: the runner stops reading after its 5 s grace, not when the
    runaway closes the pipe (30 s later)."""
    import os
    import signal

    from pinmatrix.smoke.guard import TOKEN_ENV
    from pinmatrix.smoke.runner import run_process

    pidfile = tmp_path / "runaway.pid"
    code = textwrap.dedent(f"""
        import os, subprocess, sys
        env = {{k: v for k, v in os.environ.items() if k != {TOKEN_ENV!r}}}
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env, start_new_session=True)
        open({str(pidfile)!r}, "w").write(str(p.pid))
        print("left behind", flush=True)
    """)
    log, result = tmp_path / "s.log", tmp_path / "s.result.json"
    try:
        proc = run_process([sys.executable, "-c", code], dict(os.environ), log, result, 60, cwd=tmp_path)
        assert proc.returncode == 0 and not proc.timed_out
        assert 4.5 < proc.seconds < 15, proc.seconds
        assert "left behind" in log.read_text()
    finally:
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_ctrl_c_while_a_smoke_runs_gives_it_its_sigabrt_grace_then_ends_it(tmp_path: Path) -> None:
    """KeyboardInterrupt in the runner's wait: the smoke gets SIGABRT (faulthandler's stacks) and the grace, then
    SIGKILL; the interrupt goes on up, and the smoke is gone."""
    import os
    import signal
    import threading
    import time

    import pytest

    from pinmatrix.smoke.runner import run_process

    ready, abrt, pidfile = tmp_path / "ready", tmp_path / "abrt", tmp_path / "smoke.pid"
    code = textwrap.dedent(f"""
        import os, pathlib, signal, time
        signal.signal(signal.SIGABRT, lambda *a: pathlib.Path({str(abrt)!r}).write_text("abrt"))
        pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid()))
        pathlib.Path({str(ready)!r}).write_text("ready")
        time.sleep(60)  # on after the handler: only SIGKILL ends it
    """)
    main = threading.main_thread().ident
    assert main is not None

    def ctrl_c() -> None:
        deadline = time.monotonic() + 20
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        signal.pthread_kill(main, signal.SIGINT)

    log, result = tmp_path / "s.log", tmp_path / "s.result.json"
    # Python's own Ctrl-C handler, as in a terminal: a test run started in the background (SIGINT ignored, as a
    # non-interactive shell leaves it for `&` jobs) would otherwise never see the SIGINT sent below.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=ctrl_c, daemon=True).start()
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_process([sys.executable, "-c", code], dict(os.environ), log, result, 60, cwd=tmp_path,
                        kill_grace_s=0.5)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - t0 < 30
    assert abrt.read_text() == "abrt"
    with pytest.raises(ProcessLookupError):
        os.kill(int(pidfile.read_text()), 0)
