"""How ``ci slurm-collect`` reads how each task ended (pinmatrix.ci.slurm_collect): the controller's answer
(``scontrol show job -o``), slurmstepd's line in the task's output, the task's own ``started`` and ``finished``
files; the record each smoke without a result gets (class, reason, host, run id, the task's Slurm facts), the
waiting line of a task still running, and ``--wait``'s lines and deadline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pinmatrix.ci.slurm import SCHEMA, ArrayEntry, Submission, TaskEntry, write_submission
from pinmatrix.ci.slurm_collect import (
    MAX_SCHEDULER_BYTES,
    TaskState,
    _run,
    collect,
    parse_scontrol,
    read_submission,
    scheduler_states,
    state_from_output,
    wait,
)
from pinmatrix.errors import PinmatrixError
from pinmatrix.results.store import HostFingerprint, ResultsStore, SmokeRecord

CELL, DIGEST = "c" * 12, "sha256:" + "2" * 64
STARTED = "job=81 array=77 task=0 node=gpu7 started=2026-12-04T01:00:00+00:00\n"


def _scontrol(text: str, code: int = 0) -> Any:
    asked: list[list[str]] = []

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        asked.append(argv)
        return subprocess.CompletedProcess(argv, code, text, "")

    run.asked = asked  # type: ignore[attr-defined]
    return run


NONE = _scontrol("", 1)


def _sub(tmp_path: Path, job_id: str | None = "77", gpu_product: str | None = "NVIDIA H200", arrays: int = 1,
         tasks: int = 1, **files: str) -> Path:
    """A submission of ``arrays`` arrays of ``tasks`` tasks (cell CELL, smokes import and gemm on a declared H200
    pool; the second array's job is the first's plus one), and the files of the first array's task 0."""
    directory = tmp_path / "sub"
    entries = []
    for a in range(arrays):
        name = "h200-h200" if a == 0 else f"h200-more{a}"
        entries.append(ArrayEntry(
            name=name, script=str(directory / f"{name}.sbatch"), directory=str(directory / name),
            job_id=None if job_id is None else str(int(job_id) + a), time_limit_min=30, options=(),
            tasks=tuple(TaskEntry(index=i, cell_id=CELL, stack="h200", pool="h200", smokes=("import", "gemm"), gpus=2,
                                  image_digest=DIGEST, gpu_product=gpu_product, driver="580.1", capability="9.0")
                        for i in range(tasks))))
    write_submission(Submission.model_validate({"schema": SCHEMA, "id": "s1", "matrix": "/m.toml",
                                                "runtime": "podman", "arrays": tuple(entries)}), directory)
    task_dir = directory / "h200-h200" / "0"
    task_dir.mkdir(parents=True)
    for name, text in files.items():
        (task_dir / name.replace("_", ".")).write_text(text, encoding="utf-8", errors="surrogateescape")
    return directory


def _row(smoke: str, status: str = "pass") -> dict[str, Any]:
    return SmokeRecord(cell_id=CELL, stack="h200", host=HostFingerprint.make(hostname="inside", gpu_name="H200"),
                       smoke=smoke, run_id="r", status=status, failure_class=None, reason="", metrics={},
                       log_path=None, started_at="2026-12-04T01:00:05+00:00",
                       finished_at="2026-12-04T01:00:06+00:00", duration_s=1.0, known_issue=None,
                       image_digest=DIGEST, environment={"python": "3.12"}).to_dict()


# ------------------------------------------------------------------------------------------- the scheduler


