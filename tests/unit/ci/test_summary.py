"""ci/summary and `ci k8s`'s output: the cell x pools an emitter skipped are one summary line (counted by reason,
the first cells named), not a line each; --verbose lists each. docs/examples/pools.toml, the shipped example, is
a pools file `ci k8s --pools` accepts, and every GPU cell of the shipped matrix fits one of its pools. `ci slurm`
likewise: one line for the skipped cell x pools, one for those already recorded (--verbose: a line each)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from k8s_pools import ROOT

from pinmatrix.ci.slurm import SlurmPlan
from pinmatrix.ci.summary import skipped_summary
from pinmatrix.cli import main
from pinmatrix.matrix.selection import load

EXAMPLE = ROOT / "docs" / "examples" / "pools.toml"
NO_IMAGE = "no image by digest in the registry (build and push it first)"


def test_the_summary_counts_by_reason_and_names_the_first_cells() -> None:
    lines = [f"{n:012x} demo[x={n}]: {NO_IMAGE}" for n in range(40)]
    lines += [f"{n:012x} h200[x={n}] x pool spark: the cell is for sm_90" for n in range(40, 61)]
    line = skipped_summary("ci k8s", lines)
    assert line == (f"ci k8s: skipped 61 cell x pool(s): 40 {NO_IMAGE}, 21 the cell is for sm_90; cells "
                    f"{0:012x}, {1:012x}, {2:012x} and 58 more (--verbose lists each)")
    assert skipped_summary("ci k8s", []) is None


def _fake_images(monkeypatch: pytest.MonkeyPatch, have: set[str]) -> None:
    def images(cells, prefix: str, command: str = "ci k8s") -> dict[str, str]:  # noqa: ANN001
        return {c.id: f"{prefix}/{c.stack}@sha256:{c.id * 5}0000" for c in cells if c.id in have}
    monkeypatch.setattr("pinmatrix.commands.ci._images", images)


def test_k8s_says_what_it_skipped_in_one_line_and_the_example_pools_fit_every_gpu_cell(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    cells = [c for c in load(ROOT / "matrix.toml")[1].cells if c.gpu_required]
    _fake_images(monkeypatch, {c.id for c in cells[:-3]})  # the last three were never pushed
    base = ["ci", "k8s", str(ROOT / "matrix.toml"), "--pools", str(EXAMPLE), "--registry", "registry.test:5000/pm",
            "--smoke-dir", str(ROOT / "smoke"), "--run-id", "r1"]
    assert main([*base, "-k", "not demo"]) == 0
    out, err = capsys.readouterr()
    jobs = [d for d in yaml.safe_load_all(out) if d["kind"] == "Job"]
    assert {j["metadata"]["labels"]["pinmatrix.io/cell"] for j in jobs} >= {c.id for c in cells[:-3]}
    skipped = [line for line in err.splitlines() if "skipped" in line]
    assert len(skipped) == 1, err  # one line, however many cell x pools were skipped
    assert skipped[0].startswith("ci k8s: skipped ") and f"3 {NO_IMAGE}" in skipped[0]
    assert "no node pool fits" not in skipped[0]  # the example's pools fit every GPU cell
    assert main([*base, "-k", "not demo", "--verbose", "--no-validate"]) == 0
    each = [line for line in capsys.readouterr().err.splitlines() if line.startswith("skipped ")]
    assert sum(NO_IMAGE in line for line in each) == 3 and len(each) > 3  # and each pool that did not fit


def test_slurm_says_what_it_skipped_and_found_recorded_in_one_line_each(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cells = [c for c in load(ROOT / "matrix.toml")[1].cells if c.gpu_required]
    _fake_images(monkeypatch, {c.id for c in cells[:-3]})  # the last three were never pushed
    base = ["ci", "slurm", str(ROOT / "matrix.toml"), "-k", "not demo", "--pools", str(EXAMPLE), "--runtime",
            "podman", "--registry", "registry.test:5000/pm", "--smoke-dir", str(ROOT / "smoke"), "--out",
            str(tmp_path / "subs"), "--results", str(tmp_path / "none.sqlite"), "--print"]
    assert main(base) == 0
    err = capsys.readouterr().err
    skipped = [line for line in err.splitlines() if "skipped" in line]
    assert len(skipped) == 1, err  # one line, however many cell x pools were skipped
    assert skipped[0].startswith("ci slurm: skipped ") and "3 no image by digest in the registry" in skipped[0]
    assert main([*base, "--verbose"]) == 0
    each = [line for line in capsys.readouterr().err.splitlines() if line.startswith("skipped ")]
    assert sum("no image by digest" in line for line in each) == 3 and len(each) > 3  # and each pool that did not fit


def test_slurm_recorded_cells_are_one_line_and_each_with_verbose() -> None:
    recorded = [f"{n:012x} demo[x={n}] x cpu: every smoke recorded on the host runtime" for n in range(30)]
    planned = SlurmPlan(recorded=recorded, warnings=["abc x cpu: time limit 1 min is shorter"])
    assert planned.said(verbose=False) == [
        "ci slurm: 30 cell x pool(s) not submitted, every smoke recorded on the same image (--rerun submits them; "
        "--verbose lists each)", "warning: abc x cpu: time limit 1 min is shorter"]
    assert planned.said(verbose=True)[:2] == [f"recorded {recorded[0]}", f"recorded {recorded[1]}"]
    assert len(planned.said(verbose=True)) == 31
