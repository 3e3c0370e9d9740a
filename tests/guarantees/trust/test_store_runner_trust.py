"""The results store and the smoke runner keep their word, with real processes and real SQLite files:

- a reader returns within 1 s while another process holds a write transaction (and sees the last commit);
- a writer that has to wait says for whom (a pinmatrix writer's owner file, or the pid /proc/locks names);
- a store that fails quick_check is named before any smoke runs; a read-only store is readable;
- kill -9 of the runner leaves no smoke process alive (checked in /proc), a child that left the group too;
- a smoke that records pass and exits 1 is recorded as fail; a log is capped with head and tail kept;
  every smoke gets a timeout.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from store_data import run_ids

from pinmatrix.results import storefile
from pinmatrix.results.store import HostFingerprint, ResultsStore, SmokeRecord
from pinmatrix.results.storefile import ResultsError
from pinmatrix.smoke.cellrun import run_cells
from pinmatrix.smoke.runner import HostCell, RunOptions, effective_timeout

ROOT = Path(__file__).resolve().parents[3]
HOST = HostFingerprint.make(hostname="test", gpu_name="Fake GPU", gpu_count=1, driver="1.0", capability="9.0")


def record(smoke: str = "s", run: str = "r1", status: str = "pass") -> SmokeRecord:
    return SmokeRecord(cell_id="c1", stack="st", host=HOST, smoke=smoke, run_id=run, status=status,
                       failure_class=None, reason="", metrics={}, log_path=None, started_at="2026-01-01T00:00:00+00:00",
                       finished_at="2026-01-01T00:00:01+00:00", duration_s=1.0, known_issue=None, image_digest=None)


# A process that takes the store's write lock the way pinmatrix does, writes a row, and holds the
# transaction open until killed.
PINMATRIX_WRITER = """
import sys, time
from pathlib import Path
from pinmatrix.results import storefile
from pinmatrix.results.store import ResultsStore
store = ResultsStore(Path(sys.argv[1]))
store.prepare_write()
with store._connect() as conn:
    storefile.begin_write(conn, store.path, wait_s=5, on_wait=print)
    conn.execute("INSERT INTO meta (key, value) VALUES ('held', 'yes')")
    print("holding", flush=True)
    time.sleep(60)
"""
SQLITE_WRITER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("INSERT INTO meta (key, value) VALUES ('held', 'yes')")
print("holding", flush=True)
time.sleep(60)
"""