def test_scontrol_lines_of_this_array_only() -> None:
    text = ("JobId=9 ArrayJobId=7 ArrayTaskId=1 JobState=TIMEOUT NodeList=n1 ExitCode=0:15 TimeLimit=00:30:00\n"
            "JobId=10 ArrayJobId=7 ArrayTaskId=2 JobState=PENDING NodeList= ExitCode=0:0\n"
            "JobId=11 ArrayJobId=7 ArrayTaskId=8 NodeList=n1\n"  # no state: not a task line
            "JobId=12 ArrayJobId=70 ArrayTaskId=3 JobState=RUNNING NodeList=n2\n"
            "JobId=13 ArrayJobId=7 ArrayTaskId=4-12:4,x,20,30-29%3 JobState=PENDING NodeList=(null)\n"
            "JobId=7 ArrayJobId=7 JobState=PENDING\n")  # the array's own line: no task
    states = parse_scontrol(text, "7")
    assert states[1] == TaskState(state="TIMEOUT", job_id="9", node="n1", exit_code="0:15", time_limit="00:30:00")
    assert states[2] == TaskState(state="PENDING", job_id="10", node=None, exit_code="0:0")
    assert sorted(states) == [1, 2, 4, 8, 12, 20] and states[20].node is None and states[20].job_id == "13"
    assert sorted(parse_scontrol("JobId=1 ArrayJobId=7 ArrayTaskId=0-5:0 JobState=PENDING", "7")) == list(range(6))
    assert sorted(parse_scontrol("JobId=1 ArrayJobId=7 ArrayTaskId=4%2%1 JobState=PENDING", "7")) == [4]
    many = parse_scontrol("JobId=1 ArrayJobId=7 ArrayTaskId=3-99999999 JobState=PENDING", "7")
    assert (len(many), min(many), max(many)) == (100_001, 3, 100_003)  # a range is bounded


def test_the_controller_is_asked_once_and_any_failure_is_no_answer() -> None:
    run = _scontrol("JobId=9 ArrayJobId=7 ArrayTaskId=1 JobState=RUNNING\n")
    assert scheduler_states("7", run) == {1: TaskState(state="RUNNING", job_id="9")}
    assert run.asked == [["scontrol", "show", "job", "-o", "7"]]
    assert scheduler_states("7", _scontrol("JobId=9 ArrayJobId=7 ArrayTaskId=1 JobState=RUNNING\n", 1)) == {}
    for error in (OSError("no scontrol"), subprocess.TimeoutExpired(["scontrol"], 60)):
        def failing(_argv: list[str], error: BaseException = error) -> subprocess.CompletedProcess[str]:
            raise error
        assert scheduler_states("7", failing) == {}
    late = "x" * MAX_SCHEDULER_BYTES + "\nJobId=9 ArrayJobId=7 ArrayTaskId=1 JobState=RUNNING\n"
    assert scheduler_states("7", _scontrol(late)) == {}  # read up to its bound only


def test_slurmstepds_last_line_says_how_it_ended_the_task() -> None:
    text = ("slurmstepd: error: *** JOB 40 ON n0 CANCELLED AT 2026-12-01T13:00:00 ***\n"
            "slurmstepd: error: *** JOB 44 ON n1 CANCELLED AT 2026-12-01T14:00:42 DUE TO TIME LIMIT ***\n")
    assert state_from_output(text) == TaskState(state="TIMEOUT", job_id="44", node="n1", source="slurmstepd")
    odd = "*** JOB 45 ON n2 CANCELLED AT 2026-12-01T14:00:42 DUE TO SOMETHING ELSE ***"
    assert state_from_output(odd) == TaskState(state="CANCELLED", job_id="45", node="n2", source="slurmstepd")


# ---------------------------------------------------------------------------------------------- the tasks


def test_a_task_still_running_is_a_waiting_line_and_no_record(tmp_path: Path) -> None:
    directory = _sub(tmp_path, started=STARTED)
    got = collect(directory, _scontrol("JobId=81 ArrayJobId=77 ArrayTaskId=0 JobState=RUNNING NodeList=gpu7\n"))
    assert (got.records, got.waiting, got.tasks) == ([], [f"h200-h200 task 0 (cell {CELL}): RUNNING"], 1)


def test_a_task_never_submitted_is_said_so(tmp_path: Path) -> None:
    got = collect(_sub(tmp_path, job_id=None), NONE)
    assert (got.records, got.waiting) == ([], [f"h200-h200 task 0 (cell {CELL}): not submitted"])


