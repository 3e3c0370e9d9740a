"""The results store: one SQLite file holding every smoke result, keyed by cell x host x smoke x run.

SQLite in WAL mode: two processes may record at once (each record is one short ``BEGIN IMMEDIATE``
transaction; a writer that has to wait says which process holds the lock), and a process killed with
SIGKILL mid-run loses at most the record it was writing, never the file. Readers open the file read-only
and read a snapshot, so they never wait behind a writer. An existing store is checked (quick_check,
schema) before this process first writes to it; an empty or foreign file is named, never reset
(storefile.py has the file-level rules).
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pinmatrix.atomic import atomic_write_text
from pinmatrix.hostprobe import HostFingerprint as HostFingerprint  # where the results' host record lives
from pinmatrix.paths import RESULTS_FILE
from pinmatrix.results import storefile
from pinmatrix.results.storefile import ResultsError
from pinmatrix.statuses import STATUSES

DEFAULT_PATH = RESULTS_FILE
SCHEMA_VERSION = 1
PROBE_RUN_PREFIX = "bisect-"
"""The run ids of bisect probes (bisect/settings.py). A probe is a point of a search (a parameter value, or an
axis value that may be no cell of the matrix), never a cell's verdict: readers get the cells' own runs unless they
ask for probes (``query(probes=True)``), so status, promotion, JUnit and ``--fail-on`` never count one."""
_NO_PROBES = f"r.params = '{{}}' AND r.run_id NOT LIKE '{PROBE_RUN_PREFIX}%'"


def _say_on_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class SmokeRecord:
    cell_id: str
    stack: str
    host: HostFingerprint
    smoke: str
    run_id: str
    status: str  # pass | fail | skip | xfail | xpass | degraded
    failure_class: str | None
    reason: str
    metrics: dict[str, float | int | str]
    log_path: str | None
    started_at: str
    finished_at: str
    duration_s: float
    known_issue: str | None  # id of the known issue that made it xfail/xpass
    image_digest: str | None  # sha256:... when run inside an image, else None
    environment: dict[str, Any] = field(default_factory=dict)  # what the smoke saw (driver, versions, ...)
    params: dict[str, Any] = field(default_factory=dict)  # a bisect probe's parameter values; {} for a plain run

    @property
    def is_probe(self) -> bool:
        """Recorded by a bisect search (PROBE_RUN_PREFIX): shown in the bisect report, not the cell's verdict."""
        return bool(self.params) or self.run_id.startswith(PROBE_RUN_PREFIX)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ResultsError(f"smoke {self.smoke!r}: status {self.status!r} is not one of {', '.join(STATUSES)}")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["host"] = self.host.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SmokeRecord:
        try:
            return cls(
                cell_id=str(data["cell_id"]),
                stack=str(data["stack"]),
                host=HostFingerprint.from_dict(data["host"]),
                smoke=str(data["smoke"]),
                run_id=str(data["run_id"]),
                status=str(data["status"]),
                failure_class=data.get("failure_class"),
                reason=str(data.get("reason") or ""),
                metrics=dict(data.get("metrics") or {}),
                log_path=data.get("log_path"),
                started_at=str(data["started_at"]),
                finished_at=str(data["finished_at"]),
                duration_s=float(data.get("duration_s") or 0.0),
                known_issue=data.get("known_issue"),
                image_digest=data.get("image_digest"),
                environment=dict(data.get("environment") or {}),
                params=dict(data.get("params") or {}),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ResultsError(f"malformed result row: missing or bad field {err}") from None


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS hosts (
    id TEXT PRIMARY KEY, hostname TEXT NOT NULL, gpu_name TEXT, gpu_count INTEGER NOT NULL,
    driver TEXT, capability TEXT, cuda_driver_api TEXT
);
CREATE TABLE IF NOT EXISTS results (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    cell_id TEXT NOT NULL, stack TEXT NOT NULL, host_id TEXT NOT NULL, hostname TEXT NOT NULL,
    smoke TEXT NOT NULL, run_id TEXT NOT NULL,
    status TEXT NOT NULL, failure_class TEXT, reason TEXT NOT NULL, metrics TEXT NOT NULL,
    log_path TEXT, started_at TEXT NOT NULL, finished_at TEXT NOT NULL, duration_s REAL NOT NULL,
    known_issue TEXT, image_digest TEXT, environment TEXT NOT NULL DEFAULT '{}', params TEXT NOT NULL DEFAULT '{}',
    UNIQUE (cell_id, host_id, smoke, run_id)
);
CREATE INDEX IF NOT EXISTS results_key ON results (cell_id, host_id, smoke);
CREATE INDEX IF NOT EXISTS results_stack ON results (stack);
"""

_COLUMNS = (
    "cell_id, stack, host_id, hostname, smoke, run_id, status, failure_class, reason, metrics, log_path, "
    "started_at, finished_at, duration_s, known_issue, image_digest, environment, params"
)


def _plain_params_view(conn: sqlite3.Connection) -> None:
    """A store written before bisect probes (no ``params`` column, migrated on its next write): read its runs
    as plain ones through a temporary view that shadows the table for this connection only."""
    columns = {row[1] for row in conn.execute("PRAGMA main.table_info(results)")}
    if columns and "params" not in columns:
        conn.execute("CREATE TEMP VIEW results AS SELECT *, '{}' AS params FROM main.results")


def params_key(params: Mapping[str, Any] | None) -> str:
    """The stored form of a probe's parameters: canonical JSON, '{}' for a plain run."""
    return json.dumps(dict(params or {}), sort_keys=True, separators=(",", ":"))


class ResultsStore:
    """SQLite-backed store. Open it per process; each call opens a short-lived connection."""

    BUSY_TIMEOUT_MS = 30_000
    RETRIES = 20
    WRITE_WAIT_S = 120.0  # how long a writer waits for another one (saying for whom) before it gives up

    def __init__(self, path: Path = DEFAULT_PATH, *, on_wait: Callable[[str], None] | None = None) -> None:
        """Open the store at ``path``; a store that does not exist yet is made. An existing one is not
        written to until a record is (readers of a store never write, so they never wait for a writer);
        an empty or foreign file at ``path`` is named and left alone (storefile.py)."""
        self.path = Path(path)
        self.on_wait = on_wait or _say_on_stderr
        self._ready = False
        if not storefile.inspect_file(self.path):
            storefile.create(self.path, self._init_schema)

    def check(self) -> None:
        """SQLite's quick_check, and that the file is a pinmatrix results store of a schema this pinmatrix
        knows. Read-only; raises ResultsError with one line naming the file."""
        if not storefile.inspect_file(self.path):
            raise ResultsError(f"{self.path}: no results store")
        conn = storefile.connect_read(self.path)
        try:
            storefile.quick_check(conn, self.path)
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            missing = sorted({"meta", "hosts", "results"} - tables)
            row = None if missing else conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as err:
            raise ResultsError(f"{self.path}: the results store is unreadable: {err}") from None
        finally:
            conn.close()
        if missing or row is None:
            what = f"no {', '.join(missing)} table" if missing else "no schema_version"
            raise ResultsError(f"{self.path}: an SQLite database, but not a pinmatrix results store ({what}); "
                               "left as it is")
        if not str(row[0]).isdigit() or int(row[0]) > SCHEMA_VERSION:
            raise ResultsError(f"{self.path}: results store schema {row[0]!r} is newer than this pinmatrix "
                               f"knows ({SCHEMA_VERSION}); left as it is")

    def prepare_write(self) -> None:
        """Before the first write of this process: ``check`` an existing store, then make or migrate its
        tables under the write lock. `pinmatrix smoke` calls it before running anything."""
        if self._ready:
            return
        if storefile.inspect_file(self.path):
            self.check()

        def init() -> None:
            with self._write_transaction() as conn:
                self._init_schema(conn)

        self._retry(init)
        self._ready = True

    # -- connection handling -------------------------------------------------------------------
    @contextmanager
    def _write_transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the store's write lock: committed when the block ends, rolled back when it
        raises; the lock's owner record cleared either way."""
        with self._connect() as conn:
            storefile.begin_write(conn, self.path, wait_s=self.WRITE_WAIT_S, on_wait=self.on_wait)
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            finally:
                storefile.clear_owner(self.path)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            conn = sqlite3.connect(self.path, timeout=self.BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        except sqlite3.Error as err:
            raise ResultsError(f"{self.path}: cannot open results store: {err}") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {self.BUSY_TIMEOUT_MS}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":  # e.g. a filesystem without shared memory
                conn.execute("PRAGMA journal_mode = DELETE")
            conn.execute("PRAGMA synchronous = NORMAL")
            yield conn
        except sqlite3.DatabaseError as err:
            if storefile.is_contention(err):
                raise
            raise ResultsError(f"{self.path}: results store is unreadable: {err}") from None
        finally:
            conn.close()

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A snapshot read: never waits behind a writer (storefile.connect_read)."""
        conn = storefile.connect_read(self.path)
        try:
            _plain_params_view(conn)
            yield conn
        except sqlite3.DatabaseError as err:
            if storefile.is_contention(err):
                raise
            if "no such table" in str(err):
                raise ResultsError(f"{self.path}: an SQLite database, but not a pinmatrix results store ({err}); "
                                   "left as it is") from None
            raise ResultsError(f"{self.path}: results store is unreadable: {err}") from None
        finally:
            conn.close()

    def _retry(self, fn: Any) -> Any:
        """``fn()``, waited out while SQLite says locked/busy (0.05 s doubling to 1 s, RETRIES attempts)."""
        delay, attempt = 0.05, 1
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as err:
                if not storefile.is_contention(err) or attempt >= self.RETRIES:
                    raise ResultsError(f"{self.path}: {err}") from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
            attempt += 1

    def _init_schema(self, conn: sqlite3.Connection) -> None:
        for statement in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
            conn.execute(statement)  # each IF NOT EXISTS statement is idempotent and atomic
        if "params" not in {row[1] for row in conn.execute("PRAGMA table_info(results)")}:
            try:  # a store written before bisect probes existed: its runs had no parameters
                conn.execute("ALTER TABLE results ADD COLUMN params TEXT NOT NULL DEFAULT '{}'")
            except sqlite3.OperationalError as err:
                if "duplicate column" not in str(err):  # another process added it first
                    raise
        conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))

    # -- writing ---------------------------------------------------------------------------------
    def record(self, rec: SmokeRecord) -> None:
        self.record_many([rec])

    def record_many(self, recs: list[SmokeRecord]) -> int:
        """Write records in one transaction. A record with the same (cell, host, smoke, run) replaces
        the earlier one (a rerun of the same run id)."""
        if not recs:
            return 0

        self.prepare_write()

        def write() -> int:
            with self._write_transaction() as conn:
                for rec in recs:
                    self._insert(conn, rec)
            return len(recs)

        return int(self._retry(write))

    @staticmethod
    def _insert(conn: sqlite3.Connection, rec: SmokeRecord) -> None:
        h = rec.host
        conn.execute(
            "INSERT OR REPLACE INTO hosts (id, hostname, gpu_name, gpu_count, driver, capability, cuda_driver_api)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (h.id, h.hostname, h.gpu_name, h.gpu_count, h.driver, h.capability, h.cuda_driver_api),
        )
        conn.execute(
            "DELETE FROM results WHERE cell_id = ? AND host_id = ? AND smoke = ? AND run_id = ?",
            (rec.cell_id, h.id, rec.smoke, rec.run_id),
        )
        conn.execute(
            f"INSERT INTO results ({_COLUMNS}) VALUES ({', '.join('?' * 18)})",
            (
                rec.cell_id, rec.stack, h.id, h.hostname, rec.smoke, rec.run_id, rec.status, rec.failure_class,
                rec.reason, json.dumps(rec.metrics, sort_keys=True), rec.log_path, rec.started_at,
                rec.finished_at, float(rec.duration_s), rec.known_issue, rec.image_digest,
                json.dumps(rec.environment, sort_keys=True, default=str), params_key(rec.params),
            ),
        )

    # -- reading ---------------------------------------------------------------------------------
    def query(
        self,
        *,
        cell_id: str | None = None,
        stack: str | None = None,
        host_id: str | None = None,
        smoke: str | None = None,
        status: str | None = None,
        latest_only: bool = False,
        run_id: str | None = None,
        probe_params: Mapping[str, Any] | None = None,
        probes: bool = False,
    ) -> list[SmokeRecord]:
        """Records matching every given filter, in the order written. ``latest_only`` keeps, per
        (cell, host, smoke), the record that finished last (before the status filter applies). Bisect probes
        only with ``probes`` (the bisect search's own lookups) or when ``probe_params`` names a probe's values."""
        probes = probes or bool(probe_params)
        where: list[str] = [] if probes else [_NO_PROBES]
        params: list[Any] = []
        for column, value in (("cell_id", cell_id), ("stack", stack), ("host_id", host_id),
                              ("smoke", smoke), ("run_id", run_id)):
            if value is not None:
                where.append(f"r.{column} = ?")
                params.append(value)
        if latest_only:  # the record that FINISHED last (julianday reads both '...Z' and '+00:00'); ties: written last
            where.append(
                "r.seq = (SELECT l.seq FROM results l WHERE l.cell_id = r.cell_id"
                " AND l.host_id = r.host_id AND l.smoke = r.smoke AND l.params = r.params"
                + ("" if probes else f" AND l.run_id NOT LIKE '{PROBE_RUN_PREFIX}%'")
                + " ORDER BY julianday(l.finished_at) DESC, l.seq DESC LIMIT 1)"
            )
        if probe_params is not None:  # one bisect probe's parameters ({}: plain runs only)
            where.append("r.params = ?")
            params.append(params_key(probe_params))
        if status is not None:
            where.append("r.status = ?")
            params.append(status)
        sql = (
            f"SELECT r.{_COLUMNS.replace(', ', ', r.')}, h.gpu_name, h.gpu_count, h.driver, h.capability,"
            " h.cuda_driver_api FROM results r LEFT JOIN hosts h ON h.id = r.host_id"
        )
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY r.seq"

        def read() -> list[SmokeRecord]:
            with self._read() as conn:
                return [self._row_to_record(row) for row in conn.execute(sql, params)]

        return list(self._retry(read))

    @staticmethod
    def _row_to_record(row: tuple[Any, ...]) -> SmokeRecord:
        (cell_id, stack, host_id, hostname, smoke, run_id, status, failure_class, reason, metrics, log_path,
         started_at, finished_at, duration_s, known_issue, image_digest, environment, params,
         gpu_name, gpu_count, driver, capability, cuda_driver_api) = row
        host = HostFingerprint(
            id=host_id, hostname=hostname, gpu_name=gpu_name, gpu_count=int(gpu_count or 0), driver=driver,
            capability=capability, cuda_driver_api=cuda_driver_api,
        )
        return SmokeRecord(
            cell_id=cell_id, stack=stack, host=host, smoke=smoke, run_id=run_id, status=status,
            failure_class=failure_class, reason=reason, metrics=json.loads(metrics), log_path=log_path,
            started_at=started_at, finished_at=finished_at, duration_s=float(duration_s),
            known_issue=known_issue, image_digest=image_digest, environment=json.loads(environment or "{}"),
            params=json.loads(params or "{}"),
        )

    def has_result(self, cell_id: str, host_id: str, smoke: str, image_digest: str | None = None,
                   params: Mapping[str, Any] | None = None) -> bool:
        """Whether ``smoke`` is recorded for this cell and host ON THIS IMAGE: results follow the image digest
        they ran on (None = run outside any image, on the host), so a rebuilt or pushed image is smoked again.
        Without ``params``, a run of the cell itself: a bisect probe that happened to run it does not count."""
        def read() -> bool:
            with self._read() as conn:
                row = conn.execute(
                    "SELECT 1 FROM results r WHERE r.cell_id = ? AND r.host_id = ? AND r.smoke = ?"
                    f" AND r.image_digest IS ? AND r.params = ?{'' if params else ' AND ' + _NO_PROBES} LIMIT 1",
                    (cell_id, host_id, smoke, image_digest, params_key(params)),
                ).fetchone()
                return row is not None

        return bool(self._retry(read))

    def hosts(self) -> list[HostFingerprint]:
        """Every host a result was recorded on (its driver, capability, GPUs), by id."""
        def read() -> list[HostFingerprint]:
            with self._read() as conn:
                return [HostFingerprint(id=r[0], hostname=r[1], gpu_name=r[2], gpu_count=int(r[3] or 0), driver=r[4],
                                        capability=r[5], cuda_driver_api=r[6])
                        for r in conn.execute("SELECT id, hostname, gpu_name, gpu_count, driver, capability, "
                                              "cuda_driver_api FROM hosts ORDER BY id")]

        return list(self._retry(read))

    # -- exchange ----------------------------------------------------------------------------------
    def import_json(self, rows: list[dict[str, Any]]) -> int:
        """Import exported rows (e.g. results/h200/*.json); returns how many were written."""
        if not isinstance(rows, list):
            raise ResultsError("results import: expected a JSON list of result rows")
        recs = [SmokeRecord.from_dict(row) for row in rows]
        return self.record_many(recs)


def write_json_atomic(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
