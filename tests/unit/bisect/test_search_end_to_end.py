"""pinmatrix bisect, for real: the search core (with skips, against a brute-force oracle), a parameter bisect over
a CPU smoke with a threshold whose probes also crash the interpreter and hang, resume after --max-probes and
after SIGINT without running any probe twice, points that cannot be probed, and known-issue boundaries
confirmed or moved. Version bisects over real releases (uv venvs, images): tests/integration/
test_search_in_venvs_and_images.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from bisect_projects import ROOT, SMOKE_DIR, cli_json, project_with_smokes
from hypothesis import given, settings
from hypothesis import strategies as st

from pinmatrix.bisect.search import ProbeLimit, bisect
from pinmatrix.cli import main
from pinmatrix.project.catalogue import SmokeError, load_catalogue
from pinmatrix.results.store import ResultsStore, params_key


# ------------------------------------------------------------------------------------------ the search core
@settings(max_examples=300, deadline=None)
@given(n=st.integers(2, 300), data=st.data())
def test_search_finds_the_boundary_or_names_the_skipped_points_it_may_be_at(n: int, data: st.DataObject) -> None:
    """Monotone verdicts with the change at ``b`` (pass below, fail from b); some points cannot be probed."""
    b = data.draw(st.integers(1, n - 1), label="first failing index")
    skip = set(data.draw(st.lists(st.integers(1, max(1, n - 2)), max_size=4 if n > 2 else 0), label="unprobe-able"))
    calls: list[int] = []

    def probe(i: int) -> str:
        calls.append(i)
        return "skip" if i in skip else ("pass" if i < b else "fail")

    res = bisect(n, probe, high_first=data.draw(st.booleans()), max_skips=10)
    assert len(calls) == len(set(calls)), "a point was probed twice"
    assert len(calls) <= 2 + (n - 1).bit_length() + len(skip) + 1
    assert res.reference == "pass"
    if res.outcome == "change":
        assert (res.before, res.after) == (b - 1, b)
    else:  # the change hides among skipped points: the answer names them all, and b is among the candidates
        assert res.outcome == "ambiguous"
        assert res.untested and set(res.untested) <= skip
        assert b in set(res.untested) | {res.after}
        assert res.before is not None and res.before < b <= res.after


def test_search_without_change_skips_and_budget() -> None:
    assert bisect(10, lambda i: "pass").outcome == "no-change"
    res = bisect(10, lambda i: "fail", high_first=True)
    assert (res.outcome, res.reference) == ("no-change", "fail")
    assert bisect(10, lambda i: "skip").outcome == "cannot-probe"
    # the low end cannot be probed: it moves inward, as git bisect skip does
    res = bisect(10, lambda i: "skip" if i < 2 else ("pass" if i < 7 else "fail"))
    assert (res.outcome, res.first, res.before, res.after) == ("change", 2, 6, 7)
    # too many unprobe-able points: give up and say so
    res = bisect(100, lambda i: "pass" if i == 0 else ("fail" if i == 99 else "skip"), max_skips=3)
    assert res.outcome == "cannot-probe" and "more than 3" in res.note
    count = 0

    def limited(i: int) -> str:
        nonlocal count
        count += 1
        if count > 3:
            raise ProbeLimit("budget")
        return "pass" if i < 50 else "fail"

    assert bisect(100, limited).outcome == "stopped"


# ------------------------------------------------------------------------------ the parameter search (CPU)
def _param(tmp: Path, *extra: str, results: Path | None = None) -> list[str]:
    return ["bisect", "param", "cpu-threshold", "--param", "n", "--smoke-dir", str(SMOKE_DIR),
            "--results", str(results or tmp / "r.sqlite"), "--logs", str(tmp / "logs"), *extra]


def _store_probes(path: Path, smoke: str) -> list[tuple[str, str, str | None]]:
    """(params, status, class) of every recorded probe of ``smoke``."""
    with sqlite3.connect(path) as conn:
        return list(conn.execute("SELECT params, status, failure_class FROM results WHERE smoke = ? ORDER BY seq",
                                 (smoke,)))


def test_param_bisect_finds_threshold_through_a_crash_and_a_hang(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    rep = cli_json(capsys, _param(tmp_path, "--timeout", "3", "--json"))
    assert rep["outcome"] == "change"
    assert (rep["last_pass"], rep["first_fail"], rep["failure_class"]) == (612, 613, "over-capacity")
    assert rep["answer"].startswith("smallest failing n = 613")
    # the probe at n=1000 hung (killed after its timeout), the one at n=750 segfaulted: both recorded, neither
    # stopped the run, and the search went on past them
    by_value = {p["value"]: p for p in rep["probes"]}
    assert (by_value[1000]["status"], by_value[1000]["failure_class"]) == ("fail", "timeout")
    assert (by_value[750]["status"], by_value[750]["failure_class"]) == ("fail", "crash")
    assert "SIGSEGV" in by_value[750]["reason"]
    assert rep["failing_classes"]["crash"] == [750] and rep["failing_classes"]["timeout"] == [1000]
    assert [c["text"] for c in rep["crossings"]] == ["items n reach capacity (613) at n=613 (612 -> 613)"]
    assert rep["held_fixed"] == {"capacity": 613, "crash_from": 700, "crash_to": 800, "hang_from": 900}
    assert len(rep["probes"]) <= 2 + 10 and rep["probes_run"] == len(rep["probes"])
    # every probe is in the store with its parameter values, one record each
    rows = _store_probes(tmp_path / "r.sqlite", "cpu-threshold")
    assert len(rows) == len(rep["probes"])
    stored = {json.loads(p)["n"]: (s, c) for p, s, c in rows}
    assert stored[1000] == ("fail", "timeout") and stored[750] == ("fail", "crash")
    assert stored[613][1] == "over-capacity"
    assert all(json.loads(p)["capacity"] == 613 for p, _, _ in rows)
    # a plain `pinmatrix smoke` of the same cell is not taken for a probe, nor a probe for it
    store = ResultsStore(tmp_path / "r.sqlite")
    assert store.query(smoke="cpu-threshold") == []  # probes only: no cell's own result
    host = store.query(smoke="cpu-threshold", probes=True)[0].host.id
    assert not store.has_result("host", host, "cpu-threshold")
    assert store.has_result("host", host, "cpu-threshold", params=json.loads(rows[0][0]))
    # the human summary and the report line
    assert main(_param(tmp_path, "--timeout", "3")) == 0
    out = capsys.readouterr().out
    assert "other failures seen: crash at n=750, timeout at n=1000" in out
    line = [ln for ln in out.splitlines() if ln.startswith("report: ")]
    assert len(line) == 1 and "smallest failing n = 613" in line[0] and "(0 run, 12 reused" in line[0]


def test_fixed_dimension_and_a_range_without_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = cli_json(capsys, _param(tmp_path, "--range", "0:699", "--fix", "capacity=100", "--json"))
    assert (rep["last_pass"], rep["first_fail"]) == (99, 100)
    assert rep["held_fixed"]["capacity"] == 100
    rep = cli_json(capsys, _param(tmp_path, "--range", "0:90", "--fix", "capacity=100", "--json"))
    assert rep["outcome"] == "no-change" and rep["answer"] == "no failure: cpu-threshold passes from n=0 up to n=90"
    assert len(rep["probes"]) == 2  # both ends pass: nothing to search


def test_resume_after_max_probes_and_after_sigint_runs_no_probe_twice(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "r.sqlite"
    first = cli_json(capsys, _param(tmp_path, "--range", "0:899", "--max-probes", "3", "--json"), code=1)
    assert first["outcome"] == "stopped" and first["probes_run"] == 3
    assert "--max-probes 3 reached" in first["answer"]
    second = cli_json(capsys, _param(tmp_path, "--range", "0:899", "--json"))
    assert second["outcome"] == "change" and second["first_fail"] == 613
    assert second["probes_reused"] == 3 and second["probes_run"] == len(second["probes"]) - 3
    counts = Counter(p for p, _, _ in _store_probes(store, "cpu-threshold"))
    assert set(counts.values()) == {1}, counts

    # Interrupted for real: SIGINT while the first probe (n=1000) hangs. The probe's process group dies with the
    # bisect, nothing half-done is recorded; the rerun resumes and records each point once.
    store2 = tmp_path / "r2.sqlite"
    logs = tmp_path / "logs2"
    argv = ["bisect", "param", "cpu-threshold", "--param", "n", "--smoke-dir", str(SMOKE_DIR), "--results",
            str(store2), "--logs", str(logs)]
    # SIGINT's default action in the child even where this run inherited it ignored (a background job of a
    # non-interactive shell ignores SIGINT, and Python then installs no KeyboardInterrupt handler)
    proc = subprocess.Popen([sys.executable, "-m", "pinmatrix", *argv, "--timeout", "120"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not [p for p in logs.rglob("*.log") if "waiting for a lock" in p.read_text(errors="replace")]:
        assert time.monotonic() < deadline and proc.poll() is None, "the hanging probe never started"
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert _store_probes(store2, "cpu-threshold") == []
    resumed = cli_json(capsys, [*argv, "--timeout", "3", "--json"])
    assert resumed["first_fail"] == 613 and resumed["probes_reused"] == 0
    again = cli_json(capsys, [*argv, "--timeout", "3", "--json"])
    assert again["probes_run"] == 0 and again["probes_reused"] == len(resumed["probes"])
    counts = Counter(p for p, _, _ in _store_probes(store2, "cpu-threshold"))
    assert set(counts.values()) == {1}, counts


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has an NVIDIA driver")
def test_gpu_smoke_without_a_gpu_says_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bisect", "param", "xformers-tiled-matmul-shape", "--param", "M", "--smoke-dir", str(SMOKE_DIR),
            "--results", str(tmp_path / "r.sqlite"), "--logs", str(tmp_path / "logs")]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "cannot probe xformers-tiled-matmul-shape over M in [1, 131072]: skipped: no GPU" in out
    assert "2 probes" in out


def test_bad_input_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for extra, words in ((["--param", "m"], "has no parameter 'm' (parameters: n)"),
                         (["--param", "n", "--range", "9"], "expected LO:HI"),
                         (["--param", "n", "--range", "5:1"], "low end must come first"),
                         (["--param", "n", "--fix", "nope=1"], "has no dimension 'nope'"),
                         (["--param", "n", "--step", "0.5"], "is an int")):
        argv = ["bisect", "param", "cpu-threshold", "--smoke-dir", str(SMOKE_DIR), "--results",
                str(tmp_path / "r.sqlite"), *extra]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err
    assert main(["bisect", "param", "host-probe", "--param", "n", "--smoke-dir", str(SMOKE_DIR)]) == 2
    assert "declares no parameters" in capsys.readouterr().err


def test_malformed_parameter_declarations_are_named(tmp_path: Path) -> None:
    for i, (spec, words) in enumerate((
        ('{"func": "f", "params": {"n": {"range": [5, 1]}}}', "low end first"),
        ('{"func": "f", "params": {"n": {"range": [0, 9], "default": 20}}}', "outside the range"),
        ('{"func": "f", "params": {"n": {"range": [0, 9]}}, "quantities": {"q": ["n", "z"]}}', "'z' is neither"),
        ('{"func": "f", "fixed": {"z": 1}}', "without 'params'"),
        ('{"func": "f", "params": {"n": {"range": [0, 9]}}, "fixed": {"n": 1}}', "both a parameter and a fixed"),
    )):
        d = tmp_path / f"cat{i}"
        d.mkdir()
        (d / "m.py").write_text(f"SMOKES = {{'s': {spec}}}\n")
        with pytest.raises(SmokeError) as err:
            load_catalogue(d)
        assert "m.py: smoke 's'" in str(err.value) and words in str(err.value), str(err.value)


def test_store_written_before_params_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as conn:  # the schema as it was before bisect probes
        conn.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE hosts (id TEXT PRIMARY KEY, hostname TEXT NOT NULL, gpu_name TEXT, gpu_count INTEGER NOT NULL,
            driver TEXT, capability TEXT, cuda_driver_api TEXT);
        CREATE TABLE results (seq INTEGER PRIMARY KEY AUTOINCREMENT, cell_id TEXT NOT NULL, stack TEXT NOT NULL,
            host_id TEXT NOT NULL, hostname TEXT NOT NULL, smoke TEXT NOT NULL, run_id TEXT NOT NULL,
            status TEXT NOT NULL, failure_class TEXT, reason TEXT NOT NULL, metrics TEXT NOT NULL, log_path TEXT,
            started_at TEXT NOT NULL, finished_at TEXT NOT NULL, duration_s REAL NOT NULL, known_issue TEXT,
            image_digest TEXT, environment TEXT NOT NULL DEFAULT '{}', UNIQUE (cell_id, host_id, smoke, run_id));
        INSERT INTO meta VALUES ('schema_version', '1');
        INSERT INTO hosts VALUES ('h1', 'old', NULL, 0, NULL, NULL, NULL);
        INSERT INTO results (cell_id, stack, host_id, hostname, smoke, run_id, status, reason, metrics, started_at,
            finished_at, duration_s) VALUES ('c1', 's', 'h1', 'old', 'ok', 'r1', 'pass', '', '{}', 't', 't', 0.1);
        """)
    store = ResultsStore(path)
    ResultsStore(path)  # a second open finds the column there
    (rec,) = store.query()
    assert rec.params == {} and store.has_result("c1", "h1", "ok")
    assert not store.has_result("c1", "h1", "ok", params={"n": 1})
    assert params_key({"b": 1, "a": 2}) == '{"a":2,"b":1}'
    # the first write migrates the file: the column is added, the old run stays a plain one
    from dataclasses import replace

    store.record(replace(rec, run_id="r2", params={"n": 1}))
    with sqlite3.connect(path) as conn:
        assert [r[0] for r in conn.execute("SELECT params FROM results ORDER BY seq")] == ["{}", '{"n":1}']
    assert store.has_result("c1", "h1", "ok", params={"n": 1}) and store.has_result("c1", "h1", "ok")