def test_a_timed_out_task_records_its_smokes_with_the_pools_host_and_its_slurm_facts(tmp_path: Path) -> None:
    directory = _sub(tmp_path, started=STARTED, slurm_out="loading torch\n")
    got = collect(directory, _scontrol("JobId=81 ArrayJobId=77 ArrayTaskId=0 JobState=TIMEOUT NodeList=gpu7 "
                                       "ExitCode=0:15 TimeLimit=00:30:00\n"))
    assert [(r.smoke, r.status, r.failure_class) for r in got.records] == [
        ("import", "fail", "slurm-timeout"), ("gemm", "fail", "slurm-timeout")]
    rec = got.records[0]
    assert rec.reason == ("Slurm task 77_0 (job 81) on gpu7 ended TIMEOUT at its time limit (30 min) before this "
                          "smoke had a result")  # no last output: the time limit is the whole story
    assert (rec.run_id, rec.started_at, rec.image_digest, rec.cell_id, rec.stack) == (
        "slurm-77_0", "2026-12-04T01:00:00+00:00", DIGEST, CELL, "h200")
    assert rec.log_path == str(directory / "h200-h200" / "0" / "slurm.out")
    assert (rec.host.hostname, rec.host.gpu_name, rec.host.gpu_count, rec.host.driver, rec.host.capability) == (
        "gpu7", "NVIDIA H200", 2, "580.1", "9.0")
    assert rec.environment == {"slurm": {
        "array_job_id": "77", "array_task_id": 0, "job_id": "81", "node": "gpu7", "pool": "h200",
        "array": "h200-h200", "state": "TIMEOUT", "exit_code": "0:15", "host": "declared by the pool"}}


def test_slurmstepds_line_names_the_end_and_node_when_the_controller_forgot_the_task(tmp_path: Path) -> None:
    out = "step 1\n*** JOB 90 ON gpu3 CANCELLED AT 2026-12-04T02:00:00 ***\n  \n"
    got = collect(_sub(tmp_path, slurm_out=out, finished="143\n"), NONE)
    rec = got.records[0]
    assert (rec.failure_class, rec.host.hostname) == ("slurm-cancelled", "gpu3")
    assert rec.reason == ("Slurm task 77_0 (job 90) on gpu3 ended CANCELLED with exit status 143 before this smoke "
                          "had a result; last output: *** JOB 90 ON gpu3 CANCELLED AT 2026-12-04T02:00:00 ***")
    assert rec.environment["slurm"]["exit_code"] == 143 and rec.environment["slurm"]["state"] == "CANCELLED"


@pytest.mark.parametrize(("finished", "cls", "how"), [
    ("1\n", "slurm-task-failed", "ended FAILED with exit status 1 before this smoke had a result"),
    ("0\n", "slurm-no-result", "ended COMPLETED with exit status 0 before this smoke had a result"),
    ("1234\n", "slurm-lost", "no result, and the scheduler no longer knows the task"),
    ("ok\n", "slurm-lost", "no result, and the scheduler no longer knows the task"),
])
def test_the_tasks_own_exit_status_without_the_controller(tmp_path: Path, finished: str, cls: str, how: str) -> None:
    got = collect(_sub(tmp_path, finished=finished, slurm_out="x" * 300 + "\n"), NONE)
    rec = got.records[0]
    assert (rec.status, rec.failure_class) == ("fail", cls)
    assert rec.reason == f"Slurm task 77_0 {how}; last output: {'x' * 200}"
    assert rec.host.hostname == "unknown" and rec.environment["slurm"]["node"] is None


def test_kept_records_are_the_tasks_and_the_missing_smoke_shares_their_host(tmp_path: Path) -> None:
    directory = _sub(tmp_path, started=STARTED, finished="0\n", results_json=json.dumps([_row("import")]))
    got = collect(directory, NONE)
    kept, missing = got.records
    assert (kept.smoke, kept.status, kept.run_id, kept.host.hostname, kept.host.gpu_name) == (
        "import", "pass", "slurm-77_0", "gpu7", "H200")
    assert kept.environment["python"] == "3.12" and kept.environment["slurm"]["state"] == "COMPLETED"
    assert kept.environment["slurm"]["exit_code"] == 0 and kept.environment["slurm"]["job_id"] == "81"
    assert (missing.smoke, missing.failure_class, missing.host.gpu_name, missing.host.hostname) == (
        "gemm", "slurm-no-result", "H200", "gpu7")
    assert missing.environment["slurm"]["host"] == "measured"


