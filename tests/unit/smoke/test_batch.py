"""Batches (pinmatrix.smoke.batch and _smokelib.run_batch): consecutive smokes of one group share a process, and
no failure, crash, hang or asynchronous fault of one smoke changes another's result or log."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from pinmatrix.project.catalogue import load_catalogue
from pinmatrix.results.store import HostFingerprint, ResultsStore
from pinmatrix.smoke import batch as batch_module
from pinmatrix.smoke.cellrun import process_groups, run_cells
from pinmatrix.smoke.runner import HostCell, RunOptions

CPU = HostFingerprint.make(hostname="cpu", gpu_name=None, gpu_count=0, driver=None, capability=None)
H200 = HostFingerprint.make(hostname="h", gpu_name="H200", gpu_count=1, driver="580", capability="9.0")

# Each smoke reports its process id; what it does is chosen by $BATCH_PLAN ({smoke: action}).
MODULE = '''
import ctypes, json, os, signal, sys, time
from _smokelib import Context, Fail, main

SMOKES = {
    "one": {"func": "act", "batch": "g", "timeout_s": 30},
    "two": {"func": "act", "batch": "g", "timeout_s": 3},
    "three": {"func": "act", "batch": "g", "timeout_s": 30},
    "solo": {"func": "act", "timeout_s": 30},
    "other-group": {"func": "act", "batch": "h", "timeout_s": 30},
    "fp4": {"func": "act", "batch": "g", "needs": {"gpu": True, "native_fp4": True}},
}


class _FakeCuda:
    def is_initialized(self):
        return True

    def synchronize(self):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def empty_cache(self):
        pass


def act(ctx: Context) -> None:
    ctx.metric("pid", os.getpid())
    print(f"line of {ctx.name}", flush=True)
    ctypes.CDLL(None).printf(f"C line of {ctx.name}\\n".encode())  # buffered by C stdio, not Python
    action = json.loads(os.environ.get("BATCH_PLAN", "{}")).get(ctx.name, "pass")
    if action == "fail":
        raise Fail("told to fail", "wrong-result")
    if action == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if action == "hang":
        time.sleep(3600)
    if action == "async-fault":  # torch's device work faults only when synchronised
        sys.modules["torch"] = type("FakeTorch", (), {"cuda": _FakeCuda()})()
    if action == "exit":
        sys.exit(3)


if __name__ == "__main__":
    main(SMOKES, globals())
'''


@pytest.fixture()
def catalogue(tmp_path: Path) -> Path:
    d = tmp_path / "smoke"
    d.mkdir()
    (d / "acts.py").write_text(MODULE)
    return d


def run(tmp_path: Path, catalogue: Path, monkeypatch: pytest.MonkeyPatch, plan: dict[str, str] | None = None,
        smokes: tuple[str, ...] = ("one", "two", "three"), **kw: Any) -> dict[str, Any]:
    monkeypatch.setenv("BATCH_PLAN", json.dumps(plan or {}))
    store = ResultsStore(tmp_path / "r.sqlite")
    options = RunOptions(smoke_dir=catalogue, logs_dir=tmp_path / "logs", rerun=True, kill_grace_s=0.5, **kw)
    runs = run_cells([HostCell(smokes=smokes)], store, options, host=kw.pop("host", CPU), echo=lambda _l: None)
    return {r.smoke: r for r in runs[0].records}


def pid(record: Any) -> int:
    return int(record.metrics["pid"])


def test_consecutive_smokes_of_a_group_share_one_process_and_keep_their_own_logs(
        tmp_path: Path, catalogue: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recs = run(tmp_path, catalogue, monkeypatch)
    assert [r.status for r in recs.values()] == ["pass", "pass", "pass"]
    assert len({pid(r) for r in recs.values()}) == 1
    assert [r.environment["batch"]["position"] for r in recs.values()] == [1, 2, 3]
    for name, rec in recs.items():
        log = Path(rec.log_path).read_text()
        assert f"line of {name}" in log and f"C line of {name}" in log
        assert all(f"line of {other}\n" not in log for other in recs if other != name)


def test_without_batches_every_smoke_has_its_own_process(
        tmp_path: Path, catalogue: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recs = run(tmp_path, catalogue, monkeypatch, batch=False)
    assert len({pid(r) for r in recs.values()}) == 3
    assert all("batch" not in r.environment for r in recs.values())


def test_a_failure_ends_the_batch_and_the_rest_start_in_a_fresh_process(
        tmp_path: Path, catalogue: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recs = run(tmp_path, catalogue, monkeypatch, {"two": "fail"})
    assert [(r.status, r.failure_class) for r in recs.values()] == [
        ("pass", None), ("fail", "wrong-result"), ("pass", None)]
    assert pid(recs["one"]) == pid(recs["two"]) != pid(recs["three"])


@pytest.mark.parametrize("action", ["crash", "hang", "exit"])
def test_a_smoke_that_kills_its_batch_is_run_again_alone_and_the_others_keep_theirs(
        tmp_path: Path, catalogue: Path, monkeypatch: pytest.MonkeyPatch, action: str) -> None:
    recs = run(tmp_path, catalogue, monkeypatch, {"two": action})
    assert recs["one"].status == "pass" and recs["three"].status == "pass"
    two = recs["two"]
    assert "batch" not in two.environment  # its record is the alone run's
    expected = {"crash": ("fail", "crash"), "hang": ("fail", "timeout"), "exit": ("fail", "error")}[action]  # as alone
    assert (two.status, two.failure_class) == expected
    assert len({pid(recs["one"]), pid(recs["three"])}) == 2


def test_an_asynchronous_fault_is_the_result_of_the_smoke_that_caused_it(
        tmp_path: Path, catalogue: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recs = run(tmp_path, catalogue, monkeypatch, {"one": "async-fault"})
    assert recs["one"].status == "fail" and "after the smoke" in recs["one"].reason
    assert "illegal memory access" in recs["one"].reason
    assert recs["two"].status == recs["three"].status == "pass"
    assert pid(recs["two"]) != pid(recs["one"])


def test_groups_are_consecutive_runs_of_one_group_not_decided_by_the_host(catalogue: Path) -> None:
    by_name = {s.name: s for s in load_catalogue(catalogue)}

    def names(order: list[str], host: HostFingerprint = CPU, batch: bool = True) -> list[list[str]]:
        return [[s.name for s in g] for g in process_groups([by_name[n] for n in order], host, batch=batch)]

    assert names(["one", "two", "three"]) == [["one", "two", "three"]]
    assert names(["one", "solo", "two"]) == [["one"], ["solo"], ["two"]]
    assert names(["one", "other-group", "two"]) == [["one"], ["other-group"], ["two"]]
    assert names(["one", "two"], batch=False) == [["one"], ["two"]]
    # a smoke the host's GPU decides (no native FP4 on sm_90) never starts, so it is never in a batch
    assert names(["one", "fp4", "two"], H200) == [["one"], ["fp4"], ["two"]]
    assert names(["one", "fp4", "two"]) == [["one", "fp4", "two"]]  # no GPU seen: the smoke's own check decides


def test_a_batched_smokes_log_is_capped_like_any_other(tmp_path: Path, catalogue: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (catalogue / "acts.py").write_text(MODULE.replace('print(f"line of {ctx.name}", flush=True)',
                                                      'print(f"line of {ctx.name}" + "x" * 200_000, flush=True)'))
    recs = run(tmp_path, catalogue, monkeypatch, log_cap=20_000)
    assert len({pid(r) for r in recs.values()}) == 1
    for rec in recs.values():
        text = Path(rec.log_path).read_text()
        assert len(text) < 25_000 and "log capped at 20000 bytes" in text and rec.status == "pass"


def test_a_result_file_of_another_smoke_is_not_taken(tmp_path: Path, catalogue: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch's results are read by name: a file that says it is another smoke's ends what the batch gave."""
    real = batch_module.read_result_file

    def swapped(path: Path) -> dict[str, Any] | None:
        found = real(path)
        if found is not None and found.get("smoke") == "two":
            found["smoke"] = "three"
        return found

    monkeypatch.setattr(batch_module, "read_result_file", swapped)
    recs = run(tmp_path, catalogue, monkeypatch)
    assert "batch" in recs["one"].environment and "batch" not in recs["two"].environment