# -------------------------------------------------------------------------------- known-issue boundaries
BOUNDARY_MATRIX = """
[matrix]
exclude_newer = "2026-11-01T00:00:00Z"

[[known_issues]]
id = "buffer-capacity"
when = {{ six = "1.17.0" }}
smokes = ["cpu-threshold"]
expect = "fail"
class = "over-capacity"
note = "the buffer holds 613 items"
boundary = {{ param = "n", expect_first_fail = {expect} }}

[stacks.cpu]
description = "a CPU cell with a known issue that has a boundary"
gpu_required = false
smokes = ["cpu-threshold"]
[stacks.cpu.packages]
six = ["1.17.0"]
"""


def test_known_issue_boundary_confirmed_and_moved(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    matrix = project_with_smokes(tmp_path, BOUNDARY_MATRIX.format(expect=613))
    assert main(["validate", str(matrix)]) == 0
    base = ["bisect", "param", "cpu-threshold", str(matrix), "--cell", "cpu", "--param", "n", "--range", "0:699",
            "--smoke-dir", str(SMOKE_DIR), "--results", str(tmp_path / "r.sqlite"), "--logs", str(tmp_path / "l")]
    rep = cli_json(capsys, [*base, "--json"])
    (check,) = rep["boundary"]
    assert (check["status"], check["found_first_fail"], check["issue"]) == ("confirmed", 613, "buffer-capacity")
    # below the boundary the issue does not apply (a pass is a pass, not an unexpected xpass); above it does
    statuses = {p["value"]: p["status"] for p in rep["probes"]}
    assert all(s == "pass" for v, s in statuses.items() if v < 613)
    assert all(s == "xfail" for v, s in statuses.items() if v >= 613)
    # the buffer shrinks: the first failure moves to 600, the bisect says so and exits 1
    rep = cli_json(capsys, [*base, "--fix", "capacity=600", "--json"], code=1)
    (check,) = rep["boundary"]
    assert (check["status"], check["found_first_fail"]) == ("moved", 600)
    assert "boundary moved: first failure at n=600, the matrix expects 613" in check["message"]
    assert {p["status"] for p in rep["probes"] if 600 <= p["value"] < 613} == {"fail"}  # unexpected there
    # nothing fails in the range: the expected boundary was not found
    rep = cli_json(capsys, [*base, "--range", "0:500", "--json"], code=1)
    assert rep["boundary"][0]["status"] == "not-found"


# ------------------------------------------------------------------- version bisect over real PyPI releases


def test_probes_do_not_stand_for_the_cells_verdict_in_reports(tmp_path: Path) -> None:
    """A bisect's failing probes are part of a search: the report's cell status and promotion read plain runs."""
    from dataclasses import replace

    from pinmatrix.report.model import build_report
    from pinmatrix.results.store import HostFingerprint, SmokeRecord

    host = HostFingerprint.make(hostname="h", gpu_count=0)
    plain = SmokeRecord(cell_id="c1", stack="s", host=host, smoke="cpu-threshold", run_id="r1", status="pass",
                        failure_class=None, reason="10 items fit", metrics={}, log_path=None, started_at="2026-01-01T00:00:00Z",
                        finished_at="2026-01-01T00:00:01Z", duration_s=1.0, known_issue=None, image_digest=None)
    probe = replace(plain, run_id="bisect-r2.001", status="fail", failure_class="over-capacity",
                    finished_at="2026-01-01T00:00:09Z", params={"n": 700, "capacity": 613})
    store = ResultsStore(tmp_path / "r.sqlite")
    store.record_many([plain, probe])
    (row,) = build_report(store.query()).stacks[0].cells
    assert row.status == "pass" and [r.status for r in row.results] == ["pass"]
    assert [r.run_id for r in store.query(cell_id="c1", probe_params={})] == ["r1"]
    assert [r.params["n"] for r in store.query(cell_id="c1", latest_only=True, probes=True) if r.params] == [700]


def test_validate_names_a_boundary_that_fits_no_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = BOUNDARY_MATRIX.format(expect=613)
    for old, new, words in (
        ('param = "n"', 'param = "m"', "known_issues.0.boundary.param: 'm' is neither a parameter of the issue's "
                                       "smokes (n) nor an axis"),
        ("expect_first_fail = 613", 'expect_first_fail = "613"', "boundary.expect_first_fail: parameter 'n' is numeric"),
        ('param = "n"', 'param = "n", smoke = "host-probe"', "boundary.smoke: 'host-probe' is not a smoke of this issue"),
    ):
        matrix = project_with_smokes(tmp_path, good.replace(old, new))
        capsys.readouterr()
        assert main(["validate", str(matrix)]) == 2
        err = capsys.readouterr().err
        assert words in err, err


FLOAT_SMOKE = '''
from _smokelib import Fail, main

SMOKES = {
    "ratio": {"func": "ratio", "params": {"x": {"type": "float", "range": [0, 1]}}, "fixed": {"edge": 0.3, "low": 0},
              "timeout_s": 30},
}

def ratio(ctx):
    x, edge = float(ctx.params["x"]), float(ctx.params["edge"])
    if bool(ctx.params["low"]) == (x < edge):  # low=1: fails below the edge; low=0: fails from the edge on
        raise Fail(f"x={x} on the failing side of {edge}", "ratio")
    ctx.summary = f"x={x} fine"

if __name__ == "__main__":
    main(SMOKES, globals())
'''


def test_float_parameter_and_a_smoke_that_fails_below(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cat = tmp_path / "cat"
    cat.mkdir()
    (cat / "ratio.py").write_text(FLOAT_SMOKE)
    base = ["bisect", "param", "ratio", "--param", "x", "--step", "0.01", "--smoke-dir", str(cat),
            "--results", str(tmp_path / "r.sqlite"), "--logs", str(tmp_path / "logs"), "--json"]
    rep = cli_json(capsys, base)
    assert rep["space"] == {"param": "x", "type": "float", "lo": 0.0, "hi": 1.0, "step": 0.01} and rep["points"] == 101
    assert (rep["last_pass"], rep["first_fail"], rep["inverted"]) == (0.29, 0.3, False)
    rep = cli_json(capsys, [*base, "--fix", "low=1"])
    assert (rep["first_fail"], rep["last_pass"], rep["inverted"]) == (0.29, 0.3, True)
    assert rep["answer"] == "fails below: largest failing x = 0.29, smallest passing x = 0.3 (ratio)"


