"""The results store: round trips, filters, latest-only, two concurrent writers, and SIGKILL mid-write."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing as mp
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from store_data import HOST, rec

from pinmatrix.cli import main
from pinmatrix.results.store import HostFingerprint, ResultsStore
from pinmatrix.results.storefile import ResultsError

CPU = HostFingerprint.make(hostname="ci")




def test_host_fingerprint_id_is_content_hash() -> None:
    again = HostFingerprint.make(hostname="other-name", gpu_name="NVIDIA H200", gpu_count=1, driver="580.159.04",
                                 capability="9.0")
    assert HOST.id == again.id and len(HOST.id) == 12
    assert HostFingerprint.make(gpu_name="NVIDIA H200", gpu_count=2, driver="580.159.04", capability="9.0").id != HOST.id
    assert CPU.is_cpu_only and CPU.gpu_count == 0 and "cpu-only" in CPU.label()


def test_round_trip_filters_and_latest(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "r.sqlite")
    store.record(rec("torch-gemm", run="r1", status="fail", failure_class="wrong-result", reason="bad"))
    store.record(rec("torch-gemm", run="r2", status="pass"))
    store.record(rec("triton-jit", run="r1", status="skip", reason="no GPU", host=CPU))
    store.record(rec("torch-gemm", cell="bbbbbbbbbbbb", run="r1", status="xfail", known_issue="k1"))
    assert len(store.query()) == 4
    got = store.query(cell_id="aaaaaaaaaaaa", smoke="torch-gemm")
    assert [r.status for r in got] == ["fail", "pass"]
    assert got[0] == rec("torch-gemm", run="r1", status="fail", failure_class="wrong-result", reason="bad")
    latest = store.query(latest_only=True)
    assert sorted((r.cell_id, r.smoke, r.status) for r in latest) == [
        ("aaaaaaaaaaaa", "torch-gemm", "pass"), ("aaaaaaaaaaaa", "triton-jit", "skip"),
        ("bbbbbbbbbbbb", "torch-gemm", "xfail")]
    assert store.query(latest_only=True, status="fail") == []
    assert [r.smoke for r in store.query(host_id=CPU.id)] == ["triton-jit"]
    assert store.has_result("aaaaaaaaaaaa", HOST.id, "torch-gemm")
    assert not store.has_result("aaaaaaaaaaaa", CPU.id, "torch-gemm")
    # The same cell x host x smoke x run replaces, it does not duplicate.
    store.record(rec("torch-gemm", run="r2", status="degraded", failure_class="slow-path"))
    assert [r.status for r in store.query(cell_id="aaaaaaaaaaaa", smoke="torch-gemm")] == ["fail", "degraded"]


def test_export_import_round_trip(tmp_path: Path) -> None:
    a = ResultsStore(tmp_path / "a.sqlite")
    a.record(rec(environment={"driver": "580.159.04", "versions": {"torch": "2.11.0"}}, image_digest="sha256:" + "0" * 64))
    a.record(rec("flashinfer-nvfp4-gemm", status="skip", reason="NVFP4 unsupported on sm_90"))
    rows = json.loads(json.dumps([r.to_dict() for r in a.query()]))
    b = ResultsStore(tmp_path / "b.sqlite")
    assert b.import_json(rows) == 2
    assert b.query() == a.query()
    with pytest.raises(ResultsError):
        b.import_json([{"cell_id": "x"}])
    with pytest.raises(ResultsError):
        rec(status="passed")


def test_results_cli_json_and_bad_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.sqlite"
    ResultsStore(db).record(rec())
    assert main(["results", "--results", str(db), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["smoke"] == "torch-gemm" and rows[0]["host"]["gpu_name"] == "NVIDIA H200"
    assert main(["results", "--results", str(db)]) == 0
    assert "torch-gemm" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text('[{"cell_id": "x"}]')
    assert main(["results", "--results", str(db), "--import", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pinmatrix: error:") and "bad.json" in err[0]
    good = tmp_path / "good.json"
    good.write_text(json.dumps([rec(run="r9").to_dict()]))
    assert main(["results", "--results", str(db), "--import", str(good)]) == 0
    assert len(ResultsStore(db).query()) == 2


def _writer(path: str, tag: str, n: int) -> None:
    store = ResultsStore(Path(path))
    for i in range(n):
        store.record(rec(f"smoke-{i}", run=tag))


def test_two_concurrent_writers(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(db), tag, 150)) for tag in ("w1", "w2")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    store = ResultsStore(db)
    assert len(store.query(run_id="w1")) == 150 and len(store.query(run_id="w2")) == 150
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


KILLED_WRITER = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from store_data import rec
from pinmatrix.results.store import ResultsStore
store = ResultsStore(Path({db!r}))
i = 0
while True:
    store.record(rec(f"smoke-{{i}}", run="killed", reason="x" * 2000))
    print(i, flush=True)
    i += 1
"""