def test_durations_are_the_smokes_own_within_the_process() -> None:
    assert batch_module._seconds(1.5, 10.0) == 1.5
    assert batch_module._seconds(99.0, 10.0) == 10.0
    assert batch_module._seconds(-1, 10.0) == 0.0
    assert batch_module._seconds(float("nan"), 10.0) == 10.0
    assert batch_module._seconds("2", 10.0) == 10.0
    assert batch_module._seconds(True, 10.0) == 10.0


def test_the_names_match_the_in_cell_runtime() -> None:
    from pinmatrix.shipped import _smokelib

    assert (_smokelib.BATCH_ENV, _smokelib.BATCH_ARG) == (batch_module.BATCH_ENV, batch_module.BATCH_ARG)


def test_a_batch_spec_naming_a_path_is_refused(tmp_path: Path) -> None:
    from pinmatrix.shipped import _smokelib

    good = {"module": "acts.py", "name": "one", "result": ".one.result.json", "log": "one.log", "timeout_s": 5}
    assert _smokelib._batch_entries(json.dumps({"smokes": [good]})) == [good]
    for bad in ({**good, "log": "../x.log"}, {**good, "result": "/tmp/r"}, {**good, "module": ".."},
                {**good, "timeout_s": "5"}, {**good, "name": 3}):
        with pytest.raises(ValueError):
            _smokelib._batch_entries(json.dumps({"smokes": [bad]}))
    for raw in (None, "", json.dumps({"smokes": []}), "x" * (_smokelib.MAX_BATCH_SPEC + 1)):
        with pytest.raises(ValueError):
            _smokelib._batch_entries(raw)
    assert os.sep == "/"