def test_a_task_with_every_smoke_recorded_adds_nothing(tmp_path: Path) -> None:
    rows = [_row("import"), _row("gemm", "fail")]
    got = collect(_sub(tmp_path, finished="0\n", results_json=json.dumps(rows)), NONE)
    assert sorted((r.smoke, r.status, r.run_id, r.host.hostname) for r in got.records) == [
        ("gemm", "fail", "slurm-77_0", "inside"), ("import", "pass", "slurm-77_0", "inside")]


def test_the_tasks_store_when_it_wrote_no_json(tmp_path: Path) -> None:
    directory = _sub(tmp_path, finished="0\n")
    ResultsStore(directory / "h200-h200" / "0" / "results.sqlite").record(SmokeRecord.from_dict(_row("import")))
    got = collect(directory, NONE)
    assert [(r.smoke, r.status) for r in got.records] == [("import", "pass"), ("gemm", "fail")]


def test_results_that_are_not_a_list_and_a_missing_manifest_are_one_line(tmp_path: Path) -> None:
    directory = _sub(tmp_path, results_json='{"smoke": "import"}')
    with pytest.raises(PinmatrixError) as err:
        collect(directory, NONE)
    assert str(err.value) == (f"{directory / 'h200-h200' / '0' / 'results.json'}: not the results "
                              "`pinmatrix smoke --json` writes: not a JSON list")
    with pytest.raises(PinmatrixError) as err:
        read_submission(tmp_path / "nothing")
    assert str(err.value) == f"{tmp_path / 'nothing'}: no submission.json (not a `pinmatrix ci slurm` submission)"


def test_an_empty_refused_file_is_no_refusal(tmp_path: Path) -> None:
    got = collect(_sub(tmp_path, finished="1\n", refused=""), NONE)
    assert {r.failure_class for r in got.records} == {"slurm-task-failed"}


# --------------------------------------------------------------------------------------------------- --wait


def test_wait_says_each_new_line_and_returns_once_nothing_is_active(tmp_path: Path) -> None:
    directory = _sub(tmp_path)
    answers = ["JobId=81 ArrayJobId=77 ArrayTaskId=0-7 JobState=PENDING\n"] * 2 + [
        "JobId=81 ArrayJobId=77 ArrayTaskId=0 JobState=RUNNING\n",
        "JobId=81 ArrayJobId=77 ArrayTaskId=0 JobState=COMPLETED\n"]

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0, answers.pop(0), "")

    lines: list[str] = []
    wait(directory, timeout_s=60, poll_s=0, run=run, echo=lines.append)
    assert lines == ["waiting for 8 task(s): " + ", ".join(f"h200-h200[{i}] PENDING" for i in range(6)) + " ...",
                     "waiting for 1 task(s): h200-h200[0] RUNNING"]
    assert answers == []


def test_wait_gives_up_at_its_deadline_in_one_line(tmp_path: Path) -> None:
    lines: list[str] = []
    with pytest.raises(PinmatrixError) as err:
        wait(_sub(tmp_path), timeout_s=0, poll_s=0, echo=lines.append,
             run=_scontrol("JobId=81 ArrayJobId=77 ArrayTaskId=0-5 JobState=RUNNING\n"))
    assert str(err.value) == "ci slurm-collect: 6 task(s) still pending or running after 0 s (collect again later)"
    assert lines == ["waiting for 6 task(s): " + ", ".join(f"h200-h200[{i}] RUNNING" for i in range(6))]
    wait(_sub(tmp_path / "unsubmitted", job_id=None), timeout_s=0, run=NONE, echo=lines.append)
    assert len(lines) == 1


# ------------------------------------------------------------------------------------- the task's own files

STEPD = "*** JOB 90 ON gpu3 CANCELLED AT 2026-12-04T02:00:00 ***\n"


def _task(directory: Path) -> Path:
    return directory / "h200-h200" / "0"


def _one(directory: Path, run: Any = NONE) -> SmokeRecord:
    return collect(directory, run).records[0]


def test_scontrol_itself_is_asked_for_its_text(tmp_path: Path) -> None:
    done = _run([sys.executable, "-c", "print('JobId=1 ArrayJobId=7')"])
    assert (done.returncode, done.stdout) == (0, "JobId=1 ArrayJobId=7\n")


