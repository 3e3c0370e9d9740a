"""pinmatrix.ci.slurm_collect binds what a task wrote to what ``ci slurm`` gave it (the submission's task, also
written as dispatch.json): task 0 (cell A) holding PASS rows for cell D under a made-up digest credits nothing to
D, and A's smokes without a kept result are recorded as not run (never a pass), with one line saying what was
dropped and why; a FIFO or a link in place of a task's file is refused, never waited on."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from pinmatrix.ci.dispatch import read_dispatch
from pinmatrix.ci.slurm import SCHEMA, ArrayEntry, Submission, TaskEntry, slurm_dispatch, write_submission
from pinmatrix.ci.slurm_collect import collect
from pinmatrix.errors import PinmatrixError
from pinmatrix.results.store import HostFingerprint, SmokeRecord

CELL_A, CELL_D = "a" * 12, "d" * 12
DIGEST_A, FORGED = "sha256:" + "1" * 64, "sha256:" + "f" * 64


def _no_scheduler(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(argv, 1, "", "no slurm here")


def _row(cell: str, smoke: str, digest: str | None, status: str = "pass") -> dict[str, object]:
    return SmokeRecord(cell_id=cell, stack="h200", host=HostFingerprint.make(hostname="n1"), smoke=smoke, run_id="r",
                       status=status, failure_class=None, reason="", metrics={}, log_path=None,
                       started_at="2026-12-04T00:00:00+00:00", finished_at="2026-12-04T00:00:01+00:00",
                       duration_s=1.0, known_issue=None, image_digest=digest).to_dict()


def _submission(tmp_path: Path, smokes: tuple[str, ...] = ("import", "gemm")) -> Path:
    directory = tmp_path / "sub"
    task = TaskEntry(index=0, cell_id=CELL_A, stack="h200", pool="h200", smokes=smokes, gpus=1,
                     image=f"reg.example/app@{DIGEST_A}", image_digest=DIGEST_A)
    array = ArrayEntry(name="h200-h200", script=str(directory / "h200-h200.sbatch"),
                       directory=str(directory / "h200-h200"), job_id="77", time_limit_min=30, options=(),
                       tasks=(task,))
    sub = Submission.model_validate({"schema": SCHEMA, "id": "s1", "matrix": "/m.toml", "runtime": "podman",
                                     "arrays": (array,)})
    (directory / "h200-h200" / "0").mkdir(parents=True)
    (directory / "h200-h200" / "0" / "finished").write_text("0\n")
    write_submission(sub, directory)
    return directory


def test_rows_for_another_cell_under_a_made_up_digest_are_dropped_and_the_cells_smokes_not_run(tmp_path: Path) -> None:
    directory = _submission(tmp_path)
    rows = [_row(CELL_D, "import", FORGED), _row(CELL_D, "gemm", FORGED), _row(CELL_A, "import", DIGEST_A)]
    (directory / "h200-h200" / "0" / "results.json").write_text(json.dumps(rows))
    got = collect(directory, _no_scheduler)
    assert {r.cell_id for r in got.records} == {CELL_A}
    by_smoke = {r.smoke: r for r in got.records}
    assert by_smoke["import"].status == "pass" and by_smoke["import"].image_digest == DIGEST_A
    assert by_smoke["gemm"].status == "fail" and by_smoke["gemm"].failure_class == "slurm-no-result"
    assert got.dropped == [f"h200-h200 task 0 (cell {CELL_A}): dropped 2 record(s) not dispatched to it: "
                           f"2 naming cell {CELL_D}"]


def test_a_row_of_the_cell_under_another_digest_or_for_a_smoke_not_given_is_dropped(tmp_path: Path) -> None:
    directory = _submission(tmp_path, smokes=("import",))
    rows = [_row(CELL_A, "import", FORGED), _row(CELL_A, "extra", DIGEST_A)]
    (directory / "h200-h200" / "0" / "results.json").write_text(json.dumps(rows))
    got = collect(directory, _no_scheduler)
    assert [(r.smoke, r.status, r.failure_class) for r in got.records] == [("import", "fail", "slurm-no-result")]
    assert got.dropped == [f"h200-h200 task 0 (cell {CELL_A}): dropped 2 record(s) not dispatched to it: "
                           "1 for smoke extra, not given; "
                           f"1 naming image {FORGED}, not {DIGEST_A}"]


def test_a_task_with_only_its_own_rows_drops_nothing(tmp_path: Path) -> None:
    directory = _submission(tmp_path)
    rows = [_row(CELL_A, "import", DIGEST_A), _row(CELL_A, "gemm", DIGEST_A, "fail")]
    (directory / "h200-h200" / "0" / "results.json").write_text(json.dumps(rows))
    got = collect(directory, _no_scheduler)
    assert sorted((r.smoke, r.status) for r in got.records) == [("gemm", "fail"), ("import", "pass")]
    assert got.dropped == []


def test_the_dispatch_record_names_each_tasks_cell_digest_and_smokes(tmp_path: Path) -> None:
    from pinmatrix.ci.dispatch import write_dispatch
    from pinmatrix.ci.slurm_collect import read_submission

    directory = _submission(tmp_path)
    write_dispatch(slurm_dispatch(read_submission(directory)), directory / "dispatch.json")
    record = read_dispatch(directory / "dispatch.json")
    assert record.source == "slurm" and record.id == "s1"
    assert {k: v.model_dump() for k, v in record.jobs.items()} == {
        "h200-h200/0": {"cell_id": CELL_A, "image_digest": DIGEST_A, "smokes": ("import", "gemm")}}


@pytest.mark.parametrize("name", ["results.json", "slurm.out", "started", "finished"])
def test_a_fifo_in_place_of_a_tasks_file_is_never_waited_on(tmp_path: Path, name: str) -> None:
    directory = _submission(tmp_path)
    task = directory / "h200-h200" / "0"
    (task / name).unlink(missing_ok=True)
    os.mkfifo(task / name)
    done: list[object] = []

    def run() -> None:
        try:
            done.append(collect(directory, _no_scheduler))
        except PinmatrixError as err:
            done.append(err)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # unblock the reader so the test process can end
        os.close(os.open(task / name, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"collect waited on a FIFO {name}")
    (result,) = done
    if name == "results.json":
        assert isinstance(result, PinmatrixError)
        assert str(result) == f"{task / name}: not a regular file (a FIFO, device or folder is not read)"
    else:
        assert not isinstance(result, PinmatrixError)


def test_a_link_in_place_of_the_results_is_refused(tmp_path: Path) -> None:
    directory = _submission(tmp_path)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps([_row(CELL_A, "import", DIGEST_A)]))
    (directory / "h200-h200" / "0" / "results.json").symlink_to(elsewhere)
    with pytest.raises(PinmatrixError, match=r"results\.json: cannot read: a symbolic link$"):
        collect(directory, _no_scheduler)
