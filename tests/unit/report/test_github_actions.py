"""report/github_actions: under GITHUB_ACTIONS=true a report's failed smokes are ::error annotations pointing at
the matrix file, an infrastructure error a ::warning, the Markdown summary is appended to $GITHUB_STEP_SUMMARY,
a failed build is an ::error; a smoke's text cannot break out of its one line; elsewhere nothing at all."""

from __future__ import annotations

from pathlib import Path

import pytest
from report_data import make_cell, rec

from conftest import REPO
from pinmatrix.image.settings import CellBuildResult
from pinmatrix.matrix.selection import load
from pinmatrix.report.github_actions import build_annotations, report_annotations, workflow_command
from pinmatrix.report.model import build_report
from pinmatrix.report.settings import ReportSettings, publish
from pinmatrix.results.store import HostFingerprint


def _records():  # noqa: ANN202
    good, bad = make_cell("c1", "st", {"torch": "2.9"}), make_cell("c2", "st", {"torch": "2.10"})
    return [good, bad], [rec(good, "host-probe", "pass"), rec(good, "boundary", "error", reason="podman died"),
                         rec(bad, "host-probe", "pass"),
                         rec(bad, "boundary", "fail", failure_class="illegal-memory-access", reason="CUDA error")]


def test_under_github_actions_failed_smokes_are_errors_and_the_summary_is_appended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    cells, records = _records()
    outcome = publish(ReportSettings(out=tmp_path / "out", formats=("json",), cells=cells,
                                     matrix_file="stacks/matrix.toml"), records)
    host = records[0].host.label()
    assert sorted(outcome.annotations) == [
        f"::error file=stacks/matrix.toml,title=st[torch=2.10] (c2) boundary::"
        f"fail [illegal-memory-access] on {host}: CUDA error",
        f"::warning file=stacks/matrix.toml,title=st[torch=2.9] (c1) boundary::error on {host}: podman died"]
    text = summary.read_text()
    assert text.startswith("earlier step\n# ") and "c2" in text  # appended, not replaced
    assert not (tmp_path / "out" / "summary.md").exists()  # the job summary needs no md format asked for


def test_elsewhere_nothing_is_annotated_or_appended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "step-summary.md"
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    cells, records = _records()
    assert publish(ReportSettings(out=tmp_path / "out", formats=("json",), cells=cells), records).annotations == []
    assert not summary.exists()


def test_a_message_cannot_end_its_line_or_set_a_property() -> None:
    line = workflow_command("error", "50% bad\n::notice::injected\x1b[31m", file="a,b:c.toml", title="t\nx")
    assert line == "::error file=a%2Cb%3Ac.toml,title=t%0Ax::50%25 bad%0A::notice::injected"
    assert "\r" not in workflow_command("error", "a\rb")


def test_a_failed_build_is_an_error_under_github_actions_only(tmp_path: Path) -> None:
    cell = make_cell("c9", "st", {"torch": "2.9"})
    failed = CellBuildResult(cell=cell, ref="x", status="failed", log=tmp_path / "c9.log", reason="no lock")
    built = CellBuildResult(cell=cell, ref="x", status="built", log=tmp_path / "c9.log")
    assert build_annotations([failed, built], "matrix.toml", {"GITHUB_ACTIONS": "true"}) == [
        f"::error file=matrix.toml,title=st[torch=2.9] (c9)::build failed: no lock (log: {tmp_path}/c9.log)"]
    assert build_annotations([failed], "matrix.toml", {}) == []


def test_the_readmes_ci_block_shows_the_annotation_report_prints() -> None:
    """README.md's "What a CI run shows": its ::error line is what report_annotations makes of that failure."""
    shown = next(line for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines()
                 if line.startswith("::error "))
    cell = next(c for c in load(REPO / "matrix.toml")[1].cells if c.name == "demo[six=1.17.0,idna=3.7]")
    host = HostFingerprint.make(hostname="builder")
    failed = rec(cell, "python-imports", "fail", host=host, failure_class="import-error",
                 reason="ModuleNotFoundError: No module named 'idna.core'")
    assert report_annotations(build_report([failed], [cell]), "matrix.toml") == [shown]