def test_the_started_finished_and_refused_files_are_read_within_their_bounds(tmp_path: Path) -> None:
    started = "job=81 array=99 task=0 node=gpu7 started=2026-12-04T01:00:00+00:00"
    directory = _sub(tmp_path, started=started.rjust(4096), finished="1".ljust(32), refused="r" * 600)
    rec = _one(directory)
    assert (rec.run_id, rec.host.hostname, rec.failure_class) == ("slurm-99_0", "gpu7", "sandbox-unavailable")
    assert rec.reason == f"Slurm task 99_0 (job 81) on gpu7 could not start the sandbox: {'r' * 500}"
    assert rec.environment["slurm"]["exit_code"] == 1
    over = _sub(tmp_path / "over", started=started.rjust(4097), finished="0".ljust(33), refused="r".ljust(4097))
    rec = _one(over)  # each file one byte over its bound: not read
    assert (rec.run_id, rec.host.hostname, rec.failure_class) == ("slurm-77_0", "unknown", "slurm-lost")


def test_the_output_is_read_from_its_end(tmp_path: Path) -> None:
    filler = ("." * 99 + "\n") * 10_486  # 1,048,600 bytes: just more than the 1 MiB searched for slurmstepd's line
    rec = _one(_sub(tmp_path, slurm_out=filler + STEPD))
    assert (rec.failure_class, rec.host.hostname) == ("slurm-cancelled", "gpu3")
    assert rec.reason.endswith(f"; last output: {STEPD.strip()}")
    rec = _one(_sub(tmp_path / "early", finished="1\n", slurm_out=STEPD + filler + "the end\n"))
    assert rec.failure_class == "slurm-task-failed" and rec.reason.endswith("; last output: the end")
    one_line = "a" * 4464 + "b" + "c" * 65535 + "\n"  # the last 64 KiB (65536 bytes) hold only c's
    rec = _one(_sub(tmp_path / "long", finished="1\n", slurm_out=one_line))
    assert rec.reason.endswith("; last output: " + "c" * 200)


@pytest.mark.parametrize("out", [None, "\n  \n", "fifo"])
def test_no_output_line_is_no_last_output(tmp_path: Path, out: str | None) -> None:
    directory = _sub(tmp_path, finished="1\n")
    if out == "fifo":
        os.mkfifo(_task(directory) / "slurm.out")
    elif out is not None:
        (_task(directory) / "slurm.out").write_text(out)
    assert _one(directory).reason == "Slurm task 77_0 ended FAILED with exit status 1 before this smoke had a result"


def test_bytes_that_are_not_utf8_are_replaced(tmp_path: Path) -> None:
    directory = _sub(tmp_path, finished="1\n")
    (_task(directory) / "slurm.out").write_bytes(b"bad \xff byte\n")
    assert _one(directory).reason.endswith("; last output: bad \ufffd byte")


def test_the_node_comes_from_started_then_the_controller_then_slurmstepd(tmp_path: Path) -> None:
    controller = _scontrol("JobId=81 ArrayJobId=77 ArrayTaskId=0 JobState=CANCELLED NodeList=gpu7\n")
    assert _one(_sub(tmp_path, slurm_out=STEPD), controller).host.hostname == "gpu7"
    unnamed = _scontrol("JobId=81 ArrayJobId=77 ArrayTaskId=0 JobState=CANCELLED NodeList=(null)\n")
    assert _one(_sub(tmp_path / "b", slurm_out=STEPD), unnamed).host.hostname == "gpu3"


def test_an_unsubmitted_array_whose_task_ran_is_array_job_unknown(tmp_path: Path) -> None:
    rec = _one(_sub(tmp_path, job_id=None, slurm_out=STEPD))
    assert (rec.run_id, rec.failure_class) == ("slurm-?_0", "slurm-cancelled")