def test_sigkill_mid_run_keeps_every_committed_record(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    code = KILLED_WRITER.format(tests=str(Path(__file__).resolve().parents[2] / "support"), db=str(db))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    acked = -1
    deadline = time.monotonic() + 60
    while acked < 200 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line:
            acked = int(line)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    assert acked >= 200
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = ResultsStore(db)
    smokes = {r.smoke for r in store.query(run_id="killed")}
    # Everything the writer was told is committed is there; at most the one in flight is extra.
    assert {f"smoke-{i}" for i in range(acked + 1)} <= smokes
    assert len(smokes) <= acked + 2
    store.record(dataclasses.replace(rec(), run_id="after"))
    assert store.has_result("aaaaaaaaaaaa", HOST.id, "torch-gemm")


# ------------------------------------------------------------ the store's own checks, word for word


def test_check_names_each_way_a_file_is_not_a_store_of_this_pinmatrix(tmp_path: Path) -> None:
    missing = tmp_path / "none.sqlite"
    gone = ResultsStore(missing)  # made when opened ...
    missing.unlink()  # ... and removed under it
    with pytest.raises(ResultsError) as err:
        gone.check()
    assert str(err.value) == f"{missing}: no results store"

    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE hosts (id TEXT)")
    with pytest.raises(ResultsError) as err:
        ResultsStore(foreign).check()
    assert str(err.value) == (f"{foreign}: an SQLite database, but not a pinmatrix results store (no meta, results "
                              "table); left as it is")

    versionless = tmp_path / "versionless.sqlite"
    with sqlite3.connect(versionless) as conn:
        for table in ("meta (key TEXT, value TEXT)", "hosts (id TEXT)", "results (seq INTEGER)"):
            conn.execute(f"CREATE TABLE {table}")
    with pytest.raises(ResultsError) as err:
        ResultsStore(versionless).check()
    assert str(err.value) == (f"{versionless}: an SQLite database, but not a pinmatrix results store "
                              "(no schema_version); left as it is")

    for version in ("99", "two"):
        newer = tmp_path / f"newer-{version}.sqlite"
        store = ResultsStore(newer)
        store.record(rec())
        with sqlite3.connect(newer) as conn:
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (version,))
        with pytest.raises(ResultsError) as err:
            ResultsStore(newer).check()
        assert str(err.value) == (f"{newer}: results store schema {version!r} is newer than this pinmatrix knows "
                                  "(1); left as it is")
        with pytest.raises(ResultsError):  # and nothing is written to it
            ResultsStore(newer).record(rec(run="r2"))
        assert len(ResultsStore(newer).query()) == 1

    good = tmp_path / "good.sqlite"
    ResultsStore(good).record(rec())
    ResultsStore(good).check()  # a store of this pinmatrix passes


def test_a_store_written_before_probe_parameters_is_read_and_then_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    store = ResultsStore(path)
    store.record(rec(run="r1"))
    with sqlite3.connect(path) as conn:  # the store as pinmatrix wrote it before bisect: no params column
        conn.execute("ALTER TABLE results DROP COLUMN params")
    old = ResultsStore(path)
    assert [(r.run_id, r.params) for r in old.query()] == [("r1", {})]  # read through the plain-params view
    old.record(rec(run="r2", params={"n": 7}))
    with sqlite3.connect(path) as conn:
        assert "params" in {row[1] for row in conn.execute("PRAGMA table_info(results)")}
    again = ResultsStore(path)
    assert [(r.run_id, r.params) for r in again.query(probes=True)] == [("r1", {}), ("r2", {"n": 7})]
    assert [r.run_id for r in again.query(probe_params={})] == ["r1"]
    assert [r.run_id for r in again.query(probe_params={"n": 7})] == ["r2"]


