"""report/settings: `pinmatrix report`'s one settings object and ``publish``, the step it calls: what is refused
before anything is written, what is written, which cells fail the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_data import make_cell, rec

from pinmatrix.errors import PinmatrixError
from pinmatrix.report.settings import ReportSettings, publish


def test_a_screenshot_without_the_html_format_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(PinmatrixError, match=r"^--screenshot needs the html format$"):
        ReportSettings(out=tmp_path / "out", formats=("md",), screenshot=tmp_path / "x.png")
    assert not (tmp_path / "out").exists()


def test_publish_writes_the_formats_asked_and_names_the_cells_at_or_past_fail_on(tmp_path: Path) -> None:
    good = make_cell("c1", "st", {"torch": "2.9"})
    bad = make_cell("c2", "st", {"torch": "2.10"})
    other = make_cell("c3", "other", {"torch": "2.10"})
    records = [rec(good, "host-probe", "pass"), rec(good, "boundary", "pass"), rec(bad, "host-probe", "pass"),
               rec(bad, "boundary", "fail", failure_class="illegal-memory-access"), rec(other, "boundary", "fail")]
    settings = ReportSettings(out=tmp_path / "out", formats=("md", "json"), title="T", cells=[good, bad, other],
                              stacks=("st",), fail_on="fail")
    outcome = publish(settings, records)
    assert outcome.paths == {"md": tmp_path / "out" / "summary.md", "json": tmp_path / "out" / "report.json"}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.json", "summary.md"]
    assert [c.id for c in outcome.failing] == ["c2"]  # c3 is in another stack than the one asked for
    assert json.loads(outcome.paths["json"].read_text())["title"] == "T" and outcome.screenshot is None
    assert publish(ReportSettings(out=tmp_path / "o2", formats=("json",), cells=[good, bad]), records).failing == []
