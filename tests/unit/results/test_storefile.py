"""pinmatrix.results.storefile rule by rule, on real SQLite files made here: what is at the store's path before
anything is written (nothing, a folder, an empty file, another file: named in one line and left as it is), a new
store made atomically, snapshot reads (read-only, with the ``immutable`` fallback where no WAL index can be made),
quick_check in one line, and the writer's owner file and the words for whoever holds the write lock (the owner
file, else the pids /proc/locks names)."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pinmatrix.results import storefile
from pinmatrix.results.storefile import SQLITE_HEADER, ResultsError


def _store(path: Path) -> Path:
    storefile.create(path, lambda conn: conn.execute("CREATE TABLE t (v TEXT)"))
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("INSERT INTO t VALUES ('kept')")
    conn.close()  # the last connection gone: SQLite removes the -wal and -shm files
    return path


def _refused(path: Path) -> str:
    with pytest.raises(ResultsError) as err:
        storefile.inspect_file(path)
    return str(err.value)


# -- what is at the path ------------------------------------------------------------------------------

def test_nothing_at_the_path_is_no_store_and_a_store_is_one() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.sqlite"
        assert storefile.inspect_file(path) is False
        assert storefile.inspect_file(_store(path)) is True


def test_a_folder_an_empty_file_and_a_foreign_file_are_named_and_left_as_they_are(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    assert _refused(tmp_path / "dir") == f"{tmp_path / 'dir'}: is a folder, not a results store"
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert _refused(empty) == (f"{empty}: is an empty file, not a results store; left as it is (remove it, or pass "
                               "another --results)")
    foreign = tmp_path / "foreign"
    foreign.write_bytes(b"PK\x03\x04 a zip file, not a database")
    assert _refused(foreign) == (f"{foreign}: is not an SQLite database (it starts with b'PK\\x03\\x04 a z'), so not "
                                 "a results store; left as it is")
    short = tmp_path / "short"
    short.write_bytes(SQLITE_HEADER[:-1])  # one byte short of the header
    assert "is not an SQLite database (it starts with b'SQLite f')" in _refused(short)
    assert empty.read_bytes() == b"" and foreign.read_bytes().startswith(b"PK")  # nothing was reset


def test_a_path_that_cannot_be_looked_at_or_read_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert _refused(afile / "r.sqlite") == f"{afile / 'r.sqlite'}: cannot read the results store: Not a directory"
    store = _store(tmp_path / "r.sqlite")

    def unreadable(self: Path, *args: object, **kwargs: object) -> object:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "open", unreadable)  # as for a file of another user (root reads everything)
    assert _refused(store) == f"{store}: cannot read the results store: Permission denied"


# -- a new store --------------------------------------------------------------------------------------

def test_a_new_store_is_made_whole_in_wal_mode_leaving_nothing_beside_it(tmp_path: Path) -> None:
    seen: list[bool] = []

    def init(conn: sqlite3.Connection) -> None:
        seen.append(conn.in_transaction)
        conn.execute("CREATE TABLE t (v TEXT)")

    path = tmp_path / "deep" / "er" / "r.sqlite"
    storefile.create(path, init)
    assert seen == [True]  # init runs inside the one transaction
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("t",)]
    conn.close()
    assert sorted(p.name for p in path.parent.iterdir()) == ["r.sqlite"]


def test_a_store_that_appeared_meanwhile_is_kept(tmp_path: Path) -> None:
    path = _store(tmp_path / "r.sqlite")
    storefile.create(path, lambda conn: conn.execute("CREATE TABLE other (v TEXT)"))
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("t",)]
    assert conn.execute("SELECT v FROM t").fetchall() == [("kept",)]
    conn.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.sqlite"]


def test_without_hard_links_the_new_store_is_moved_into_place_unless_one_is_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_links(src: object, dst: object) -> None:
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    path = tmp_path / "r.sqlite"
    storefile.create(path, lambda conn: conn.execute("CREATE TABLE t (v TEXT)"))
    assert storefile.inspect_file(path) and sorted(p.name for p in tmp_path.iterdir()) == ["r.sqlite"]
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("INSERT INTO t VALUES ('kept')")
    storefile.create(path, lambda conn: conn.execute("CREATE TABLE other (v TEXT)"))
    assert conn.execute("SELECT v FROM t").fetchall() == [("kept",)]
    assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("t",)]
    conn.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.sqlite"]


def test_a_store_that_cannot_be_made_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE t (v TEXT)")
        conn.execute("not sql")

    path = tmp_path / "r.sqlite"
    with pytest.raises(ResultsError) as err:
        storefile.create(path, broken)
    assert str(err.value) == f'{path}: cannot create the results store: near "not": syntax error'
    assert list(tmp_path.iterdir()) == []


# -- reading ------------------------------------------------------------------------------------------

def test_a_read_connection_is_read_only_with_its_busy_timeout(tmp_path: Path) -> None:
    path = _store(tmp_path / "r 1%#?.sqlite")  # a name that must be quoted in the URI
    conn = storefile.connect_read(path, busy_ms=321)
    try:
        assert conn.execute("SELECT v FROM t").fetchall() == [("kept",)]
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 321
        assert conn.isolation_level is None
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            conn.execute("INSERT INTO t VALUES ('no')")
    finally:
        conn.close()
    conn = storefile.connect_read(path)
    try:
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == storefile.READ_BUSY_MS == 500
    finally:
        conn.close()


def test_a_store_in_a_read_only_folder_is_read_through_the_immutable_fallback() -> None:
    """SQLite cannot make the WAL index (-shm) in a folder it may not write: ``mode=ro`` alone fails, and the store
    is opened ``immutable``. Run in a child that is not root (root writes anywhere)."""
    folder = Path(tempfile.mkdtemp(prefix="pinmatrix-ro-"))
    path = _store(folder / "r.sqlite")
    os.chmod(path, 0o444)
    os.chmod(folder, 0o555)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest from here on, only os._exit
        try:
            os.close(read)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            conn = storefile.connect_read(path)
            rows = conn.execute("SELECT v FROM t").fetchall()
            os.write(write, json.dumps(rows).encode())
            os._exit(0)
        except BaseException as err:  # noqa: BLE001 - reported to the parent
            os.write(write, repr(err).encode())
            os._exit(1)
    try:
        os.close(write)
        with os.fdopen(read, "rb") as fh:
            said = fh.read().decode()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, said
        assert json.loads(said) == [["kept"]]
        assert sorted(p.name for p in folder.iterdir()) == ["r.sqlite"]  # no -wal, no -shm made
    finally:
        os.chmod(folder, 0o755)
        for p in folder.iterdir():
            p.unlink()
        folder.rmdir()


def test_a_store_that_cannot_be_opened_or_read_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "none.sqlite"
    with pytest.raises(ResultsError) as err:
        storefile.connect_read(missing)
    assert str(err.value) == f"{missing}: cannot open the results store for reading: unable to open database file"
    assert not missing.exists()
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(SQLITE_HEADER + b"\xff" * 200)
    with pytest.raises(ResultsError) as err:
        storefile.connect_read(garbage)
    assert str(err.value) == f"{garbage}: the results store is unreadable: file is not a database"


CODES = {"disk I/O error": sqlite3.SQLITE_IOERR, "attempt to write a readonly database": sqlite3.SQLITE_READONLY,
         "unable to open database file": sqlite3.SQLITE_CANTOPEN, "readonly, says the message": sqlite3.SQLITE_IOERR,
         "extended readonly": sqlite3.SQLITE_READONLY | 1 << 8}


def test_a_read_that_fails_for_another_reason_does_not_try_immutable(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Only SQLITE_READONLY and SQLITE_CANTOPEN (by code, not wording) send the reader to ``immutable=1`` (which would read a store another
    process is writing as if it never changed); any other failure is named at once."""
    path = _store(tmp_path / "r.sqlite")
    real = sqlite3.connect
    opened: list[str] = []

    class Failing:
        def __init__(self, conn: sqlite3.Connection, message: str) -> None:
            self.conn, self.message = conn, message

        def execute(self, sql: str) -> object:
            if sql.startswith("SELECT"):
                err = sqlite3.OperationalError(self.message)
                err.sqlite_errorcode = CODES[self.message]
                raise err
            return self.conn.execute(sql)

        def close(self) -> None:
            self.conn.close()

    def connect(database: str, **kwargs: object) -> object:
        opened.append(database.split("?", 1)[1])
        conn = real(database, **kwargs)  # type: ignore[call-overload]
        return Failing(conn, message) if "immutable" not in database else conn

    monkeypatch.setattr(storefile.sqlite3, "connect", connect)
    for message, tried in (("disk I/O error", ["mode=ro"]), ("readonly, says the message", ["mode=ro"]),
                           ("extended readonly", ["mode=ro", "mode=ro&immutable=1"]),
                           ("attempt to write a readonly database", ["mode=ro", "mode=ro&immutable=1"]),
                           ("unable to open database file", ["mode=ro", "mode=ro&immutable=1"])):
        opened.clear()
        if len(tried) == 1:
            with pytest.raises(ResultsError) as err:
                storefile.connect_read(path)
            assert str(err.value) == f"{path}: cannot open the results store for reading: {message}"
        else:
            conn = storefile.connect_read(path)
            assert conn.execute("SELECT v FROM t").fetchall() == [("kept",)]
            conn.close()
        assert opened == tried, message