@pytest.fixture()
def holder(tmp_path: Path):
    """Start a writer process that holds the store's write lock; yields (store path, process)."""
    procs: list[subprocess.Popen[str]] = []
    path = tmp_path / "results.sqlite"
    store = ResultsStore(path)
    store.record(record("before"))

    def start(code: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        return proc

    yield path, start
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("code", [PINMATRIX_WRITER, SQLITE_WRITER], ids=["pinmatrix-writer", "sqlite3-writer"])
def test_reader_returns_within_a_second_while_a_writer_holds_a_transaction(holder, code: str) -> None:
    path, start = holder
    start(code)
    t0 = time.monotonic()
    rows = ResultsStore(path).query()
    elapsed = time.monotonic() - t0
    assert elapsed < 1.0, f"the reader waited {elapsed:.2f} s behind the writer"
    assert [r.smoke for r in rows] == ["before"]  # the last committed state, not the writer's
    t0 = time.monotonic()
    assert ResultsStore(path).has_result("c1", HOST.id, "before")
    assert run_ids(ResultsStore(path)) == ["r1"]
    assert time.monotonic() - t0 < 1.0


def test_a_waiting_writer_says_which_pinmatrix_process_holds_the_lock(holder) -> None:
    path, start = holder
    proc = start(PINMATRIX_WRITER)
    said: list[str] = []
    store = ResultsStore(path, on_wait=said.append)
    store.WRITE_WAIT_S = 1.0
    with pytest.raises(ResultsError) as err:
        store.record(record("after"))
    owner = json.loads(storefile.owner_path(path).read_text())
    assert owner["pid"] == proc.pid
    who = f"pid {proc.pid} on {owner['host']} ({owner['command']}) since {owner['since']}"
    assert said == [f"{path}: waiting for the write lock, held by {who}"]
    assert str(err.value) == f"{path}: gave up after 1 s waiting for the write lock, held by {who}"
    proc.kill()
    proc.wait()
    store.record(record("after"))  # the lock went with the process (and the stale owner file is not believed)
    assert [r.smoke for r in store.query()] == ["before", "after"]


def test_a_waiting_writer_names_a_foreign_holder_by_pid(holder) -> None:
    path, start = holder
    proc = start(SQLITE_WRITER)
    said: list[str] = []
    store = ResultsStore(path, on_wait=said.append)
    store.WRITE_WAIT_S = 0.5
    with pytest.raises(ResultsError, match=rf"held by pid {proc.pid} \(.*-c .*\)$"):
        store.record(record("after"))
    assert len(said) == 1 and f"held by pid {proc.pid} (" in said[0]


def test_a_read_only_store_is_readable(tmp_path: Path) -> None:
    folder = Path(tempfile.mkdtemp(prefix="pinmatrix-ro-"))
    try:
        store = ResultsStore(folder / "results.sqlite")
        store.record(record("kept"))
        os.chmod(folder / "results.sqlite", 0o444)
        os.chmod(folder, 0o555)  # no -shm can be made here: SQLite's WAL reader needs a fallback
        code = ("import sys; from pinmatrix.results.store import ResultsStore; "
                "print([r.smoke for r in ResultsStore(sys.argv[1]).query()])")
        argv = [sys.executable, "-c", code, str(folder / "results.sqlite")]
        if os.geteuid() == 0:  # root writes anywhere: read as nobody instead
            argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/")
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "['kept']"
    finally:
        os.chmod(folder, 0o755)
        shutil.rmtree(folder)


def _smoke_dir(tmp_path: Path, body: str) -> Path:
    d = tmp_path / "smoke"
    d.mkdir()
    (d / "trust.py").write_text(textwrap.dedent(body))
    return d


LIAR = '''
import json, os, sys
SMOKES = {"liar": {"func": "liar", "timeout_s": 60}, "zero-timeout": {"func": "liar", "timeout_s": 0}}
if __name__ == "__main__":
    with open(os.environ["PINMATRIX_SMOKE_RESULT"], "w") as fh:
        json.dump({"smoke": sys.argv[1], "status": "pass", "reason": "all good"}, fh)
    print("PINMATRIX-RESULT " + json.dumps({"status": "pass"}), flush=True)
    sys.exit(1)
'''


def test_a_smoke_that_records_pass_and_exits_1_is_recorded_as_fail(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "r.sqlite")
    opts = RunOptions(smoke_dir=_smoke_dir(tmp_path, LIAR), logs_dir=tmp_path / "logs", keyword="liar")
    run_cells([HostCell()], store, opts, host=HOST, echo=lambda _l: None)
    (rec,) = store.query(smoke="liar")
    assert (rec.status, rec.failure_class) == ("fail", "exit-status")
    assert rec.reason == "recorded 'pass' but exited with status 1 (all good)"


def test_every_smoke_gets_a_timeout() -> None:
    assert effective_timeout(None) == effective_timeout(0) == effective_timeout(-5) == 600.0
    assert effective_timeout(float("inf")) == effective_timeout(float("nan")) == 600.0
    assert effective_timeout(10**9) == 6 * 3600
    assert effective_timeout(2.5) == 2.5


FLOOD = '''
import sys
SMOKES = {"flood": {"func": "flood", "timeout_s": 60}}
if __name__ == "__main__":
    out = sys.stdout.buffer
    out.write(b"FIRST LINE\\n")
    for i in range(40000):
        out.write(b"\\x1b[31m%06d noise noise noise noise noise noise noise noise noise noise noise\\x1b[0m\\n" % i)
    out.write(b"LAST LINE\\n")
    out.flush()
'''


def test_a_log_is_capped_keeping_head_and_tail(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "r.sqlite")
    cap = 256 * 1024
    opts = RunOptions(smoke_dir=_smoke_dir(tmp_path, FLOOD), logs_dir=tmp_path / "logs", log_cap=cap)
    run_cells([HostCell()], store, opts, host=HOST, echo=lambda _l: None)
    (rec,) = store.query()
    data = Path(rec.log_path).read_bytes()
    assert len(data) <= cap + 200
    assert b"FIRST LINE" in data[:4096] and data.endswith(b"LAST LINE\n")
    assert b"\n[pinmatrix: log capped at 262144 bytes: " in data
    marker = data.split(b"[pinmatrix: log capped", 1)[1].split(b"\n", 1)[0]
    omitted = int(marker.split(b": ", 1)[1].split(b" ", 1)[0])
    assert omitted > 3_000_000  # ~3.3 MB printed, 256 KiB kept
    assert rec.status == "fail" and rec.failure_class == "error"  # no result: a fail, classified from the log


GROUP = '''
import os, subprocess, sys, time
SMOKES = {"spawner": {"func": "spawner", "timeout_s": 600}}
if __name__ == "__main__":
    pids = [os.getpid()]
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    # a grandchild that leaves the process group (setsid): only the guard's token sweep finds it
    runaway = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    pids += [child.pid, runaway.pid]
    with open(os.environ["PIDS_FILE"], "w") as fh:
        fh.write(" ".join(map(str, pids)))
    time.sleep(600)
'''


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state  # a zombie has exited; only its parent's wait is missing


def test_kill_9_of_the_runner_leaves_no_smoke_process_alive(tmp_path: Path) -> None:
    smoke_dir = _smoke_dir(tmp_path, GROUP)
    pids_file = tmp_path / "pids"
    env = {**os.environ, "PIDS_FILE": str(pids_file)}
    runner = subprocess.Popen(
        [sys.executable, "-m", "pinmatrix", "smoke", "--smoke-dir", str(smoke_dir), "--results",
         str(tmp_path / "r.sqlite"), "--logs", str(tmp_path / "logs")],
        env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not (pids_file.exists() and len(pids_file.read_text().split()) == 3):
            assert runner.poll() is None and time.monotonic() < deadline, "the smoke never started"
            time.sleep(0.05)
        pids = [int(p) for p in pids_file.read_text().split()]
        assert all(_alive(p) for p in pids)
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    survivors = [p for p in pids if _alive(p)]
    for p in survivors:  # do not leave them behind even when the test fails
        os.kill(p, signal.SIGKILL)
    assert not survivors, f"smoke processes outlived the runner: {survivors}"


def test_a_damaged_store_is_named_before_any_smoke_runs(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    store = ResultsStore(path)
    store.record_many([record(f"s{i}", run=f"r{i}") for i in range(300)])
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'results_key'").fetchone()[0]
    conn.close()
    with path.open("r+b") as fh:  # scribble over the index's root page: the table still reads, the check fails
        fh.seek((root - 1) * page + 8)
        fh.write(b"\xff" * 200)
    before = path.read_bytes()
    smoke_dir = _smoke_dir(tmp_path, LIAR)
    out = subprocess.run([sys.executable, "-m", "pinmatrix", "smoke", "--smoke-dir", str(smoke_dir), "--results",
                          str(path), "--logs", str(tmp_path / "logs")], capture_output=True, text=True, cwd=tmp_path,
                         timeout=120)
    assert out.returncode == 2
    assert out.stderr.startswith(f"pinmatrix: error: {path}: the results store ")
    assert "quick_check" in out.stderr or "damaged" in out.stderr
    assert not (tmp_path / "logs").exists()  # nothing ran
    assert path.read_bytes() == before  # and nothing was "repaired"
