"""pinmatrix.smoke.runner rule by rule, fast: a smoke process runs in its own session with no stdin, its stdout and
stderr in one log under a header line, a fresh result (a stale result file is removed first, the result line on
stdout read when there is no file), the token in its environment and not in the guard's, the parent-death
signal set; on timeout SIGABRT first (faulthandler's stacks in the log), SIGKILL after the grace; its group
dies after it; the clean-up runs. Every smoke gets a finite timeout, none longer than six hours. The runtime's
own failure (infra) is recorded as error / infra, never as the cell's failure; a timeout is fail / timeout;
the record carries what the smoke measured (non-scalars as JSON), the runtime, kernel cache, overlay and
parameters. A cell's recorded smokes are skipped unless --rerun; a smoke its host's GPU cannot run is a skip
without a process. The runtimes are stand-ins (``Runtime``: the interface alone), so no engine is needed."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pinmatrix.cell import KnownIssue
from pinmatrix.project.catalogue import DEFAULT_TIMEOUT_S, SmokeError, load_catalogue
from pinmatrix.project.smoke_bundle import shipped_dir
from pinmatrix.results.store import HostFingerprint, ResultsStore
from pinmatrix.smoke import runner
from pinmatrix.smoke.cellrun import run_cell, run_cells
from pinmatrix.smoke.guard import TOKEN_ENV
from pinmatrix.smoke.overlay import Overlay
from pinmatrix.smoke.runner import (
    MAX_TIMEOUT_S,
    HostCell,
    HostProcesses,
    RunOptions,
    cell_payload,
    cell_smoke_env,
    decided_by_host,
    effective_timeout,
    keyword_filter,
    new_run_id,
    plan_smokes,
    run_one,
    run_process,
    smoke_env,
)
from pinmatrix.smoke.runtimes import CellSetup, ProcessResult

HOST = HostFingerprint.make(hostname="test", gpu_name="Fake GPU", gpu_count=1, driver="1.0", capability="9.0")
CPU_HOST = HostFingerprint.make(hostname="cpu", gpu_name=None, gpu_count=0, driver=None, capability=None)
PY = sys.executable

CATALOGUE = '''
SMOKES = {
    "alpha": {"func": "f", "timeout_s": 40},
    "beta": {"func": "f", "timeout_s": 900},
    "gpu-big": {"func": "f", "needs": {"gpu": True, "min_capability": "10.0"}},
    "gpu-any": {"func": "f", "needs": {"gpu": True}},
    "cpu-needs": {"func": "f", "needs": {"min_capability": "10.0"}},
}
'''


@pytest.fixture()
def catalogue(tmp_path: Path) -> Path:
    d = tmp_path / "smoke"
    d.mkdir()
    (d / "fake.py").write_text(CATALOGUE)
    return d


class Runtime:
    """A runtime as the runner calls it (``smoke.runtimes.SmokeRuntime``): each start kept, the answer a
    ProcessResult (and a log); a cell needs nothing made."""

    def __init__(self, answer: ProcessResult, log: str = "", result_file: dict[str, Any] | None = None,
                 name: str = "fake") -> None:
        self.answer, self.log, self.result_file, self.name = answer, log, result_file, name
        self.calls: list[dict[str, Any]] = []

    def named(self, name: str) -> Runtime:
        self.name = name
        return self

    def prepare_cell(self, cell: Any, options: RunOptions, echo: Any) -> CellSetup:
        return CellSetup()

    def start(self, cell: Any, smoke: Any, options: RunOptions, env: dict[str, str], log_path: Path,
              result_path: Path, timeout: float, work: Path) -> ProcessResult:
        self.calls.append({"cell": cell, "smoke": smoke.name, "env": env, "log": log_path, "result": result_path,
                           "timeout": timeout, "work": work})
        log_path.write_text(self.log)
        return self.answer


class HostFake(Runtime):
    """The host runtime's cell preparation (overlay, lock comparison) with the process faked."""

    def __init__(self, answer: ProcessResult) -> None:
        super().__init__(answer, name="host")

    def prepare_cell(self, cell: Any, options: RunOptions, echo: Any) -> CellSetup:
        return HostProcesses().prepare_cell(cell, options, echo)


def options(tmp_path: Path, catalogue: Path, **kw: Any) -> RunOptions:
    return RunOptions(smoke_dir=catalogue, logs_dir=tmp_path / "logs", overlay_dir=tmp_path / "overlay", **kw)


def smoke(catalogue: Path, name: str) -> Any:
    return {s.name: s for s in load_catalogue(catalogue)}[name]


# ------------------------------------------------------------------------------------------------ timeouts
@pytest.mark.parametrize(("given", "effective"), [
    (None, DEFAULT_TIMEOUT_S), (0, DEFAULT_TIMEOUT_S), (0.0, DEFAULT_TIMEOUT_S), (-5, DEFAULT_TIMEOUT_S),
    (math.inf, DEFAULT_TIMEOUT_S), (-math.inf, DEFAULT_TIMEOUT_S), (math.nan, DEFAULT_TIMEOUT_S),
    (0.25, 0.25), (1, 1.0), (MAX_TIMEOUT_S, MAX_TIMEOUT_S), (MAX_TIMEOUT_S + 1, MAX_TIMEOUT_S), (10 ** 9, MAX_TIMEOUT_S),
])
def test_every_smoke_gets_a_finite_timeout_of_at_most_six_hours(given: float | None, effective: float) -> None:
    got = effective_timeout(given)
    assert got == effective and isinstance(got, float)
    assert MAX_TIMEOUT_S == 6 * 3600