def test_probe_parameters_are_stored_canonically_and_filters_select_by_each_column(tmp_path: Path) -> None:
    from pinmatrix.results.store import params_key

    assert params_key({"n": 2, "m": 1.5}) == '{"m":1.5,"n":2}' and params_key(None) == params_key({}) == "{}"
    store = ResultsStore(tmp_path / "r.sqlite")
    store.record_many([rec(run="r1", params={"b": 1, "a": 2}), rec(run="r2", cell="bbbbbbbbbbbb", stack="gb10",
                                                                  smoke="other", host=CPU)])
    with sqlite3.connect(tmp_path / "r.sqlite") as conn:
        stored = sorted(row[0] for row in conn.execute("SELECT params FROM results"))
    assert stored == ['{"a":2,"b":1}', "{}"]
    assert [r.run_id for r in store.query(probe_params={"a": 2, "b": 1})] == ["r1"]
    for key, value, want in (("cell_id", "bbbbbbbbbbbb", ["r2"]), ("stack", "gb10", ["r2"]), ("stack", "h200", ["r1"]),
                             ("host_id", CPU.id, ["r2"]), ("smoke", "other", ["r2"]), ("run_id", "r1", ["r1"])):
        assert [r.run_id for r in store.query(**{key: value}, probes=True)] == want, key


def test_environment_values_that_are_not_json_are_kept_as_text(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "r.sqlite")
    store.record(rec(environment={"b": Path("/opt/venv"), "a": 1}, known_issue="ki-1"))
    (back,) = store.query()
    assert back.environment == {"a": 1, "b": "/opt/venv"} and back.known_issue == "ki-1"


def test_busy_store_is_retried_with_growing_waits_then_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite's SQLITE_BUSY/SQLITE_LOCKED errors are waited out (0.05 s doubling, capped at 1 s) up to RETRIES
    attempts; any other operational error, or the last busy one, is one ResultsError naming the store."""
    store = ResultsStore(tmp_path / "r.sqlite")
    waits: list[float] = []
    monkeypatch.setattr("pinmatrix.results.store.time.sleep", waits.append)
    calls: list[int] = []

    codes = {"database is locked": sqlite3.SQLITE_BUSY, "database table is busy": sqlite3.SQLITE_LOCKED,
             "disk I/O error": sqlite3.SQLITE_IOERR}

    def busy_then(value: int, busy: int, message: str = "database is locked"):
        def fn() -> int:
            calls.append(1)
            if len(calls) <= busy:
                err = sqlite3.OperationalError(message)
                err.sqlite_errorcode = codes[message]
                raise err
            return value
        return fn

    assert store._retry(busy_then(7, 3)) == 7
    assert len(calls) == 4 and waits == [0.05, 0.1, 0.2]

    calls.clear(), waits.clear()
    assert store._retry(busy_then(8, 7, "database table is busy")) == 8
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]

    calls.clear(), waits.clear()
    with pytest.raises(ResultsError) as err:
        store._retry(busy_then(9, 1, "disk I/O error"))
    assert str(err.value) == f"{tmp_path / 'r.sqlite'}: disk I/O error" and len(calls) == 1 and waits == []

    calls.clear(), waits.clear()
    with pytest.raises(ResultsError) as err:
        store._retry(busy_then(9, ResultsStore.RETRIES, "database is locked"))
    assert str(err.value) == f"{tmp_path / 'r.sqlite'}: database is locked"
    assert len(calls) == ResultsStore.RETRIES and len(waits) == ResultsStore.RETRIES - 1
    assert store._retry(lambda: 0) == 0  # a falsy answer is returned as it is


def test_status_filter_cpu_host_round_trip_and_a_label_without_capability(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "r.sqlite")
    store.record_many([rec("a", status="pass"), rec("b", status="fail"), rec("c", status="pass", host=CPU)])
    assert [r.smoke for r in store.query(status="fail")] == ["b"]
    assert sorted(r.smoke for r in store.query(status="pass")) == ["a", "c"]
    (cpu,) = store.query(smoke="c")
    assert cpu.host == CPU and cpu.host.gpu_count == 0 and cpu.host.label() == "ci (cpu-only)"
    unknown = HostFingerprint.make(hostname="h", gpu_name="NVIDIA H200", gpu_count=2, driver="580.159.04")
    assert unknown.label() == "2x NVIDIA H200 sm_? driver 580.159.04"


def test_a_store_is_prepared_once_per_process_not_before_every_write(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """prepare_write checks the file and takes the write lock once; later calls (each write path calls it) are free."""
    store = ResultsStore(tmp_path / "r.sqlite")
    store.prepare_write()
    calls: list[str] = []
    monkeypatch.setattr(store, "check", lambda: calls.append("check"))
    monkeypatch.setattr(store, "_retry", lambda fn: calls.append("lock"))
    store.prepare_write()
    store.prepare_write()
    assert calls == []
    fresh = ResultsStore(tmp_path / "r.sqlite")  # another process's store object: checks the file it finds
    monkeypatch.setattr(fresh, "check", lambda: calls.append("check"))
    fresh.prepare_write()
    assert calls == ["check"]