def test_quick_check_is_one_line(tmp_path: Path) -> None:
    path = _store(tmp_path / "r.sqlite")
    conn = sqlite3.connect(path)
    storefile.quick_check(conn, path)  # a sound store passes

    class Answers:
        def __init__(self, rows: list[tuple[str]] | None) -> None:
            self.rows = rows

        def execute(self, sql: str) -> Answers:
            assert sql == "PRAGMA quick_check"
            if self.rows is None:
                raise sqlite3.DatabaseError("database disk image is malformed")
            return self

        def fetchall(self) -> list[tuple[str]]:
            return self.rows or []

    with pytest.raises(ResultsError) as err:
        storefile.quick_check(Answers([("*** in database main ***\nPage 5:   never used",), ("row 2",)]), path)  # type: ignore[arg-type]
    assert str(err.value) == (f"{path}: the results store fails SQLite's quick_check (*** in database main *** Page 5: "
                              "never used); left as it is: restore it from a copy, or pass another --results")
    with pytest.raises(ResultsError) as err:
        storefile.quick_check(Answers([("x" * 400,)]), path)  # type: ignore[arg-type]
    assert f"quick_check ({'x' * 160});" in str(err.value)
    with pytest.raises(ResultsError) as err:
        storefile.quick_check(Answers(None), path)  # type: ignore[arg-type]
    assert str(err.value) == (f"{path}: the results store is damaged (database disk image is malformed); left as it "
                              "is: restore it from a copy, or pass another --results")
    conn.close()


