"""The results store's file, as SQLite sees it: what is there before anything is written, read connections
that never wait behind a writer, and who holds the write lock when a writer has to wait.

- ``inspect_file``: an empty file, a file that is not SQLite, or a folder at the store's path is named in
  one line and left exactly as it is (never reset or overwritten).
- ``connect_read``: a snapshot read (WAL) with a short busy timeout, opened ``mode=ro``; where the store
  cannot be opened so (a read-only folder: SQLite cannot make the WAL index there), ``immutable=1``.
- ``begin_write``: ``BEGIN IMMEDIATE`` in short tries; while another process holds the lock, one line says
  who (the owner file a pinmatrix writer leaves beside the store: pid, command, since when; else the pid
  the kernel's /proc/locks names), and the wait ends with an error naming that holder.
- ``quick_check``: SQLite's ``PRAGMA quick_check`` as one line.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from pinmatrix.atomic import process_alive
from pinmatrix.errors import PinmatrixError

SQLITE_HEADER = b"SQLite format 3\x00"
READ_BUSY_MS = 500


class ResultsError(PinmatrixError):
    """The results store is unreadable, or an imported row is malformed."""


def _primary_code(err: sqlite3.Error) -> int | None:
    """SQLite's primary result code of ``err`` (extended codes carry it in their low byte), if it has one."""
    code = getattr(err, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def is_contention(err: sqlite3.Error) -> bool:
    """Whether SQLite refused because another connection holds a lock (SQLITE_BUSY or SQLITE_LOCKED, extended
    codes included), which waiting can cure, rather than because the file or the statement is wrong."""
    return _primary_code(err) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _error(message: str) -> Exception:
    return ResultsError(message)


def inspect_file(path: Path) -> bool:
    """Whether a store exists at ``path``; raises when something that is not an SQLite database is there."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    except OSError as err:
        raise _error(f"{path}: cannot read the results store: {err.strerror}") from None
    if path.is_dir():
        raise _error(f"{path}: is a folder, not a results store")
    if st.st_size == 0:
        raise _error(f"{path}: is an empty file, not a results store; left as it is (remove it, or pass "
                     "another --results)")
    try:
        with path.open("rb") as fh:
            head = fh.read(len(SQLITE_HEADER))
    except OSError as err:
        raise _error(f"{path}: cannot read the results store: {err.strerror}") from None
    if head != SQLITE_HEADER:
        raise _error(f"{path}: is not an SQLite database (it starts with {head[:8]!r}), so not a results "
                     "store; left as it is")
    return True


def create(path: Path, init: Callable[[sqlite3.Connection], None]) -> None:
    """Make a new store at ``path`` atomically: built beside it under a temporary name (WAL mode, ``init``
    run in one transaction), then hard-linked into place, so another process never sees a half-made file.
    When a store appeared there meanwhile, that one is kept."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.new")
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("BEGIN IMMEDIATE")
            init(conn)
            conn.execute("COMMIT")
        finally:
            conn.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError:  # a filesystem without hard links
            if not path.exists():
                os.replace(tmp, path)
    except sqlite3.Error as err:
        raise _error(f"{path}: cannot create the results store: {err}") from None
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
            leftover.unlink(missing_ok=True)


def _uri(path: Path, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"file:{quote(str(path.resolve()))}?{query}"


def connect_read(path: Path, busy_ms: int = READ_BUSY_MS) -> sqlite3.Connection:
    """A read-only connection whose reads see the last committed state without waiting for a writer."""
    last: sqlite3.Error | None = None
    for params in ({"mode": "ro"}, {"mode": "ro", "immutable": "1"}):
        try:
            conn = sqlite3.connect(_uri(path, **params), uri=True, timeout=busy_ms / 1000, isolation_level=None)
        except sqlite3.Error as err:
            last = err
            continue
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the WAL index (or fails)
            return conn
        except sqlite3.OperationalError as err:
            conn.close()
            last = err
            if _primary_code(err) not in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN):
                break  # only a store this process may not write (WAL index) or open is read as immutable
        except sqlite3.DatabaseError as err:
            conn.close()
            raise _error(f"{path}: the results store is unreadable: {err}") from None
    raise _error(f"{path}: cannot open the results store for reading: {last}")


