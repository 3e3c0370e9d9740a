"""`ci k8s` writes a dispatch record (per Job's results folder: cell, image digest, smokes) and `ci collect
--dispatch` keeps only what each Job was given: a pod folder holding rows of another cell or another digest is
dropped with one line, a folder no Job writes to is dropped whole, and each (cell, smoke) a Job was given
without a kept record is said as not run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pinmatrix.ci.dispatch import DispatchJob, dispatch, read_dispatch, write_dispatch
from pinmatrix.ci.k8s import collect_dispatched, k8s_manifests, load_pools
from pinmatrix.cli import main
from pinmatrix.matrix.selection import load

ROOT = Path(__file__).resolve().parents[3]
POOLS = """
[[pool]]
name = "h200"
gpu_product = "NVIDIA-H200"
driver = "580.159.04"
capability = "9.0"
"""


@pytest.fixture(scope="module")
def cell():  # noqa: ANN201
    return next(c for c in load(ROOT / "matrix.toml")[1].cells if c.stack == "h200")


def _pod(folder: Path, cell_id: str, digest: str, smokes: list[str]) -> Path:
    """A pod runner's output folder: run.json and one passing result per smoke."""
    folder.mkdir(parents=True)
    entries = []
    for smoke in smokes:
        (folder / f"{smoke}.json").write_text(json.dumps({"status": "pass", "reason": "", "metrics": {}}))
        (folder / f"{smoke}.log").write_text("ok\n")
        entries.append({"smoke": smoke, "log": f"{smoke}.log", "result": f"{smoke}.json", "returncode": 0,
                        "timed_out": False, "timeout_s": 60, "started_at": "2026-12-04T00:00:00+00:00",
                        "finished_at": "2026-12-04T00:00:01+00:00", "seconds": 1.0})
    run = {"schema": "pinmatrix-pod-run/1", "cell_id": cell_id, "image_digest": digest, "host": {},
           "started_at": "2026-12-04T00:00:00+00:00", "smokes": entries}
    (folder / "run.json").write_text(json.dumps(run))
    return folder


def test_the_manifests_dispatch_names_each_jobs_folder_cell_digest_and_smokes(cell, tmp_path: Path) -> None:  # noqa: ANN001
    (tmp_path / "pools.toml").write_text(POOLS)
    image = "reg.example/app@sha256:" + "1" * 64
    emitted = k8s_manifests([cell], load_pools(tmp_path / "pools.toml"), {cell.id: image},
                            smoke_dir=ROOT / "smoke", run_id="r1")
    (job,) = emitted.dispatched.values()
    assert list(emitted.dispatched) == [f"r1/{cell.id}-h200"]
    assert job.cell_id == cell.id and job.image_digest == "sha256:" + "1" * 64
    command = emitted.jobs[0]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert [spec.split(":")[1] for spec in command if spec.count(":") == 2] == list(job.smokes)


def test_rows_of_another_cell_or_digest_are_dropped_and_the_jobs_smokes_not_run(cell, tmp_path: Path) -> None:  # noqa: ANN001
    digest = "sha256:" + "1" * 64
    other = next(c for c in load(ROOT / "matrix.toml")[1].cells if c.id != cell.id)
    record = dispatch("k8s", "r1", {f"r1/{cell.id}-h200": DispatchJob(cell_id=cell.id, image_digest=digest,
                                                                        smokes=("host-probe", "python-imports"))})
    mine = _pod(tmp_path / "r1" / f"{cell.id}-h200", other.id, "sha256:" + "f" * 64, ["host-probe"])
    stray = _pod(tmp_path / "r1" / "elsewhere", cell.id, digest, ["host-probe"])
    cells = {cell.id: cell, other.id: other}
    bound = collect_dispatched([mine, stray], cells, record)
    assert bound.kept == []
    assert bound.dropped == (f"r1/{cell.id}-h200 (cell {cell.id}): dropped 1 record(s) not dispatched to it: "
                             f"1 naming cell {other.id}; {stray}: no Job of dispatch r1 writes here: dropped 1 "
                             "record(s)")
    assert bound.not_run == [(cell.id, "host-probe"), (cell.id, "python-imports")]


def test_collect_with_the_dispatch_record_through_the_cli(cell, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    digest = "sha256:" + "1" * 64
    path = tmp_path / "jobs.yaml.dispatch.json"
    write_dispatch(dispatch("k8s", "r1", {f"r1/{cell.id}-h200": DispatchJob(
        cell_id=cell.id, image_digest=digest, smokes=("host-probe", "python-imports"))}), path)
    assert read_dispatch(path).jobs[f"r1/{cell.id}-h200"].smokes == ("host-probe", "python-imports")
    _pod(tmp_path / "pvc" / "r1" / f"{cell.id}-h200", cell.id, digest, ["host-probe"])
    rc = main(["ci", "collect", str(tmp_path / "pvc"), "--matrix", str(ROOT / "matrix.toml"), "--dispatch", str(path),
               "--json", str(tmp_path / "rows.json")])
    out, err = capsys.readouterr()
    assert rc == 0 and "collected 1 result(s)" in out
    assert f"not run: cell {cell.id}: 1 smoke(s): python-imports" in err.splitlines()
    assert [r["smoke"] for r in json.loads((tmp_path / "rows.json").read_text())] == ["host-probe"]


def test_a_pods_files_are_read_in_its_folder_only_never_through_a_link_or_a_fifo(cell, tmp_path: Path) -> None:  # noqa: ANN001
    import os
    import threading

    from pinmatrix.ci.k8s import collect
    from pinmatrix.errors import PinmatrixError

    digest = "sha256:" + "1" * 64
    pod = _pod(tmp_path / "r1" / "p", cell.id, digest, ["host-probe"])
    run = json.loads((pod / "run.json").read_text())
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"status": "pass", "reason": "", "metrics": {"from": "outside"}}))
    (pod / "host-probe.json").unlink()
    (pod / "host-probe.json").symlink_to(outside)  # a link to a passing result elsewhere is not followed
    (pod / "run.json").write_text(json.dumps(run))
    (record,) = collect(pod, {cell.id: cell})
    assert record.status != "pass" and "from" not in record.metrics
    run["smokes"][0]["result"] = "../../outside.json"  # a name that leaves the folder is not read either
    (pod / "run.json").write_text(json.dumps(run))
    (record,) = collect(pod, {cell.id: cell})
    assert record.status != "pass" and "from" not in record.metrics

    (pod / "run.json").unlink()
    os.mkfifo(pod / "run.json")
    got: list[object] = []

    def read() -> None:
        try:
            got.append(collect(pod, {cell.id: cell}))
        except PinmatrixError as err:
            got.append(err)

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():
        os.close(os.open(pod / "run.json", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("collect waited on a FIFO run.json")
    assert [str(g) for g in got] == [f"{pod / 'run.json'}: not a regular file (a FIFO, device or folder is not read)"]
