"""What a CI job was given, and the results bound to it.

``ci slurm``, ``ci k8s`` and ``ci github`` write a dispatch record (``pinmatrix-dispatch/1``): per job, the cell
id, the image digest (None for the host runtime) and the smokes it was sent to run. A job's results are
written where the job can write, so they are evidence only of what the job was given: collecting keeps a
record only when its cell, digest and smoke are the job's, drops the others with one line saying how many and
why (task 0 of cell A holding PASS rows for cell D under a made-up digest credits nothing to D), and names the
(cell, smoke) pairs the job was given and left without a kept result: not run.

Every file read here (the record, a task's results) is opened without following a link and without blocking
(a FIFO in its place is refused, not waited on), must be a regular file, and is bounded in size.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from pinmatrix.atomic import atomic_write_text
from pinmatrix.datamodel import Strict
from pinmatrix.errors import PinmatrixError
from pinmatrix.names import Name
from pinmatrix.project.document import load_document
from pinmatrix.results.store import SmokeRecord

SCHEMA = "pinmatrix-dispatch/1"
MAX_RECORD_BYTES = 16 << 20


class DispatchJob(Strict):
    """One job: the cell it runs, the image (by digest) it runs it in, the smokes it was given."""

    cell_id: str = Field(pattern=r"^[0-9a-f]{12}$")
    image_digest: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    smokes: tuple[Name, ...]


class Dispatch(Strict):
    schema_: Literal["pinmatrix-dispatch/1"] = Field(alias="schema")
    source: Literal["slurm", "k8s", "github"]
    id: Name
    jobs: dict[str, DispatchJob]


def dispatch(source: Literal["slurm", "k8s", "github"], run_id: str, jobs: dict[str, DispatchJob]) -> Dispatch:
    return Dispatch.model_validate({"schema": SCHEMA, "source": source, "id": run_id, "jobs": jobs})


def write_dispatch(record: Dispatch, path: Path) -> None:
    atomic_write_text(path, record.model_dump_json(by_alias=True, indent=2) + "\n")


def read_regular(path: Path, limit: int, *, tail: bool = False) -> bytes:
    """The bytes of ``path``: opened without following a link and without blocking, a regular file of at most
    ``limit`` bytes (``tail``: its last ``limit`` bytes, whatever its size), else one line (PinmatrixError)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        why = "a symbolic link" if err.errno == errno.ELOOP else err.strerror
        raise PinmatrixError(f"{path}: cannot read: {why}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PinmatrixError(f"{path}: not a regular file (a FIFO, device or folder is not read)")
        if tail and st.st_size > limit:
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
        elif st.st_size > limit:
            raise PinmatrixError(f"{path}: {st.st_size} bytes, more than the {limit} it may have")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise PinmatrixError(f"{path}: more than the {limit} bytes it may have")
        return data
    finally:
        os.close(fd)


def read_dispatch(path: Path) -> Dispatch:
    raw = read_regular(path, MAX_RECORD_BYTES)
    return load_document(path, Dispatch, what="a dispatch record", content=raw, form="json",
                         max_bytes=MAX_RECORD_BYTES)


@dataclass
class Bound:
    """A job's records split: those it was given, one line for the dropped ones, the smokes left without one."""

    kept: list[SmokeRecord]
    dropped: str | None
    not_run: list[tuple[str, str]]  # (cell id, smoke)


def bind(job_name: str, job: DispatchJob, records: Sequence[SmokeRecord]) -> Bound:
    """The records of ``job`` whose cell, image digest and smoke are the job's; the rest dropped, said in one
    line with how many and why."""
    kept: list[SmokeRecord] = []
    why: dict[str, int] = {}
    for rec in records:
        reason = _mismatch(job, rec)
        if reason is None:
            kept.append(rec)
        else:
            why[reason] = why.get(reason, 0) + 1
    dropped = None
    if why:
        reasons = "; ".join(f"{n} {r}" for r, n in sorted(why.items()))
        dropped = (f"{job_name} (cell {job.cell_id}): dropped {sum(why.values())} record(s) not dispatched to it: "
                   f"{reasons}")
    have = {r.smoke for r in kept}
    return Bound(kept, dropped, [(job.cell_id, s) for s in job.smokes if s not in have])


def _mismatch(job: DispatchJob, rec: SmokeRecord) -> str | None:
    if rec.cell_id != job.cell_id:
        return f"naming cell {rec.cell_id}"
    if rec.image_digest != job.image_digest:
        return f"naming image {rec.image_digest or 'none (host)'}, not {job.image_digest or 'none (host)'}"
    if rec.smoke not in job.smokes:
        return f"for smoke {rec.smoke}, not given"
    return None


def bind_import(record: Dispatch, records: Sequence[SmokeRecord]) -> tuple[list[SmokeRecord], list[str]]:
    """Records from anywhere (``results --import`` of uploaded files) against a whole dispatch: kept when some job
    was given their cell, digest and smoke; one line for the dropped ones, one per (cell, smoke) not run."""
    given = {(j.cell_id, j.image_digest, s) for j in record.jobs.values() for s in j.smokes}
    kept = [r for r in records if (r.cell_id, r.image_digest, r.smoke) in given]
    dropped = len(records) - len(kept)
    lines = [f"dispatch {record.id}: dropped {dropped} record(s) whose cell, image digest and smoke no job of it "
             "was given"] if dropped else []
    have = {(r.cell_id, r.smoke) for r in kept}
    lines += [f"dispatch {record.id}: not run: cell {c} smoke {s}" for c, s in sorted({(c, s) for c, _, s in given}
                                                                                      - have)]
    return kept, lines