def quick_check(conn: sqlite3.Connection, path: Path) -> None:
    try:
        rows = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall()]
    except sqlite3.DatabaseError as err:
        raise _error(f"{path}: the results store is damaged ({err}); left as it is: restore it from a copy, or "
                     "pass another --results") from None
    if rows != ["ok"]:
        raise _error(f"{path}: the results store fails SQLite's quick_check ({' '.join(rows[0].split())[:160]}); "
                     "left as it is: restore "
                     "it from a copy, or pass another --results")


# ------------------------------------------------------------------------------------------ the writer
def owner_path(path: Path) -> Path:
    return path.with_name(path.name + ".writer")


def _write_owner(path: Path) -> None:
    record = {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv)[:300],
              "since": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    target = owner_path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, target)
    except OSError:
        pass  # telling who writes is a courtesy: never a reason not to write


def clear_owner(path: Path) -> None:
    target = owner_path(path)
    try:
        if json.loads(target.read_text(encoding="utf-8")).get("pid") == os.getpid():
            target.unlink()
    except (OSError, ValueError, AttributeError):
        pass




def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return " ".join(p.decode("utf-8", "replace") for p in raw.split(b"\0") if p)[:200]


def _lock_holders(path: Path) -> list[int]:
    """Pids that hold a POSIX write lock on the store or its WAL index (/proc/locks), other than this one."""
    inodes = set()
    for f in (path, path.with_name(path.name + "-shm"), path.with_name(path.name + "-wal")):
        try:
            st = f.stat()
            inodes.add((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
        except OSError:
            continue
    pids: list[int] = []
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] != "POSIX" or parts[3] != "WRITE":
            continue
        try:
            pid = int(parts[4])
            major, minor, ino = parts[5].split(":")
            key = (int(major, 16), int(minor, 16), int(ino))
        except ValueError:
            continue
        if key in inodes and pid != os.getpid() and pid not in pids:
            pids.append(pid)
    return pids


def describe_holder(path: Path) -> str:
    """Who holds the store's write lock, in words."""
    try:
        owner = json.loads(owner_path(path).read_text(encoding="utf-8"))
        pid = int(owner["pid"])
        if owner.get("host") != socket.gethostname() or process_alive(pid):
            return f"pid {pid} on {owner.get('host')} ({owner.get('command')}) since {owner.get('since')}"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    holders = _lock_holders(path)
    if holders:
        return ", ".join(f"pid {pid} ({_cmdline(pid) or 'command unknown'})" for pid in holders)
    return "another process (it left no owner file: not a pinmatrix writer, e.g. an sqlite3 shell)"


def begin_write(conn: sqlite3.Connection, path: Path, *, wait_s: float, on_wait: Callable[[str], None]) -> None:
    """``BEGIN IMMEDIATE``, waiting at most ``wait_s`` for another writer and saying once whom it waits for.
    Leaves the owner file while this connection holds the lock (``clear_owner`` after COMMIT/ROLLBACK)."""
    conn.execute("PRAGMA busy_timeout = 200")
    deadline = time.monotonic() + wait_s
    told = False
    while True:
        try:
            conn.execute("BEGIN IMMEDIATE")
            break
        except sqlite3.OperationalError as err:
            if not is_contention(err):
                raise
            holder = describe_holder(path)
            if time.monotonic() >= deadline:
                raise _error(f"{path}: gave up after {wait_s:g} s waiting for the write lock, held by {holder}") from None
            if not told:
                on_wait(f"{path}: waiting for the write lock, held by {holder}")
                told = True
    _write_owner(path)