# ----------------------------------------------------------------------------------- what a smoke is given
def test_a_cells_payload_is_its_fields_with_tuples_as_lists() -> None:
    cell = HostCell(arch_flags=("sm_90a",), requirements=("torch==2.9",), env={"A": "1"}, pins={"torch": "2.9"})
    assert cell_payload(cell) == {
        "id": "host", "stack": "host", "name": "host (the current environment)", "pins": {"torch": "2.9"},
        "requirements": ["torch==2.9"], "arch_flags": ["sm_90a"], "compute_capability": None, "min_driver": None,
        "torch_cuda_arch_list": None, "flashinfer_cuda_arch_list": None, "gpu_required": False, "env": {"A": "1"}}

    assert cell_payload(HostCell(id="other", compute_capability="9.0", min_driver="580", gpu_required=True,
                                 torch_cuda_arch_list="9.0a", flashinfer_cuda_arch_list="9.0a")) == {
        **cell_payload(HostCell()), "id": "other", "compute_capability": "9.0", "min_driver": "580",
        "gpu_required": True, "torch_cuda_arch_list": "9.0a", "flashinfer_cuda_arch_list": "9.0a"}


def test_a_cell_gives_its_variables_and_its_payload() -> None:
    cell = HostCell(env={"VLLM_X": "1"})
    env = cell_smoke_env(cell)
    assert env == {"VLLM_X": "1", "PINMATRIX_CELL": json.dumps(cell_payload(cell), default=str)}
    assert HostCell().variables() == {} and cell.variables() is not cell.env
    odd = HostCell(pins={"torch": Path("2.9.1")}, compute_capability=Path("12.1"))  # values JSON cannot say
    assert json.loads(cell_smoke_env(odd)["PINMATRIX_CELL"])["pins"] == {"torch": "2.9.1"}
    assert json.loads(cell_smoke_env(odd)["PINMATRIX_CELL"])["compute_capability"] == "12.1"


