"""Bisect probes are their own kind of record (issue 45): a version search's probe of an axis value that is no cell
of the matrix, or of a cell that is, never becomes a cell's result: not in `results`, the report's status, JUnit,
`report --fail-on`, promotion, nor a smoke's "already recorded"; the bisect search still finds its probes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from store_data import HOST, rec

from pinmatrix.cli import main
from pinmatrix.report.model import build_report
from pinmatrix.results.store import PROBE_RUN_PREFIX, ResultsStore

CELL = "eabeea643274"  # demo[six=1.16.0,idna=3.7]: a cell of the shipped matrix
PROBED = "0123456789ab"  # an axis value a version search tried: no cell of the matrix


@pytest.fixture
def store(tmp_path: Path) -> ResultsStore:
    store = ResultsStore(tmp_path / "results.sqlite")
    store.record(rec("host-probe", cell=CELL, run="r1", stack="demo"))
    for cell in (PROBED, CELL):  # the failing side of a version bisect, on and off the matrix
        store.record(rec("host-probe", cell=cell, run=f"{PROBE_RUN_PREFIX}20261204T170000Z-abcdef.001",
                         status="fail", stack="demo", finished_at="2026-11-30T20:00:01+00:00"))
    return store


def test_readers_get_the_cells_own_runs_and_bisect_its_probes(store: ResultsStore) -> None:
    assert [(r.cell_id, r.run_id) for r in store.query()] == [(CELL, "r1")]
    assert [r.cell_id for r in store.query(latest_only=True)] == [CELL]
    assert [r.run_id for r in store.query(cell_id=CELL, probe_params={})] == ["r1"]  # what promotion reads
    probes = store.query(probes=True, probe_params={})
    assert [(r.cell_id, r.is_probe) for r in probes] == [(CELL, False), (PROBED, True), (CELL, True)]
    # a smoke of the cell is "already recorded" by its own run only
    assert store.has_result(CELL, HOST.id, "host-probe") and not store.has_result(PROBED, HOST.id, "host-probe")


def test_a_probe_is_never_a_cells_verdict_in_the_report(store: ResultsStore) -> None:
    report = build_report(store.query(probes=True), [], stack="demo")
    (stack,) = report.stacks
    assert [(c.id, c.status) for c in stack.cells] == [(CELL, "pass")]


def test_report_fail_on_junit_and_results_ignore_probes(store: ResultsStore, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report"
    assert main(["report", "--results", str(store.path), "--out", str(out), "--stack", "demo",
                 "--fail-on", "fail"]) == 0
    junit = ET.parse(out / "junit.xml").getroot()
    assert junit.get("failures") == "0" and PROBED not in (out / "junit.xml").read_text()
    assert "not in matrix" not in (out / "summary.md").read_text()
    capsys.readouterr()
    assert main(["results", "--results", str(store.path), "--json"]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == ["r1"]
