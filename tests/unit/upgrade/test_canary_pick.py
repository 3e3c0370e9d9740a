"""``pinmatrix canary --compare-only``: a candidate that is no cell of matrix.toml (a propose candidate whose lock
propose wrote under --lock-dir), its results imported with ``pinmatrix results --import`` as a GPU host's run
would be, compared with the stack's promoted cell (the nearest of them, the newest first), or, when none is
promoted, with the matrix's cell of the same variant, said so. Nothing is built or run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from upgrade_matrix import head

from pinmatrix.ci.canary import set_cells
from pinmatrix.cli import main
from pinmatrix.matrix.selection import load
from pinmatrix.project.known_good import record_promotion
from pinmatrix.results.store import HostFingerprint, ResultsStore, SmokeRecord
from pinmatrix.upgrade.canary_inputs import CanaryFacts
from pinmatrix.upgrade.canary_pick import baseline_side, candidate_side, nearest, variant_pins

MATRIX = head() + """[stacks.d]
smokes = ["host-probe", "python-imports"]
gpu_required = false
[stacks.d.packages]
six = ["1.16.0"]
[stacks.d.axes]
env = [{}, { label = "other", vars = { X = "1" } }]
"""
CAND = "abcdef123456"
H200 = HostFingerprint.make(hostname="h200", gpu_name="NVIDIA H200", gpu_count=1, driver="580.95.05",
                            capability="9.0")


def _rec(cell: str, smoke: str, status: str, run: str = "r1", finished: str = "2026-12-04T00:00:01+00:00"
         ) -> dict[str, object]:
    return SmokeRecord(cell_id=cell, stack="d", host=H200, smoke=smoke, run_id=run, status=status,
                       failure_class=None, reason=f"{smoke} said {status}", metrics={}, log_path=None,
                       started_at="2026-12-04T00:00:00+00:00", finished_at=finished,
                       duration_s=1.0, known_issue=None, image_digest=None).to_dict()


@pytest.fixture()
def project(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "matrix.toml").write_text(MATRIX, encoding="utf-8")
    locks = tmp_path / "cand" / "locks"
    locks.mkdir(parents=True)
    (locks / f"{CAND}.txt").write_text(
        f"# pinmatrix lock for cell {CAND}: d[env=default]\n# python 3.13\n"
        "six==1.17.0 \\\n    --hash=sha256:" + "0" * 64 + "\n    # via -r requirements.in\n", encoding="utf-8")
    return {"root": tmp_path, "matrix": tmp_path / "matrix.toml", "results": tmp_path / "r.sqlite",
            "kg": tmp_path / "known-good.toml", "lockdir": tmp_path / "cand"}


def _import(p: dict[str, Path], rows: list[dict[str, object]], capsys: pytest.CaptureFixture[str]) -> None:
    exported = p["root"] / "from-gpu-host.json"
    exported.write_text(json.dumps(rows), encoding="utf-8")
    assert main(["results", "--results", str(p["results"]), "--import", str(exported)]) == 0
    assert capsys.readouterr().out.startswith(f"imported {len(rows)} record(s)")


def _promote(p: dict[str, Path], cell_id: str, when: str) -> None:
    record_promotion(p["kg"], {"stack": "d", "cell_id": cell_id, "digest": "sha256:" + "1" * 64,
                               "reference": f"r/d@sha256:{'1' * 64}", "promoted_at": when,
                               "pins": {"six": "1.16.0", "env": "default" if "default" in when else "other"}})


def _compare(p: dict[str, Path], capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict]:
    code = main(["canary", str(p["matrix"]), "--compare-only", "--candidate", CAND, "--lock-dir", str(p["lockdir"]),
                 "--results", str(p["results"]), "--known-good-file", str(p["kg"]), "--json", *extra])
    out = capsys.readouterr()
    return code, json.loads(out.out) if code in (0, 1) else {"err": out.err}


def test_an_imported_candidate_outside_the_matrix_against_the_promoted_cell(
        project: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, expansion = load(project["matrix"])
    default, other = sorted(expansion.cells, key=lambda c: c.name)
    _promote(project, default.id, "2026-12-01 default")
    _promote(project, other.id, "2026-12-02 other")  # newer, but another variant: further from the candidate
    _import(project, [_rec(default.id, "host-probe", "pass"), _rec(default.id, "python-imports", "pass"),
                      _rec(CAND, "host-probe", "pass"), _rec(CAND, "python-imports", "fail"),
                      _rec(CAND, "python-imports", "pass", "r0", "2026-12-03T00:00:00+00:00")], capsys)  # older run
    code, data = _compare(project, capsys)
    assert code == 1, data  # a smoke newly fails
    [diff] = data["comparisons"]
    assert diff["candidate"] == {"id": CAND, "name": "d[env=default]"}
    assert diff["baseline"] == {"id": default.id, "name": default.name, "source": "known-good, promoted 2026-12-01 default"}
    assert diff["moved"] == {"six": {"from": "1.16.0", "to": "1.17.0"}}
    assert diff["axes_one_side_only"] == []  # env from the lock's header (the cell's name), six from its pins
    [change] = diff["smokes"]
    assert change["change"] == "newly failing" and change["smoke"] == "python-imports"
    assert change["bisect"] == ("pinmatrix bisect version python-imports --stack d --axis six --range '>=1.16.0,<=1.17.0' --fix env=default")
    assert diff["unchanged_passing"] == 1
    assert diff["expectations"] == ["expectations: not known for the candidate (no cell of the matrix has its id)"]


def test_with_nothing_promoted_the_matrix_cell_of_the_same_variant_stands_in_and_says_so(
        project: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, expansion = load(project["matrix"])
    _import(project, [_rec(CAND, "host-probe", "pass")], capsys)
    code, data = _compare(project, capsys)
    assert code == 0
    [diff] = data["comparisons"]
    default = next(c for c in expansion.cells if c.pins.get("env") == "default")
    assert diff["baseline"]["id"] == default.id
    assert diff["baseline"]["source"] == ("no cell of stack d is promoted: the matrix's current cell of the same "
                                          "variant stands in")
    assert [s["change"] for s in diff["smokes"]] == ["not run"]  # the baseline has no result on that host


def test_a_candidate_with_no_results_or_no_lock_is_one_line(project: dict[str, Path],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    _import(project, [_rec("bbbbbbbbbbbb", "host-probe", "pass")], capsys)
    code, out = _compare(project, capsys)
    assert code == 2 and "holds no result of it" in out["err"] and len(out["err"].splitlines()) == 1
    _import(project, [_rec(CAND, "host-probe", "pass")], capsys)
    (project["lockdir"] / "locks" / f"{CAND}.txt").unlink()
    code, out = _compare(project, capsys)
    assert code == 2 and "its lock is not in" in out["err"]


def test_a_set_candidate_is_the_cell_propose_makes_and_never_its_own_baseline(
        project: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    matrix, expansion = load(project["matrix"])
    cands = {c.pins["env"]: c for c in set_cells(matrix, "d", ["six=1.17.0"])}
    assert sorted(cands) == ["default", "other"]  # both env variants, as propose makes them
    cand = cands["other"]
    _import(project, [_rec(cand.id, "host-probe", "pass")], capsys)
    code = main(["canary", str(project["matrix"]), "--compare-only", "--candidate", cand.id, "--stack", "d", "--set",
                 "six=1.17.0", "--results", str(project["results"]), "--known-good-file", str(project["kg"]),
                 "--json"])
    [diff] = json.loads(capsys.readouterr().out)["comparisons"]
    assert code == 0 and diff["candidate"] == {"id": cand.id, "name": cand.name}
    base = next(c for c in expansion.cells if c.pins["env"] == "other")
    assert diff["baseline"]["id"] == base.id  # the matrix's own cell, not the candidate's other variant
    assert diff["moved"] == {"six": {"from": "1.16.0", "to": "1.17.0"}} and diff["axes_one_side_only"] == []
    assert diff["expectations"] == []  # both are cells: their known issues are known (none here)


def test_compare_only_without_a_results_store_is_one_line_and_makes_none(
        project: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _compare(project, capsys)
    assert code == 2 and out["err"].strip().endswith("no results store (import the candidate's with `pinmatrix "
                                                     "results --import`)")
    assert not project["results"].exists()


def test_known_good_names_the_baseline_and_an_unknown_one_is_one_line(
        project: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, expansion = load(project["matrix"])
    other = next(c for c in expansion.cells if c.pins["env"] == "other")
    _import(project, [_rec(CAND, "host-probe", "pass")], capsys)
    code, data = _compare(project, capsys, "--known-good", other.id)
    assert code == 0 and data["comparisons"][0]["baseline"] == {
        "id": other.id, "name": other.name, "source": "the matrix's cell --known-good names; not promoted"}
    code, out = _compare(project, capsys, "--known-good", "ffffffffffff")
    assert code == 2 and "--known-good ffffffffffff: no promoted cell of stack d" in out["err"]


def test_a_set_value_that_is_no_version_is_one_line(project: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _compare(project, capsys, "--stack", "d", "--set", "six=1.17.0-patched")
    assert code == 2 and "--set six=1.17.0-patched: not a version" in out["err"]


def test_an_oversized_lock_is_refused_with_its_size(project: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pinmatrix.upgrade.canary_inputs.MAX_RECORD_BYTES", 64)
    _import(project, [_rec(CAND, "host-probe", "pass")], capsys)
    code, out = _compare(project, capsys)
    assert code == 2 and "is more than a lock may have (64 bytes)" in out["err"]


def test_a_container_runtime_needs_the_engine_holding_the_images(project: dict[str, Path],
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["canary", str(project["matrix"]), "--runtime", "docker", "--engine", "podman"]) == 2
    assert "--runtime docker smokes the images docker holds: add --engine docker" in capsys.readouterr().err


def test_the_baseline_is_the_cell_of_the_same_patch_variant() -> None:
    """The shipped h200 stack's two cells pin the same xformers; only the int64 patch tells them apart. A torch
    upgrade of either is nearest to the cell of its own variant, in whichever order the cells come (it once took
    the int64 cell as the plain candidate's baseline: a tie on pins alone)."""
    _, expansion = load(Path(__file__).resolve().parents[3] / "matrix.toml")
    h200 = [c for c in expansion.cells if c.stack == "h200"]
    plain = next(c for c in h200 if not c.patches_to_apply)
    int64 = next(c for c in h200 if c.patches_to_apply)
    for cell in (plain, int64):
        wanted = variant_pins(dict(cell.pins, torch="2.15.0", triton="3.9.0"), cell)
        for order in (h200, list(reversed(h200))):
            assert nearest(wanted, [(c, variant_pins(c.pins, c)) for c in order]) is cell


def test_a_set_candidate_outside_the_cells_gets_the_baseline_of_its_own_variant(tmp_path: Path) -> None:
    """A --set candidate is none of the matrix's cells: its patches come from the candidate's own cell."""
    _, expansion = load(Path(__file__).resolve().parents[3] / "matrix.toml")
    h200 = [c for c in expansion.cells if c.stack == "h200"]
    facts = CanaryFacts(ResultsStore(tmp_path / "r.sqlite"), tmp_path / "oci", None)
    for cell in h200:
        cand = dataclasses.replace(cell, id="c" * 12, pins=dict(cell.pins, torch="2.15.0", triton="3.9.0"))
        for order in (h200, list(reversed(h200))):
            base, _ = baseline_side(facts, facts.of_cell(cand), "h200", [], order, candidate_cell=cand)
            assert base.cell_id == cell.id


def test_compare_only_takes_a_set_candidate_s_patches_to_its_baseline(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """--compare-only of a --set candidate of the shipped h200 stack: its own cell (which candidate_side found)
    picks the matrix's cell of its patch variant as the baseline, in both variants."""
    matrix_path = Path(__file__).resolve().parents[3] / "matrix.toml"
    matrix, expansion = load(matrix_path)
    sets = ["torch=2.15.0", "triton=3.9.0"]
    p = {"root": tmp_path, "results": tmp_path / "r.sqlite"}
    cands = set_cells(matrix, "h200", sets)
    _import(p, [], capsys)  # an empty store: neither side has a result
    for cand in cands:
        base = next(c for c in expansion.cells if c.stack == "h200" and c.patches_to_apply == cand.patches_to_apply)
        code = main(["canary", str(matrix_path), "--compare-only", "--candidate", cand.id, "--stack", "h200",
                     *(a for s in sets for a in ("--set", s)), "--results", str(p["results"]),
                     "--known-good-file", str(tmp_path / "known-good.toml"), "--json"])
        [diff] = json.loads(capsys.readouterr().out)["comparisons"]
        assert code == 0 and diff["baseline"]["id"] == base.id, cand.name


def test_candidate_side_returns_the_cell_it_found_or_none(project: dict[str, Path],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    _, expansion = load(project["matrix"])
    facts = CanaryFacts(ResultsStore(project["results"]), project["root"] / "oci", None)
    cells = list(expansion.cells)
    for cell in cells:
        assert candidate_side(facts, cell.id, cells, [project["lockdir"]], {}) == ("d", facts.of_cell(cell), cell)
    _import(project, [_rec(CAND, "host-probe", "pass")], capsys)
    stack, side, cell = candidate_side(facts, CAND, cells, [project["lockdir"]], {"d": ["six"]})
    assert (stack, side.cell_id, side.name, cell) == ("d", CAND, "d[env=default]", None)
    assert side.pins["six"] == "1.17.0"
