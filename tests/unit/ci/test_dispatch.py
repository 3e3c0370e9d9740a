"""pinmatrix.ci.dispatch: the record read back as written (a FIFO or link in its place refused, never waited on),
bind() per job and bind_import() for uploaded files: a record is kept only when its cell, image digest and smoke a
job was given; `ci github --dispatch` names each cell's digest and resolved smokes; `results --import --dispatch`
drops, with one line, what no job was given and names what was not run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pinmatrix.ci.dispatch import DispatchJob, bind, bind_import, dispatch, read_dispatch, write_dispatch
from pinmatrix.ci.github import github_dispatch
from pinmatrix.cli import main
from pinmatrix.errors import PinmatrixError
from pinmatrix.matrix.selection import load
from pinmatrix.results.store import HostFingerprint, ResultsStore, SmokeRecord

ROOT = Path(__file__).resolve().parents[3]
A, D = "a" * 12, "d" * 12
DIGEST, FORGED = "sha256:" + "1" * 64, "sha256:" + "f" * 64


def rec(cell: str, smoke: str, digest: str | None) -> SmokeRecord:
    return SmokeRecord(cell_id=cell, stack="s", host=HostFingerprint.make(hostname="gpu1"), smoke=smoke, run_id="r",
                       status="pass", failure_class=None, reason="", metrics={}, log_path=None,
                       started_at="2026-12-04T00:00:00+00:00", finished_at="2026-12-04T00:00:01+00:00",
                       duration_s=1.0, known_issue=None, image_digest=digest)


def test_bind_keeps_what_the_job_was_given_and_says_the_rest() -> None:
    job = DispatchJob(cell_id=A, image_digest=DIGEST, smokes=("x", "y"))
    bound = bind("job-1", job, [rec(A, "x", DIGEST), rec(D, "x", FORGED), rec(A, "y", FORGED), rec(A, "z", DIGEST)])
    assert [(r.cell_id, r.smoke) for r in bound.kept] == [(A, "x")]
    assert bound.dropped == (f"job-1 (cell {A}): dropped 3 record(s) not dispatched to it: 1 for smoke z, not given; "
                             f"1 naming cell {D}; 1 naming image {FORGED}, not {DIGEST}")
    assert bound.not_run == [(A, "y")]
    host_job = DispatchJob(cell_id=A, image_digest=None, smokes=("x",))
    assert bind("j", host_job, [rec(A, "x", DIGEST)]).dropped == (
        f"j (cell {A}): dropped 1 record(s) not dispatched to it: 1 naming image {DIGEST}, not none (host)")


def test_the_record_round_trips_and_a_fifo_or_link_in_its_place_is_refused(tmp_path: Path) -> None:
    record = dispatch("github", "r1", {A: DispatchJob(cell_id=A, image_digest=DIGEST, smokes=("x",))})
    write_dispatch(record, tmp_path / "d.json")
    assert read_dispatch(tmp_path / "d.json") == record
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(PinmatrixError, match=r"fifo\.json: not a regular file"):
        read_dispatch(tmp_path / "fifo.json")
    (tmp_path / "link.json").symlink_to(tmp_path / "d.json")
    with pytest.raises(PinmatrixError, match=r"link\.json: cannot read: a symbolic link$"):
        read_dispatch(tmp_path / "link.json")
    (tmp_path / "bad.json").write_text(json.dumps({"schema": "pinmatrix-dispatch/1", "source": "github", "id": "r",
                                                   "jobs": {"j": {"cell_id": "nothex", "smokes": []}}}))
    with pytest.raises(PinmatrixError, match=r"bad\.json: jobs\.j\.cell_id: "):
        read_dispatch(tmp_path / "bad.json")


def test_github_dispatch_names_each_cells_digest_and_resolved_smokes() -> None:
    _, expansion = load(ROOT / "matrix.toml")
    cells = [c for c in expansion.cells if c.stack == "h200"]
    record = github_dispatch(cells, {cells[0].id: f"reg/x@{DIGEST}"}, ROOT / "smoke", "r2")
    assert record.source == "github" and sorted(record.jobs) == sorted(c.id for c in cells)
    assert record.jobs[cells[0].id].image_digest == DIGEST and record.jobs[cells[1].id].image_digest is None
    assert record.jobs[cells[0].id].smokes and all("*" not in s for s in record.jobs[cells[0].id].smokes)


def test_results_import_with_a_dispatch_keeps_only_what_was_dispatched(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    record = dispatch("github", "r3", {A: DispatchJob(cell_id=A, image_digest=DIGEST, smokes=("x", "y"))})
    write_dispatch(record, tmp_path / "d.json")
    rows = [rec(A, "x", DIGEST).to_dict(), rec(D, "x", FORGED).to_dict(), rec(D, "y", FORGED).to_dict()]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    assert main(["results", "--results", str(tmp_path / "r.sqlite"), "--import", str(tmp_path / "rows.json"),
                 "--dispatch", str(tmp_path / "d.json")]) == 0
    out, err = capsys.readouterr()
    assert "imported 1 record(s)" in out
    assert err.splitlines() == [
        f"{tmp_path / 'rows.json'}: dispatch r3: dropped 2 record(s) whose cell, image digest and smoke no job of it "
        "was given", f"{tmp_path / 'rows.json'}: dispatch r3: not run: cell {A} smoke y"]
    assert [(r.cell_id, r.smoke) for r in ResultsStore(tmp_path / "r.sqlite").query()] == [(A, "x")]
    kept, lines = bind_import(record, [rec(A, "y", DIGEST)])
    assert len(kept) == 1 and lines == [f"dispatch r3: not run: cell {A} smoke x"]


def test_read_regular_bounds_whole_files_and_reads_the_tail_of_long_ones(tmp_path: Path) -> None:
    from pinmatrix.ci.dispatch import read_regular

    path = tmp_path / "slurm.out"
    path.write_bytes(b"0123456789")
    assert read_regular(path, 10) == b"0123456789"
    with pytest.raises(PinmatrixError, match=r"slurm\.out: 10 bytes, more than the 4 it may have$"):
        read_regular(path, 4)  # not the tail unless asked
    assert read_regular(path, 4, tail=True) == b"6789"
    assert read_regular(path, 10, tail=True) == b"0123456789"
    with pytest.raises(PinmatrixError, match=r"absent: cannot read: No such file or directory$"):
        read_regular(tmp_path / "absent", 4)
    # a file whose size says 0 and that holds more (a /proc file, or one growing while read) is cut at the bound
    with pytest.raises(PinmatrixError, match=r"^/proc/self/status: more than the 16 bytes it may have$"):
        read_regular(Path("/proc/self/status"), 16)


def test_the_record_is_written_for_people_to_read_and_a_clean_job_drops_nothing(tmp_path: Path) -> None:
    record = dispatch("k8s", "r4", {"r4/x": DispatchJob(cell_id=A, image_digest=None, smokes=("x",))})
    write_dispatch(record, tmp_path / "d.json")
    text = (tmp_path / "d.json").read_text()
    assert text.startswith('{\n  "schema": "pinmatrix-dispatch/1",\n') and text.endswith("}\n")
    bound = bind("r4/x", record.jobs["r4/x"], [rec(A, "x", None)])
    assert bound.dropped is None and bound.not_run == [] and len(bound.kept) == 1
    job = DispatchJob(cell_id=A, image_digest=DIGEST, smokes=("x",))
    assert bind("j", job, [rec(A, "x", None)]).dropped == (
        f"j (cell {A}): dropped 1 record(s) not dispatched to it: 1 naming image none (host), not {DIGEST}")