def test_the_smokes_environment(tmp_path: Path, catalogue: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINMATRIX_PARAMS", '{"stale": 1}')
    monkeypatch.setenv("PYTHONSAFEPATH", "1")
    monkeypatch.setenv("PYTHONPATH", "/host/path")
    monkeypatch.setenv("VLLM_X", "host")
    monkeypatch.setenv("PINMATRIX_LIB", "/the/users/own")
    monkeypatch.setenv("HOST_ONLY", "kept")
    monkeypatch.setenv("PYTHONUNBUFFERED", "")  # the host's setting does not decide: the log must be live
    cell = HostCell(env={"VLLM_X": "cell"})
    result = tmp_path / "r.json"
    env = smoke_env(cell, result, None)
    assert "PINMATRIX_PARAMS" not in env and "PYTHONSAFEPATH" not in env  # a host's stale value never reaches it
    assert env["VLLM_X"] == "cell" and env["HOST_ONLY"] == "kept"  # the cell's variables win over the host's
    assert env["PINMATRIX_SMOKE_RESULT"] == str(result) and env["PYTHONUNBUFFERED"] == "1"
    assert env["PINMATRIX_CELL"] == cell_smoke_env(cell)["PINMATRIX_CELL"]
    assert env["PINMATRIX_LIB"] == "/the/users/own"  # arch-scan's variables only where not set
    assert env["PYTHONPATH"] == os.pathsep.join([str(shipped_dir()), "/host/path"])
    assert "PINMATRIX_OVERLAY" not in env


def test_a_probes_parameters_and_an_overlay_reach_the_smoke(tmp_path: Path, catalogue: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.delenv("PINMATRIX_LIB", raising=False)
    overlay = Overlay(tmp_path / "site")
    env = smoke_env(HostCell(), tmp_path / "r.json", overlay, {"b": 2, "a": 1.5})
    assert env["PINMATRIX_PARAMS"] == '{"a": 1.5, "b": 2}'
    assert env["PYTHONPATH"] == os.pathsep.join([str(tmp_path / "site"), str(shipped_dir())])
    assert env["PINMATRIX_OVERLAY"] == str(tmp_path / "site")
    assert env["PINMATRIX_LIB"]  # set when the host has none
    assert "PINMATRIX_PARAMS" not in smoke_env(HostCell(), tmp_path / "r.json", None, {})


# --------------------------------------------------------------------------------------------- run_process
def run(tmp_path: Path, code: str, *, timeout: float = 30, grace: float = 3.0, env: dict[str, str] | None = None,
        cleanup: list[str] | None = None, argv: list[str] | None = None) -> tuple[ProcessResult, str]:
    log, result = tmp_path / "logs" / "s.log", tmp_path / "s.result.json"
    base = {**os.environ, "PINMATRIX_SMOKE_RESULT": str(result), **(env or {})}
    proc = run_process(argv or [PY, "-X", "faulthandler", "-c", code], base, log, result, timeout, cwd=tmp_path,
                       kill_grace_s=grace, cleanup=cleanup)
    return proc, log.read_text(errors="replace")


WRITE_RESULT = "import json, os; json.dump({}, open(os.environ['PINMATRIX_SMOKE_RESULT'], 'w'))"


def test_a_smoke_runs_in_its_own_session_without_stdin_logging_both_streams(tmp_path: Path) -> None:
    code = WRITE_RESULT.format(
        "{'pgid_is_pid': os.getpgid(0) == os.getpid(), 'sid_is_pid': os.getsid(0) == os.getpid(), "
        "'stdin': __import__('sys').stdin.read(), 'cwd': os.getcwd(), 'token': os.environ.get('" + TOKEN_ENV + "')}")
    code += "; print('to stdout'); import sys; print('to stderr', file=sys.stderr); sys.exit(3)"
    proc, log = run(tmp_path, code)
    assert proc.returncode == 3 and not proc.timed_out and proc.infra is None and 0 < proc.seconds < 30
    assert proc.result is not None
    assert proc.result["pgid_is_pid"] and proc.result["sid_is_pid"] and proc.result["stdin"] == ""
    assert proc.result["cwd"] == str(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{32}", proc.result["token"])
    assert log.startswith(f"$ {PY} -X faulthandler -c {code}\n")
    assert "to stdout\n" in log and "to stderr\n" in log


def test_the_smoke_asks_to_die_with_the_runner(tmp_path: Path) -> None:
    code = WRITE_RESULT.format(
        "{'pdeathsig': (lambda c, s: (c.CDLL(None).prctl(2, c.byref(s), 0, 0, 0), s.value)[1])"
        "(__import__('ctypes'), __import__('ctypes').c_int(0)), 'ppid': os.getppid()}")
    proc, _ = run(tmp_path, code)
    assert proc.result == {"pdeathsig": int(signal.SIGKILL), "ppid": os.getpid()}


def test_a_stale_result_file_is_removed_before_the_smoke_runs(tmp_path: Path) -> None:
    (tmp_path / "s.result.json").write_text('{"status": "pass"}')
    proc, _ = run(tmp_path, "raise SystemExit(1)")
    assert proc.returncode == 1 and proc.result is None


def test_the_result_line_on_stdout_stands_in_for_a_missing_file(tmp_path: Path) -> None:
    code = ("print('PINMATRIX-RESULT {\"status\": \"fail\"}'); print('PINMATRIX-RESULT {\"status\": \"pass\"}');"
            "print('after')")
    proc, _ = run(tmp_path, code)
    assert proc.result == {"status": "pass"}  # the last one
    proc, _ = run(tmp_path, "print('PINMATRIX-RESULT {\"status\": \"pass\"}'); print('PINMATRIX-RESULT {broken')")
    assert proc.result is None
    proc, _ = run(tmp_path, "print(' PINMATRIX-RESULT {}'); print('PINMATRIX-RESULT{}')")
    assert proc.result is None


def test_a_result_file_that_is_not_json_gives_way_to_the_result_line(tmp_path: Path) -> None:
    code = ("import os; open(os.environ['PINMATRIX_SMOKE_RESULT'], 'w').write('{not json');"
            "print('PINMATRIX-RESULT {\"status\": \"skip\"}')")
    proc, _ = run(tmp_path, code)
    assert proc.result == {"status": "skip"}


def test_a_hang_gets_sigabrt_first_so_its_stacks_are_in_the_log(tmp_path: Path) -> None:
    start = time.monotonic()
    proc, log = run(tmp_path, "import time\ndef waiting():\n    time.sleep(60)\nwaiting()", timeout=1, grace=10)
    assert proc.timed_out and proc.returncode == -signal.SIGABRT
    assert time.monotonic() - start < 8  # the grace is not waited out once it has died
    assert "Fatal Python error: Aborted" in log and "in waiting" in log


def test_a_hang_that_ignores_sigabrt_is_killed_after_the_grace(tmp_path: Path) -> None:
    code = "import signal, time; signal.signal(signal.SIGABRT, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    start = time.monotonic()
    proc, log = run(tmp_path, code, timeout=1, grace=0.5)
    took = time.monotonic() - start
    assert proc.timed_out and proc.returncode == -signal.SIGKILL
    assert 1 <= took < 8 and "ready" in log


def test_the_smokes_group_dies_with_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    code = (f"import subprocess, sys; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
            f"open({str(pid_file)!r}, 'w').write(str(c.pid))")
    proc, _ = run(tmp_path, code)
    assert proc.returncode == 0
    child = int(pid_file.read_text())
    assert gone(child)


def test_a_child_that_left_the_group_is_swept_by_the_token(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    code = (f"import subprocess, sys; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
            f" start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL);"
            f"open({str(pid_file)!r}, 'w').write(str(c.pid))")
    proc, _ = run(tmp_path, code)
    assert proc.returncode == 0 and gone(int(pid_file.read_text()))


def gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_the_clean_up_runs_after_the_smoke_and_the_guard_has_no_token(tmp_path: Path) -> None:
    seen = tmp_path / "cleanup.json"
    cleanup = [PY, "-c", f"import json, os; json.dump(os.environ.get({TOKEN_ENV!r}), open({str(seen)!r}, 'w'))"]
    proc, _ = run(tmp_path, "pass", cleanup=cleanup)
    assert proc.returncode == 0
    assert json.loads(seen.read_text()) is None


def test_a_smoke_that_cannot_start_leaves_nothing_open(tmp_path: Path) -> None:
    before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(FileNotFoundError):
        run(tmp_path, "", argv=[str(tmp_path / "no-such-python")])
    assert set(os.listdir("/proc/self/fd")) == before


def test_the_log_is_capped(tmp_path: Path) -> None:
    log, result = tmp_path / "s.log", tmp_path / "s.json"
    run_process([PY, "-c", "print('x' * 100000)"], dict(os.environ), log, result, 30, cwd=tmp_path, log_cap=4096)
    assert 4096 <= log.stat().st_size < 8192 and "log capped" in log.read_text()


# --------------------------------------------------------------------------------------------- run_one
def test_an_image_runtime_gets_the_smokes_paths_env_and_timeout(tmp_path: Path, catalogue: Path) -> None:
    rt = Runtime(ProcessResult(0, False, {"status": "pass", "metrics": {"n": 3, "shape": [2, 3]},
                                          "environment": {"torch": "2.9"}}, 1.23456))
    opts = options(tmp_path, catalogue, runtime=rt.named("podman"), timeout_s=25, image_digest="sha256:ab",
                   kernel_cache="keep")
    cell = HostCell(env={"X": "1"})
    work = tmp_path / "w"
    work.mkdir()
    rec = run_one(cell, smoke(catalogue, "alpha"), opts, host=HOST, run_id="r1", work=work, overlay=None,
                  params={"batch": 8, "a": "x"})
    (call,) = rt.calls
    assert call["cell"] is cell and call["smoke"] == "alpha" and call["timeout"] == 25.0
    from pinmatrix.sanitize import file_slug

    assert call["log"] == work / f"{file_slug('alpha[a=x,batch=8]')}.log"
    assert call["result"] == work / f".{file_slug('alpha[a=x,batch=8]')}.result.json"
    assert call["env"]["X"] == "1" and call["env"]["PINMATRIX_SMOKE_RESULT"] == str(call["result"])
    assert json.loads(call["env"]["PINMATRIX_PARAMS"]) == {"a": "x", "batch": 8}
    assert rec.status == "pass" and rec.failure_class is None
    assert rec.metrics["n"] == 3 and rec.metrics["shape"] == "[2, 3]"
    assert rec.environment == {"torch": "2.9", "runtime": "podman", "kernel_cache": "keep"}
    assert rec.duration_s == 1.235 and rec.image_digest == "sha256:ab" and rec.params == {"batch": 8, "a": "x"}
    assert rec.log_path == str(call["log"]) and (rec.cell_id, rec.stack, rec.run_id) == ("host", "host", "r1")
    assert rec.smoke == "alpha" and rec.host == HOST and rec.known_issue is None
    assert rec.started_at <= rec.finished_at


def test_a_probes_label_names_its_log(tmp_path: Path, catalogue: Path) -> None:
    rt = Runtime(ProcessResult(0, False, {"status": "pass"}, 0.1))
    work = tmp_path / "w"
    work.mkdir()
    run_one(HostCell(), smoke(catalogue, "alpha"), options(tmp_path, catalogue, runtime=rt), host=HOST,
            run_id="r", work=work, overlay=None, params={"b": 2, "a": 1})
    run_one(HostCell(), smoke(catalogue, "alpha"), options(tmp_path, catalogue, runtime=rt), host=HOST,
            run_id="r", work=work, overlay=None)
    from pinmatrix.sanitize import file_slug

    assert [c["log"].name for c in rt.calls] == [f"{file_slug('alpha[a=1,b=2]')}.log", "alpha.log"]
    assert [c["result"].name for c in rt.calls] == [f".{file_slug('alpha[a=1,b=2]')}.result.json", ".alpha.result.json"]
    assert "PINMATRIX_PARAMS" not in rt.calls[1]["env"]


@pytest.mark.parametrize(("smoke_name", "option", "timeout"), [
    ("alpha", None, 40.0), ("alpha", 100, 40.0), ("alpha", 10, 10.0), ("beta", None, 900.0), ("beta", 0, DEFAULT_TIMEOUT_S),
])
def test_the_smokes_timeout_capped_by_the_runs(tmp_path: Path, catalogue: Path, smoke_name: str,
                                               option: float | None, timeout: float) -> None:
    rt = Runtime(ProcessResult(0, False, {"status": "pass"}, 0.1))
    work = tmp_path / "w"
    work.mkdir()
    run_one(HostCell(), smoke(catalogue, smoke_name), options(tmp_path, catalogue, runtime=rt, timeout_s=option),
            host=HOST, run_id="r", work=work, overlay=None)
    assert rt.calls[0]["timeout"] == timeout


def test_a_runtime_that_cannot_start_is_an_infrastructure_error_not_a_failure(tmp_path: Path, catalogue: Path) -> None:
    rt = Runtime(ProcessResult(125, False, None, 0.2, infra="podman could not start the container (exit status 125)"))
    work = tmp_path / "w"
    work.mkdir()
    rec = run_one(HostCell(), smoke(catalogue, "alpha"), options(tmp_path, catalogue, runtime=rt.named("podman")),
                  host=HOST, run_id="r", work=work, overlay=None)
    assert (rec.status, rec.failure_class) == ("error", "infra")
    assert rec.reason == "podman could not start the container (exit status 125)"


def test_a_known_issue_cannot_turn_an_infrastructure_error_into_an_expected_failure(tmp_path: Path,
                                                                                    catalogue: Path) -> None:
    issue = KnownIssue("KI-1", ("alpha",), "fail", None, "fails here")
    rt = Runtime(ProcessResult(125, False, None, 0.2, infra="docker could not start"))
    work = tmp_path / "w"
    work.mkdir()
    rec = run_one(HostCell(known_issues=(issue,)), smoke(catalogue, "alpha"),
                  options(tmp_path, catalogue, runtime=rt.named("docker")), host=HOST, run_id="r", work=work,
                  overlay=None)
    assert (rec.status, rec.failure_class, rec.known_issue) == ("error", "infra", None)


def test_a_timeout_is_a_failure_of_its_own_class(tmp_path: Path, catalogue: Path) -> None:
    rt = Runtime(ProcessResult(-9, True, None, 40.0), log="Current thread 0x1 (most recent call first):\n")
    work = tmp_path / "w"
    work.mkdir()
    rec = run_one(HostCell(), smoke(catalogue, "alpha"), options(tmp_path, catalogue, runtime=rt), host=HOST,
                  run_id="r", work=work, overlay=None)
    assert (rec.status, rec.failure_class) == ("fail", "timeout") and rec.reason.startswith("timed out after 40 s")


def test_the_log_is_read_for_the_verdict(tmp_path: Path, catalogue: Path) -> None:
    log = "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    rt = Runtime(ProcessResult(1, False, None, 1.0), log=log)
    work = tmp_path / "w"
    work.mkdir()
    rec = run_one(HostCell(), smoke(catalogue, "alpha"), options(tmp_path, catalogue, runtime=rt), host=HOST,
                  run_id="r", work=work, overlay=None)
    assert (rec.status, rec.failure_class) == ("fail", "illegal-memory-access")


def test_a_known_issue_turns_its_failure_into_xfail(tmp_path: Path, catalogue: Path) -> None:
    issue = KnownIssue("KI-7", ("alpha",), "fail", "wrong-result", "numbers off on this stack")
    rt = Runtime(ProcessResult(0, False, {"status": "fail", "failure_class": "wrong-result", "reason": "off"}, 1.0))
    work = tmp_path / "w"
    work.mkdir()
    rec = run_one(HostCell(known_issues=(issue,)), smoke(catalogue, "alpha"), options(tmp_path, catalogue, runtime=rt),
                  host=HOST, run_id="r", work=work, overlay=None)
    assert rec.status == "xfail" and rec.known_issue == "KI-7"


def test_a_record_names_its_runtime_and_the_overlay_it_used(tmp_path: Path, catalogue: Path) -> None:
    rt = Runtime(ProcessResult(0, False, {"status": "pass", "metrics": {"m": 1.5}}, 0.1))
    work = tmp_path / "w"
    work.mkdir()
    overlay = Overlay(tmp_path / "site", wheels=["w-1.whl"], patches=["p1: applied"])
    rec = run_one(HostCell(), smoke(catalogue, "alpha"), options(tmp_path, catalogue, runtime=rt), host=HOST,
                  run_id="r", work=work, overlay=overlay)
    assert rec.environment == {"runtime": "fake", "overlay_wheels": ["w-1.whl"], "overlay_patches": ["p1: applied"]}
    assert rec.metrics == {"m": 1.5} and rec.params == {}
    assert rt.calls[0]["env"]["PINMATRIX_OVERLAY"] == str(tmp_path / "site")


def test_a_smoke_without_a_log_or_result_still_gets_a_record(tmp_path: Path, catalogue: Path) -> None:
    class NoLog(Runtime):
        def start(self, *args: Any) -> ProcessResult:
            return self.answer

    work = tmp_path / "w"
    work.mkdir()
    rec = run_one(HostCell(), smoke(catalogue, "alpha"),
                  options(tmp_path, catalogue, runtime=NoLog(ProcessResult(2, False, None, 0.1))), host=HOST,
                  run_id="r", work=work, overlay=None)
    assert (rec.status, rec.failure_class) == ("fail", "error") and rec.metrics == {}
    assert rec.environment == {"runtime": "fake"}
    assert rec.reason == "exited with status 2 without a result: no output"  # no log: nothing read from one


def test_a_log_that_is_not_utf_8_is_read_not_raised(tmp_path: Path, catalogue: Path) -> None:
    class RawLog(Runtime):
        def start(self, cell: Any, smoke: Any, options: RunOptions, env: dict[str, str], log_path: Path,
                  result_path: Path, timeout: float, work: Path) -> ProcessResult:
            log_path.write_bytes(b"\xff\xfe\x80 native garbage\n"
                                 b"RuntimeError: CUDA error: an illegal memory access was encountered\n")
            return self.answer

    work = tmp_path / "w"
    work.mkdir()
    rec = run_one(HostCell(), smoke(catalogue, "alpha"),
                  options(tmp_path, catalogue, runtime=RawLog(ProcessResult(1, False, None, 0.1))), host=HOST,
                  run_id="r", work=work, overlay=None)
    assert (rec.status, rec.failure_class) == ("fail", "illegal-memory-access")


def test_the_host_runtime_runs_the_smoke_module_with_faulthandler(tmp_path: Path, catalogue: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []

    def fake(argv: list[str], env: dict[str, str], log_path: Path, result_path: Path, timeout: float, *,
             cwd: Path, kill_grace_s: float, log_cap: int) -> ProcessResult:
        calls.append((argv, log_path, result_path, timeout, cwd, kill_grace_s, log_cap))
        return ProcessResult(0, False, {"status": "pass"}, 0.1)

    monkeypatch.setattr(runner, "run_process", fake)
    work = tmp_path / "w"
    work.mkdir()
    s = smoke(catalogue, "alpha")
    run_one(HostCell(), s, options(tmp_path, catalogue, python="/py", kill_grace_s=1.5, log_cap=1234), host=HOST,
            run_id="r", work=work, overlay=None)
    assert calls == [(["/py", "-X", "faulthandler", "-u", str(s.module), "alpha"], work / "alpha.log",
                      work / ".alpha.result.json", 40.0, work, 1.5, 1234)]


# --------------------------------------------------------------------------------------------- run_cell
def test_a_recorded_smoke_is_skipped_unless_rerun(tmp_path: Path, catalogue: Path) -> None:
    store = ResultsStore(tmp_path / "r.sqlite")
    rt = Runtime(ProcessResult(0, False, {"status": "pass"}, 0.1))
    lines: list[str] = []
    cell = HostCell(smokes=("alpha",))
    cat = load_catalogue(catalogue)
    first = run_cell(cell, cat, store, options(tmp_path, catalogue, runtime=rt), host=HOST, run_id="r1",
                     echo=lines.append)
    assert [r.smoke for r in first.records] == ["alpha"] and first.skipped_recorded == []
    assert lines == ["cell host host (the current environment): 1 smoke(s)", "  PASS      alpha 0.1s"]
    lines.clear()
    again = run_cell(cell, cat, store, options(tmp_path, catalogue, runtime=rt), host=HOST, run_id="r2",
                     echo=lines.append)
    assert again.records == [] and again.skipped_recorded == ["alpha"] and len(rt.calls) == 1
    assert lines[1] == ("  recorded  alpha (already recorded for this cell and host on the host environment; "
                        "--rerun runs it again)")
    rerun = run_cell(cell, cat, store, options(tmp_path, catalogue, runtime=rt, rerun=True), host=HOST,
                     run_id="r3", echo=lines.append)
    assert [r.smoke for r in rerun.records] == ["alpha"] and len(rt.calls) == 2
    assert len(store.query(smoke="alpha")) == 2


def test_a_smoke_recorded_on_another_image_runs_again(tmp_path: Path, catalogue: Path) -> None:
    store = ResultsStore(tmp_path / "r.sqlite")
    rt = Runtime(ProcessResult(0, False, {"status": "pass"}, 0.1))
    cell, cat = HostCell(smokes=("alpha",)), load_catalogue(catalogue)
    lines: list[str] = []
    for digest in ("sha256:aa", "sha256:bb", "sha256:bb"):
        run_cell(cell, cat, store, options(tmp_path, catalogue, runtime=rt.named("podman"), image_digest=digest),
                 host=HOST, run_id=digest, echo=lines.append)
    assert len(rt.calls) == 2
    assert lines[-1].endswith("(already recorded for this cell and host on image sha256:bb; --rerun runs it again)")


def test_a_failure_is_echoed_with_its_class(tmp_path: Path, catalogue: Path) -> None:
    rt = Runtime(ProcessResult(0, False, {"status": "fail", "failure_class": "wrong-result", "reason": "off by 2"}, 2.0))
    lines: list[str] = []
    run_cell(HostCell(smokes=("alpha",)), load_catalogue(catalogue), ResultsStore(tmp_path / "r.sqlite"),
             options(tmp_path, catalogue, runtime=rt), host=HOST, run_id="r", echo=lines.append)
    assert lines[-1] == "  FAIL      alpha 2.0s [wrong-result] off by 2"


def test_a_need_the_hosts_gpu_cannot_meet_is_a_skip_without_a_process(tmp_path: Path, catalogue: Path) -> None:
    store = ResultsStore(tmp_path / "r.sqlite")
    rt = Runtime(ProcessResult(0, False, {"status": "pass"}, 0.1))
    out = run_cell(HostCell(smokes=("gpu-big", "gpu-any", "cpu-needs")), load_catalogue(catalogue), store,
                   options(tmp_path, catalogue, runtime=rt, image_digest="sha256:cc"), host=HOST, run_id="r",
                   echo=lambda _line: None)
    assert [c["smoke"] for c in rt.calls] == ["gpu-any", "cpu-needs"]  # not a GPU smoke: the smoke decides
    (skipped,) = [r for r in out.records if r.smoke == "gpu-big"]
    why = "needs compute capability >= 10.0, device is 9.0"
    assert (skipped.status, skipped.failure_class, skipped.reason) == (
        "skip", None, f"{why} (decided from the host's GPU before starting the smoke)")
    assert skipped.environment == {"decided_by": "host-probe"} and skipped.duration_s == 0.0
    assert skipped.image_digest == "sha256:cc" and skipped.params == {} and skipped.metrics == {}
    assert skipped.started_at == skipped.finished_at and skipped.run_id == "r" and skipped.stack == "host"
    assert Path(skipped.log_path).read_text() == f"[gpu-big] skip: {why} (decided from the host's GPU before starting the smoke)\n"
    assert [r.smoke for r in store.query(smoke="gpu-big")] == ["gpu-big"]


def test_the_host_probe_decides_only_for_gpu_smokes_on_a_host_with_a_gpu(catalogue: Path) -> None:
    big, cpu = smoke(catalogue, "gpu-big"), smoke(catalogue, "cpu-needs")
    assert decided_by_host(big, HOST) == "needs compute capability >= 10.0, device is 9.0"
    assert decided_by_host(cpu, HOST) is None
    assert decided_by_host(big, CPU_HOST) is None  # no GPU seen: the smoke's own driver check says why
    no_cap = HostFingerprint.make(hostname="x", gpu_name="G", gpu_count=1, driver="1", capability=None)
    assert decided_by_host(big, no_cap) is None
    ok = HostFingerprint.make(hostname="x", gpu_name="G", gpu_count=1, driver="1", capability="10.0")
    assert decided_by_host(big, ok) is None


def test_nothing_to_run_makes_no_folder(tmp_path: Path, catalogue: Path) -> None:
    out = run_cell(HostCell(smokes=("alpha",)), load_catalogue(catalogue), ResultsStore(tmp_path / "r.sqlite"),
                   options(tmp_path, catalogue, keyword="beta"), host=HOST, run_id="r", echo=lambda _l: None)
    assert out.records == [] and not (tmp_path / "logs").exists()


def test_the_smokes_run_in_a_folder_per_run_and_cell(tmp_path: Path, catalogue: Path) -> None:
    rt = Runtime(ProcessResult(0, False, {"status": "pass"}, 0.1))
    run_cell(HostCell(smokes=("alpha",)), load_catalogue(catalogue), ResultsStore(tmp_path / "r.sqlite"),
             options(tmp_path, catalogue, runtime=rt.named("podman")), host=HOST, run_id="run7",
             echo=lambda _l: None)
    assert rt.calls[0]["log"] == (tmp_path / "logs" / "run7" / "host" / "alpha.log").resolve()


def test_an_overlay_is_built_only_for_the_host_runtime_with_wheels_or_patches(
        tmp_path: Path, catalogue: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[dict[str, Any]] = []

    def build(cell: Any, root: Path, **kw: Any) -> Overlay:
        built.append({"root": root, **kw})
        return Overlay(tmp_path / "site", wheels=["w.whl"])

    monkeypatch.setattr(runner, "build_overlay", build)
    rt = HostFake(ProcessResult(0, False, {"status": "pass"}, 0.1))
    image = Runtime(ProcessResult(0, False, {"status": "pass"}, 0.1), name="podman")
    cat, store = load_catalogue(catalogue), ResultsStore(tmp_path / "r.sqlite")
    echo = lambda _l: None  # noqa: E731
    out = run_cell(HostCell(smokes=("alpha",)), cat, store,
                   options(tmp_path, catalogue, runtime=rt, wheels_dir=tmp_path / "wh", python="/py", rerun=True),
                   host=HOST, run_id="r", echo=echo)
    assert built == [{"root": tmp_path / "overlay", "wheels_dir": tmp_path / "wh", "repo_root": Path("."),
                      "python": "/py", "log": echo}]
    assert out.overlay == Overlay(tmp_path / "site", wheels=["w.whl"])
    assert out.records[0].environment["overlay_wheels"] == ["w.whl"]
    run_cell(HostCell(smokes=("alpha",), patches=("p",)), cat, store,
             RunOptions(smoke_dir=catalogue, logs_dir=tmp_path / "logs", runtime=rt, rerun=True), host=HOST,
             run_id="r", echo=echo)
    assert built[-1]["root"] == Path(".pinmatrix/overlay") and built[-1]["wheels_dir"] is None
    run_cell(HostCell(smokes=("alpha",), patches=("p",)), cat, store,
             options(tmp_path, catalogue, runtime=image, wheels_dir=tmp_path, rerun=True),
             host=HOST, run_id="r", echo=echo)
    run_cell(HostCell(smokes=("alpha",)), cat, store, options(tmp_path, catalogue, runtime=rt, rerun=True),
             host=HOST, run_id="r", echo=echo)
    assert len(built) == 2


def test_a_matrix_cell_on_the_host_runtime_records_how_the_host_differs(tmp_path: Path, catalogue: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(runner, "environment_of", lambda python, site: seen.append((python, site)) or {"py": "3"})

    def differences(cell: Any, lock: str | None, env: Any) -> dict[str, Any]:
        seen.append((cell.id, lock, env))
        return {"identical": False, "packages": [{"name": "torch"}, {"name": "numpy"}], "host_python": "3.11",
                "cell_python": "3.12"}

    monkeypatch.setattr(runner, "differences", differences)
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "c1.txt").write_text("torch==2.9\n", encoding="utf-8")
    rt = HostFake(ProcessResult(0, False, {"status": "pass"}, 0.1))
    lines: list[str] = []
    out = run_cell(HostCell(id="c1", smokes=("alpha", "beta")), load_catalogue(catalogue),
                   ResultsStore(tmp_path / "r.sqlite"),
                   options(tmp_path, catalogue, runtime=rt, repo_root=tmp_path, python="/py"), host=HOST,
                   run_id="r", echo=lines.append)
    assert seen == [("/py", None), ("c1", "torch==2.9\n", {"py": "3"})]
    assert lines[1] == ("  host runtime differs from the cell: python 3.11 (cell 3.12), 2 locked package(s) at another "
                        "version or absent")
    assert all(r.environment["host_vs_lock"]["packages"] == [{"name": "torch"}, {"name": "numpy"}] for r in out.records)
    # no lock file: differences is told so; identical: nothing echoed
    seen.clear()
    monkeypatch.setattr(runner, "differences", lambda cell, lock, env: seen.append(lock) or {"identical": True})
    lines.clear()
    run_cell(HostCell(id="c2", smokes=("alpha",)), load_catalogue(catalogue), ResultsStore(tmp_path / "r2.sqlite"),
             options(tmp_path, catalogue, runtime=rt, repo_root=tmp_path), host=HOST, run_id="r", echo=lines.append)
    assert seen == [(PY, None), None] and len(lines) == 2


def test_the_host_cell_and_image_runtimes_are_not_compared_with_a_lock(tmp_path: Path, catalogue: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "environment_of", lambda *a: pytest.fail("compared"))
    rt = HostFake(ProcessResult(0, False, {"status": "pass"}, 0.1))
    out = run_cell(HostCell(smokes=("alpha",)), load_catalogue(catalogue), ResultsStore(tmp_path / "r.sqlite"),
                   options(tmp_path, catalogue, runtime=rt), host=HOST, run_id="r", echo=lambda _l: None)
    out2 = run_cell(HostCell(id="c1", smokes=("alpha",)), load_catalogue(catalogue), ResultsStore(tmp_path / "s.sqlite"),
                    options(tmp_path, catalogue, runtime=Runtime(rt.answer, name="docker")), host=HOST, run_id="r",
                    echo=lambda _l: None)
    assert "host_vs_lock" not in out.records[0].environment and "host_vs_lock" not in out2.records[0].environment


# ----------------------------------------------------------------------------------- plans and run_cells
def test_a_cell_naming_a_smoke_the_catalogue_lacks_is_refused(catalogue: Path) -> None:
    with pytest.raises(SmokeError) as refused:
        plan_smokes(HostCell(id="c1", name="the cell", smokes=("alpha", "nope", "gone*")), load_catalogue(catalogue), None)
    assert str(refused.value) == "cell c1 (the cell): no smoke named 'nope', 'gone*' in the catalogue"


def test_a_plan_is_the_cells_smokes_then_the_keyword(catalogue: Path) -> None:
    cat = load_catalogue(catalogue)
    names = [s.name for s in cat]
    assert [s.name for s in plan_smokes(HostCell(), cat, None)] == names
    assert [s.name for s in plan_smokes(HostCell(smokes=("gpu-*", "beta")), cat, None)] == ["beta", "gpu-big", "gpu-any"]
    assert [s.name for s in plan_smokes(HostCell(smokes=("gpu-*", "beta")), cat, "not beta")] == ["gpu-big", "gpu-any"]
    assert [s.name for s in plan_smokes(HostCell(), cat, "alpha or cpu")] == ["alpha", "cpu-needs"]
    assert plan_smokes(HostCell(smokes=()), cat, None) == []


def test_no_keyword_keeps_every_smoke() -> None:
    for expr in (None, ""):
        keep = keyword_filter(expr)
        assert keep("anything") and keep("")
    assert not keyword_filter("alpha")("beta") and keyword_filter("alpha")("alpha")


def test_run_cells_checks_the_store_first_and_says_the_run(tmp_path: Path, catalogue: Path) -> None:
    order: list[str] = []

    class Store(ResultsStore):
        def prepare_write(self) -> None:
            order.append("prepare")
            super().prepare_write()

    import pinmatrix.smoke.cellrun as r

    real = r.load_catalogue

    def load(d: Any) -> Any:
        order.append("catalogue")
        return real(d)

    rt = Runtime(ProcessResult(0, False, {"status": "pass"}, 0.1))
    lines: list[str] = []
    mp = pytest.MonkeyPatch()
    mp.setattr(r, "load_catalogue", load)
    try:
        runs = run_cells([HostCell(smokes=("alpha",)), HostCell(id="c2", smokes=("beta",))], Store(tmp_path / "r.sqlite"),
                         options(tmp_path, catalogue, runtime=rt.named("podman")), host=HOST, echo=lines.append)
    finally:
        mp.undo()
    assert order[:2] == ["prepare", "catalogue"]  # a damaged store is named before anything else is read
    run_id = runs[0].records[0].run_id
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{6}", run_id) and runs[1].records[0].run_id == run_id
    assert lines[0] == f"run {run_id} on {HOST.label()} (host {HOST.id}), runtime podman"
    assert [r.cell.id for r in runs] == ["host", "c2"]
    assert lines[1:] == ["cell host host (the current environment): 1 smoke(s)", "  PASS      alpha 0.1s",
                         "cell c2 host (the current environment): 1 smoke(s)", "  PASS      beta 0.1s"]


def test_run_ids_are_utc_stamps_with_a_random_tail() -> None:
    ids = {new_run_id() for _ in range(20)}
    assert len(ids) > 1
    for i in ids:
        assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{6}", i)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", runner.now())


def test_a_record_carries_the_cells_stack_or_host(tmp_path: Path, catalogue: Path) -> None:
    rt = Runtime(ProcessResult(0, False, {"status": "pass"}, 0.1))
    store = ResultsStore(tmp_path / "r.sqlite")
    opts = options(tmp_path, catalogue, runtime=rt.named("podman"))
    for cell, stack in ((HostCell(id="c1", smokes=("alpha", "gpu-big"), stack="st-1", name="st-1 a"), "st-1"),
                        (HostCell(id="c2", smokes=("alpha", "gpu-big"), name=""), "host")):
        lines: list[str] = []
        out = run_cell(cell, load_catalogue(catalogue), store, opts, host=HOST, run_id="r", echo=lines.append)
        assert {r.smoke: r.stack for r in out.records} == {"alpha": stack, "gpu-big": stack}
        assert lines[0] == f"cell {cell.id} {cell.name}: 2 smoke(s)"
        assert {r.smoke: r.status for r in out.records} == {"alpha": "pass", "gpu-big": "skip"}


def test_run_ids_and_stamps_are_utc_whatever_the_hosts_time_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    import datetime as dt

    monkeypatch.setenv("TZ", "XST+07")  # seven hours west of UTC, no tzdata needed
    time.tzset()
    try:
        before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
        stamp = dt.datetime.strptime(new_run_id()[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
        now = dt.datetime.fromisoformat(runner.now())
        after = dt.datetime.now(dt.timezone.utc)
        assert before <= stamp <= after and before <= now <= after and now.utcoffset() == dt.timedelta(0)
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_cells_plan_refusal_and_host_runtime(tmp_path: Path, catalogue: Path) -> None:
    with pytest.raises(SmokeError, match=r"^cell c9 \(st-9 x\): no smoke named 'nope' in the catalogue$"):
        plan_smokes(HostCell(id="c9", name="st-9 x", smokes=("nope",)), load_catalogue(catalogue), None)
    assert len(plan_smokes(HostCell(id="c8"), load_catalogue(catalogue), None)) == len(load_catalogue(catalogue))
    assert plan_smokes(HostCell(id="c7", smokes=()), load_catalogue(catalogue), None) == []  # none is not all
    rt = Runtime(ProcessResult(0, False, {"status": "pass"}, 0.1))
    out = run_cell(HostCell(smokes=("alpha",)), load_catalogue(catalogue), ResultsStore(tmp_path / "r.sqlite"),
                   options(tmp_path, catalogue, runtime=rt), host=HOST, run_id="r", echo=lambda _l: None)
    assert out.overlay is None and [r.status for r in out.records] == ["pass"]


def test_the_host_comparison_reads_the_overlays_site(tmp_path: Path, catalogue: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    cells: list[Any] = []
    monkeypatch.setattr(runner, "build_overlay", lambda cell, root, **kw: cells.append(cell) or Overlay(tmp_path / "ov"))
    monkeypatch.setattr(runner, "environment_of", lambda python, site: seen.append(site) or {})
    monkeypatch.setattr(runner, "differences", lambda cell, lock, env: {"identical": True})
    cell = HostCell(id="c1", smokes=("alpha",), patches=("p",))
    run_cell(cell, load_catalogue(catalogue), ResultsStore(tmp_path / "r.sqlite"),
             options(tmp_path, catalogue, runtime=HostFake(ProcessResult(0, False, {"status": "pass"}, 0.1))),
             host=HOST, run_id="r", echo=lambda _l: None)
    assert seen == [tmp_path / "ov"] and cells == [cell]


def test_the_runners_stdin_never_reaches_the_smoke(tmp_path: Path) -> None:
    saved = os.dup(0)
    r, w = os.pipe()
    os.write(w, b"the runner's input")
    os.close(w)
    os.dup2(r, 0)
    os.close(r)
    try:
        proc, _ = run(tmp_path, WRITE_RESULT.format("{'stdin': __import__('sys').stdin.read()}"))
    finally:
        os.dup2(saved, 0)
        os.close(saved)
    assert proc.result == {"stdin": ""}


def test_the_log_folder_is_made_with_its_parents_and_the_guard_gets_the_given_env(tmp_path: Path) -> None:
    log, result, seen = tmp_path / "a" / "b" / "s.log", tmp_path / "r.json", tmp_path / "seen.json"
    cleanup = [PY, "-c", f"import json, os; json.dump(os.environ.get('GIVEN'), open({str(seen)!r}, 'w'))"]
    proc = run_process([PY, "-c", "pass"], {**os.environ, "GIVEN": "to the runner"}, log, result, 30, cwd=tmp_path,
                       cleanup=cleanup)
    assert proc.timed_out is False and proc.returncode == 0 and log.is_file()
    assert json.loads(seen.read_text()) == "to the runner"  # the env given, not the runner's own


def test_a_log_that_is_not_utf_8_still_gives_its_result_line(tmp_path: Path) -> None:
    code = "import sys; sys.stdout.buffer.write(b'\\xff\\xfe\\n'); print('PINMATRIX-RESULT {\"status\": \"pass\"}')"
    proc, _ = run(tmp_path, code)
    assert proc.result == {"status": "pass"}


# ----------------------------------------------------------------------------------- what a smoke leaves
@pytest.mark.parametrize("text", ["[1, 2]", '"pass"', "7", "null", "[" * 100_000, "\udcff", "not json"])
def test_a_result_that_is_not_a_json_object_is_no_result(tmp_path: Path, text: str) -> None:
    """A result file (or the stdout result line) that is another JSON value, unreadable or nested past the
    parser's limit is no result, so the smoke is classified as exiting without one; it never reaches the
    classifier as a list (whose .get would end the run with a traceback)."""
    result, log = tmp_path / "r.json", tmp_path / "s.log"
    result.write_text(text, encoding="utf-8", errors="surrogateescape")
    log.write_text(f"{runner.RESULT_PREFIX}{text}\n", encoding="utf-8", errors="surrogateescape")
    assert runner._read_result(result, log) is None
    log.write_text(f"{runner.RESULT_PREFIX}" + '{"status": "pass"}\n', encoding="utf-8")
    assert runner._read_result(result, log) == {"status": "pass"}  # the stdout line stands in for a bad file
    result.write_text('{"status": "skip"}', encoding="utf-8")
    assert runner._read_result(result, log) == {"status": "skip"}  # the file, when it is an object, first