# -- the writer ---------------------------------------------------------------------------------------

def test_the_owner_file_says_who_writes_and_only_its_writer_clears_it(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = _store(tmp_path / "r.sqlite")
    monkeypatch.setattr(sys, "argv", ["pinmatrix", "smoke", "x" * 400])
    conn = sqlite3.connect(path, isolation_level=None)
    storefile.begin_write(conn, path, wait_s=1, on_wait=pytest.fail)
    assert conn.in_transaction
    owner_file = storefile.owner_path(path)
    assert owner_file == tmp_path / "r.sqlite.writer"
    owner = json.loads(owner_file.read_text(encoding="utf-8"))
    assert set(owner) == {"pid", "host", "command", "since"}
    assert (owner["pid"], owner["host"]) == (os.getpid(), socket.gethostname())
    assert owner["command"] == ("pinmatrix smoke " + "x" * 400)[:300]
    assert owner["since"].endswith("+00:00") and len(owner["since"]) == len("2026-12-01T14:00:00+00:00")
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    conn.execute("ROLLBACK")
    conn.close()
    owner_file.write_text(json.dumps({"pid": os.getpid() + 1}), encoding="utf-8")
    storefile.clear_owner(path)
    assert owner_file.exists()  # another writer's: left
    for text in ("not json", "[1]"):
        owner_file.write_text(text, encoding="utf-8")
        storefile.clear_owner(path)
        assert owner_file.exists()
    owner_file.write_text(json.dumps({"pid": os.getpid()}), encoding="utf-8")
    storefile.clear_owner(path)
    assert not owner_file.exists()
    storefile.clear_owner(path)  # nothing there: nothing to do


def test_an_owner_file_that_cannot_be_written_never_stops_the_writer(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = _store(tmp_path / "r.sqlite")
    storefile.owner_path(path).mkdir()  # os.replace of a file onto a folder fails
    conn = sqlite3.connect(path, isolation_level=None)
    storefile.begin_write(conn, path, wait_s=1, on_wait=pytest.fail)
    assert conn.in_transaction
    conn.execute("ROLLBACK")
    conn.close()
    assert storefile.owner_path(path).is_dir()


def test_a_failure_that_is_not_the_lock_is_raised_as_it_is(tmp_path: Path) -> None:
    path = _store(tmp_path / "r.sqlite")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    with pytest.raises(sqlite3.OperationalError, match="cannot start a transaction within a transaction"):
        storefile.begin_write(conn, path, wait_s=5, on_wait=pytest.fail)
    conn.close()
    assert not storefile.owner_path(path).exists()


def test_a_writer_waits_for_the_lock_says_so_once_and_gives_up_naming_the_holder(tmp_path: Path) -> None:
    path = _store(tmp_path / "r.sqlite")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # held by this very process: /proc/locks names no other pid
    said: list[str] = []
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        with pytest.raises(ResultsError) as err:
            storefile.begin_write(conn, path, wait_s=0.7, on_wait=said.append)
        who = "another process (it left no owner file: not a pinmatrix writer, e.g. an sqlite3 shell)"
        assert str(err.value) == f"{path}: gave up after 0.7 s waiting for the write lock, held by {who}"
        assert said == [f"{path}: waiting for the write lock, held by {who}"]
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 200
        holder.execute("ROLLBACK")
        storefile.begin_write(conn, path, wait_s=0, on_wait=pytest.fail)  # free now: at once, even with no wait
        assert conn.in_transaction
        conn.execute("ROLLBACK")
    finally:
        conn.close()
        holder.close()


def test_a_writer_that_must_wait_tells_once_then_gets_the_lock(tmp_path: Path) -> None:
    path = _store(tmp_path / "r.sqlite")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys, time\n"
        "conn = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "conn.execute('BEGIN IMMEDIATE')\n"
        "print('holding', flush=True)\n"
        "time.sleep(1.5)\n"
        "conn.execute('ROLLBACK')\n"), str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        said: list[str] = []
        conn = sqlite3.connect(path, isolation_level=None)
        storefile.begin_write(conn, path, wait_s=30, on_wait=said.append)
        assert conn.in_transaction and len(said) == 1
        assert said[0].startswith(f"{path}: waiting for the write lock, held by pid {holder.pid} (")
        conn.execute("ROLLBACK")
        conn.close()
    finally:
        holder.kill()
        holder.wait()


# -- who holds the lock -------------------------------------------------------------------------------

def test_a_live_owner_on_this_host_or_any_owner_on_another_is_believed(tmp_path: Path) -> None:
    path = _store(tmp_path / "r.sqlite")
    owner = storefile.owner_path(path)
    me = {"pid": os.getpid(), "host": socket.gethostname(), "command": "pinmatrix smoke", "since": "2026-12-01T14:00"}
    owner.write_text(json.dumps(me), encoding="utf-8")
    assert storefile.describe_holder(path) == (f"pid {os.getpid()} on {socket.gethostname()} (pinmatrix smoke) since "
                                               "2026-12-01T14:00")
    dead = _dead_pid()
    owner.write_text(json.dumps({**me, "pid": dead, "host": "elsewhere"}), encoding="utf-8")
    assert storefile.describe_holder(path) == f"pid {dead} on elsewhere (pinmatrix smoke) since 2026-12-01T14:00"
    owner.write_text(json.dumps({**me, "pid": str(dead)}), encoding="utf-8")  # dead, here: not believed
    nobody = "another process (it left no owner file: not a pinmatrix writer, e.g. an sqlite3 shell)"
    assert storefile.describe_holder(path) == nobody
    for text in ("not json", "[1]", json.dumps({"host": "x"}), json.dumps({"pid": "one"})):
        owner.write_text(text, encoding="utf-8")
        assert storefile.describe_holder(path) == nobody, text


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_alive_and_cmdline(monkeypatch: pytest.MonkeyPatch) -> None:
    assert storefile.process_alive(os.getpid()) is True
    assert storefile.process_alive(_dead_pid()) is False
    assert storefile._cmdline(_dead_pid()) == ""
    code = "import time; print('up', flush=True); time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code, "é" * 150], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        line = storefile._cmdline(proc.pid)
        assert line == f"{sys.executable} -c {code} {'é' * 150}"[:200] and len(line) == 200
    finally:
        proc.kill()
        proc.wait()

    def not_mine(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "kill", not_mine)
    assert storefile.process_alive(12345) is True  # another user's process is alive


def test_the_lock_holders_are_the_posix_write_locks_on_the_store_and_its_wal_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc/locks as the kernel writes it (here made up, for pids that need not exist): POSIX WRITE locks on the
    store, its -shm or its -wal, once each, never this process; FLOCK or READ locks and other files are no holders."""
    path = _store(tmp_path / "r.sqlite")
    (tmp_path / "r.sqlite-shm").write_bytes(b"s")
    (tmp_path / "r.sqlite-wal").write_bytes(b"w")
    (tmp_path / "other").write_bytes(b"o")

    def key(name: str) -> str:
        st = (tmp_path / name).stat()
        return f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"

    lines = [
        f"1: POSIX  ADVISORY  WRITE 101 {key('r.sqlite')} 1073741824 1073741824",
        f"2: POSIX  ADVISORY  READ  102 {key('r.sqlite')} 1073741826 1073742335",
        f"3: FLOCK  ADVISORY  WRITE 103 {key('r.sqlite')} 0 EOF",
        f"4: POSIX  ADVISORY  WRITE 104 {key('r.sqlite-shm')} 120 127",
        f"5: POSIX  ADVISORY  WRITE 105 {key('r.sqlite-wal')} 0 EOF",
        f"6: POSIX  ADVISORY  WRITE 106 {key('other')} 0 EOF",
        f"7: POSIX  ADVISORY  WRITE {os.getpid()} {key('r.sqlite')} 0 EOF",
        f"8: POSIX  ADVISORY  WRITE 101 {key('r.sqlite-shm')} 0 EOF",
        "9: POSIX  ADVISORY  WRITE",
        f"10: POSIX  ADVISORY  WRITE x107 {key('r.sqlite')} 0 EOF",
        "11: POSIX  ADVISORY  WRITE 108 zz:00:1 0 EOF",
        "12: POSIX  ADVISORY  WRITE 109 00:01 0 EOF",
        f"13: POSIX  ADVISORY  WRITE 110 {key('r.sqlite')}",
        f"14: -> POSIX  ADVISORY  WRITE 111 {key('r.sqlite')} 0 EOF",
    ]
    real = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        if str(self) == "/proc/locks":
            return "\n".join(lines) + "\n"
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    real_bytes = Path.read_bytes

    def read_bytes(self: Path) -> bytes:  # the holders' command lines, whatever runs under those pids here
        if str(self) == "/proc/105/cmdline":
            return b"python3\0-m\0pinmatrix\0smoke\0"
        if str(self) in ("/proc/101/cmdline", "/proc/110/cmdline"):
            raise FileNotFoundError(str(self))
        return real_bytes(self)

    monkeypatch.setattr(Path, "read_text", read_text)
    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    assert storefile._lock_holders(path) == [101, 104, 105, 110]
    (tmp_path / "r.sqlite-shm").unlink()  # a file that is not there is no key
    assert storefile._lock_holders(path) == [101, 105, 110]
    assert storefile.describe_holder(path) == ("pid 101 (command unknown), pid 105 (python3 -m pinmatrix smoke), "
                                               "pid 110 (command unknown)")

    def unreadable(self: Path, *args: object, **kwargs: object) -> str:
        if str(self) == "/proc/locks":
            raise PermissionError(13, "Permission denied")
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", unreadable)
    assert storefile._lock_holders(path) == []


def test_a_holder_named_by_proc_locks_is_shown_with_its_command(tmp_path: Path) -> None:
    path = _store(tmp_path / "r.sqlite")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys, time\n"
        "conn = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "conn.execute('BEGIN IMMEDIATE')\n"
        "print('holding', flush=True)\n"
        "time.sleep(30)\n"), str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        assert holder.pid in storefile._lock_holders(path)
        command = storefile._cmdline(holder.pid)
        assert command.startswith(f"{sys.executable} -c import sqlite3, sys, time\nconn = ")
        assert storefile.describe_holder(path) == f"pid {holder.pid} ({command})"
    finally:
        holder.kill()
        holder.wait()


def test_asking_whether_a_pid_is_alive_sends_it_no_signal() -> None:
    import signal

    proc = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"],
                            stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))  # noqa: PLW1509
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        assert storefile.process_alive(proc.pid) is True
        time.sleep(0.2)
        assert proc.poll() is None  # still running: signal 0 only asks
    finally:
        proc.kill()
        proc.wait()


def test_a_command_line_that_is_not_utf8_is_shown_replaced() -> None:
    proc = subprocess.Popen([os.fsencode(sys.executable), b"-c", b"import time; print('up', flush=True); "
                             b"time.sleep(30)", b"caf\xe9"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        assert storefile._cmdline(proc.pid).endswith(" caf\ufffd")
    finally:
        proc.kill()
        proc.wait()


def test_proc_locks_device_numbers_are_hex(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _store(tmp_path / "r.sqlite")
    monkeypatch.setattr(storefile.os, "major", lambda dev: 259)
    monkeypatch.setattr(storefile.os, "minor", lambda dev: 26)
    line = f"1: POSIX  ADVISORY  WRITE 4242 103:1a:{path.stat().st_ino} 0 EOF\n"
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: line if str(self) == "/proc/locks"
                        else real(self, *a, **k))  # type: ignore[arg-type]
    assert storefile._lock_holders(path) == [4242]


def test_contention_is_read_from_sqlite_error_code_not_its_wording() -> None:
    """Waiting helps only when another connection holds a lock: SQLITE_BUSY, SQLITE_LOCKED and their extended
    codes (BUSY_SNAPSHOT, LOCKED_SHAREDCACHE). A message that merely says "locked" with another code (a
    readonly or I/O error) is not contention, and an error without a code is not either."""
    def error(message: str, code: int | None) -> sqlite3.OperationalError:
        err = sqlite3.OperationalError(message)
        if code is not None:
            err.sqlite_errorcode = code
        return err

    assert storefile.is_contention(error("database is locked", sqlite3.SQLITE_BUSY))
    assert storefile.is_contention(error("database table is locked", sqlite3.SQLITE_LOCKED))
    assert storefile.is_contention(error("x", 517))  # SQLITE_BUSY_SNAPSHOT
    assert storefile.is_contention(error("x", 262))  # SQLITE_LOCKED_SHAREDCACHE
    assert not storefile.is_contention(error("database is locked", sqlite3.SQLITE_IOERR))
    assert not storefile.is_contention(error("busy busy", sqlite3.SQLITE_READONLY))
    assert not storefile.is_contention(error("database is locked", None))
    assert not storefile.is_contention(error("x", sqlite3.SQLITE_IOERR | 3 << 8))  # an extended I/O error code


def test_a_real_second_writer_is_contention(tmp_path: Path) -> None:
    """The error SQLite raises for a second BEGIN IMMEDIATE while a writer holds the lock is contention."""
    path = tmp_path / "c.sqlite"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (a)")
    holder.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError) as err:
            other.execute("BEGIN IMMEDIATE")
        assert storefile.is_contention(err.value)
    finally:
        other.close()
        holder.close()