@pytest.mark.parametrize(("state", "cls", "how"), [
    ("DEADLINE", "slurm-timeout", "ended DEADLINE at its time limit (30 min)"),
    ("REVOKED", "slurm-task-failed", "ended REVOKED"),
])
def test_every_end_the_controller_names_has_a_class(tmp_path: Path, state: str, cls: str, how: str) -> None:
    rec = _one(_sub(tmp_path), _scontrol(f"JobId=81 ArrayJobId=77 ArrayTaskId=0 JobState={state} NodeList=n1\n"))
    assert (rec.failure_class, rec.reason) == (
        cls, f"Slurm task 77_0 (job 81) on n1 {how} before this smoke had a result")


def test_a_smoke_without_a_result_is_a_failure_of_no_time_and_no_metrics(tmp_path: Path) -> None:
    rec = _one(_sub(tmp_path, gpu_product=None, finished="1\n"))
    assert (rec.metrics, rec.duration_s, rec.known_issue, rec.host.gpu_count, rec.host.gpu_name) == ({}, 0.0, None,
                                                                                                     0, None)
    assert rec.finished_at.endswith("+00:00") and rec.started_at.endswith("+00:00")


def test_a_store_behind_a_link_is_not_read_and_a_broken_store_is_one_line(tmp_path: Path) -> None:
    directory = _sub(tmp_path, finished="0\n")
    elsewhere = tmp_path / "elsewhere.sqlite"
    ResultsStore(elsewhere).record(SmokeRecord.from_dict(_row("import")))
    (_task(directory) / "results.sqlite").symlink_to(elsewhere)
    assert {r.status for r in collect(directory, NONE).records} == {"fail"}
    broken = _sub(tmp_path / "broken", finished="0\n")
    store = _task(broken) / "results.sqlite"
    store.write_bytes(b"not a database" * 100)
    with pytest.raises(PinmatrixError) as err:
        collect(broken, NONE)
    assert str(err.value).startswith(f"{store}: ")


def test_a_large_submission_is_read_and_a_malformed_one_names_its_file(tmp_path: Path) -> None:
    directory = _sub(tmp_path)
    manifest = directory / "submission.json"
    manifest.write_text(manifest.read_text() + " " * (2 << 20))  # 2 MiB: more than a default document
    assert read_submission(directory).id == "s1"
    manifest.write_text(manifest.read_text().replace('"s1"', '"x;id"'))
    with pytest.raises(PinmatrixError) as err:
        read_submission(directory)
    assert str(err.value).startswith(f"{manifest}: id: ")
    os.unlink(manifest)
    manifest.symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "elsewhere.json").write_text("{}")
    with pytest.raises(PinmatrixError, match=r"submission\.json: cannot read: a symbolic link$"):
        read_submission(directory)


def test_every_task_of_every_array_is_counted_and_an_unsubmitted_array_asks_no_one(tmp_path: Path) -> None:
    run = _scontrol("", 1)
    got = collect(_sub(tmp_path, arrays=2, tasks=2, finished="0\n"), run)
    assert got.tasks == 4 and len(run.asked) == 2
    run = _scontrol("", 1)
    assert collect(_sub(tmp_path / "none", job_id=None, tasks=3), run).tasks == 3 and run.asked == []


def test_wait_counts_the_active_tasks_of_every_array(tmp_path: Path) -> None:
    directory = _sub(tmp_path, arrays=2)
    answers = {"77": "JobId=81 ArrayJobId=77 ArrayTaskId=0-6 JobState=PENDING\n",
               "78": "JobId=82 ArrayJobId=78 ArrayTaskId=0 JobState=RUNNING\n"}
    lines: list[str] = []
    with pytest.raises(PinmatrixError, match="8 task"):
        wait(directory, timeout_s=0, poll_s=0, echo=lines.append,
             run=lambda argv: subprocess.CompletedProcess(argv, 0, answers[argv[-1]], ""))
    assert lines == ["waiting for 8 task(s): " + ", ".join(f"h200-h200[{i}] PENDING" for i in range(6)) + " ..."]
    lines.clear()
    seven = _sub(tmp_path / "seven", tasks=1)
    with pytest.raises(PinmatrixError):
        wait(seven, timeout_s=0, poll_s=0, echo=lines.append,
             run=_scontrol("JobId=81 ArrayJobId=77 ArrayTaskId=0-6 JobState=PENDING\n"))
    assert lines[0].endswith(" ...")
