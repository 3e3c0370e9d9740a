"""Reports lead with what broke: failures first in HTML, Markdown and JSON, the failing smoke first within its
cell, a cell x host grid, per cell x smoke history from the store (the last runs, since when it is broken), arch
scan verdicts that need no emoji font; in headless Chromium the failure is in the first screen at 1400x1000 and
readable at 420 px wide."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from report_browser import need_chromium, report_page
from report_data import CPU, H200, make_cell, rec

from pinmatrix.report.archscan import ICONS as ARCH_ICONS
from pinmatrix.report.model import SmokeHistory, build_report
from pinmatrix.report.write import render, write_reports
from pinmatrix.results.store import HostFingerprint

SMOKES = tuple(f"smoke-{c}" for c in "abcdefghijklmn") + ("xformers-tiled-matmul-boundary-b",)  # 15, the failing one last
H200B = HostFingerprint.make(hostname="gpu2", gpu_name="NVIDIA H200", gpu_count=1, driver="590.48.01",
                             capability="9.0", cuda_driver_api="13.0")
FAILING = "0000001b0007"


def _at(rec_, run: str, minute: int):  # noqa: ANN001, ANN202
    stamp = f"2026-11-{20 + minute // 60:02d}T10:{minute % 60:02d}:00Z"
    return replace(rec_, run_id=run, started_at=stamp, finished_at=stamp)


def many_cells():  # noqa: ANN201
    """Three stacks of 12 cells, 15 smokes each, on two hosts; one cell of the second stack fails one smoke on
    one host in its last two runs (r4, r5) after passing in r1..r3."""
    cells, records = [], []
    for s, stack in enumerate(("alpha", "beta", "gamma")):
        for i in range(12):
            cell = make_cell(f"{s:07x}{chr(97 + s)}{i:04x}", stack,
                             {"torch": f"2.{i % 4 + 7}.0", "driver": f"5{80 + i // 4}.0"}, smokes=SMOKES)
            cells.append(cell)
            for run in range(1, 6):
                for smoke in SMOKES:
                    for host in (H200, H200B):
                        broken = cell.id == FAILING and smoke == SMOKES[-1] and host is H200 and run >= 4
                        status = "fail" if broken else "pass"
                        records.append(_at(rec(cell, smoke, status, host=host,
                                               failure_class="illegal-memory-access" if broken else None,
                                               reason="CUDA error: an illegal memory access was encountered"
                                               if broken else ""), f"r{run}", run * 10))
    return cells, records


@pytest.fixture(scope="module")
def report():  # noqa: ANN201
    cells, records = many_cells()
    return build_report(records, cells)


def test_history_says_since_when(report) -> None:  # noqa: ANN001
    (cell, result), = report.failures
    assert (cell.id, result.smoke, result.host_label) == (FAILING, SMOKES[-1], H200.label())
    h = result.history
    assert [r.run_id for r in h.runs] == ["r1", "r2", "r3", "r4", "r5"] and h.total == 5
    assert h.failing_since is not None and h.failing_since.run_id == "r4" and h.failing_runs == 2
    assert h.last_pass is not None and h.last_pass.run_id == "r3"
    merged = cell.history[SMOKES[-1]]  # over both hosts: gpu2 still passes
    assert merged.failing_since == h.failing_since and merged.total == 10 and len(merged.runs) == 10
    assert merged.last_pass is not None and merged.last_pass.run_id == "r5" and merged.last_pass.host_label != h.failing_since.host_label


def test_history_rules() -> None:
    from pinmatrix.report.model import HistoryRun

    def runs(*statuses: str) -> list[HistoryRun]:
        return [HistoryRun(f"r{i}", f"2026-11-29T10:{i:02d}:00Z", st, "h") for i, st in enumerate(statuses)]

    never = SmokeHistory.of(runs("fail", "fail"))
    assert never.failing_since is not None and never.failing_since.run_id == "r0" and never.last_pass is None
    healed = SmokeHistory.of(runs("fail", "pass"))
    assert healed.failing_since is None and healed.failing_runs == 0 and healed.last_pass.run_id == "r1"
    # a skip is not a pass: the streak is what broke since the last run that did not break
    assert SmokeHistory.of(runs("pass", "skip", "degraded")).failing_since.run_id == "r2"
    assert len(SmokeHistory.of(runs(*["pass"] * 25)).runs) == 10


def test_failures_lead_every_format(report) -> None:  # noqa: ANN001
    assert [s.name for s in report.stacks] == ["beta", "alpha", "gamma"]  # the broken stack first
    beta = report.stacks[0]
    assert beta.cells[0].id == FAILING  # the broken cell first in its stack
    assert beta.smokes[0] == SMOKES[-1]  # the smoke that broke is the first column (it was 15th)
    assert next(iter(beta.cells[0].smoke_status)) == SMOKES[-1]
    assert beta.cells[0].results[0].status == "fail"
    assert beta.hosts == sorted([H200.label(), H200B.label()])
    assert beta.cells[0].host_status(beta.hosts) == {H200.label(): "fail", H200B.label(): "pass"}

    md = render(report, "md")
    lines = md.splitlines()
    first_stack = next(i for i, line in enumerate(lines) if line.startswith("## ") and "beta" in line)
    broken = next(i for i, line in enumerate(lines) if SMOKES[-1] in line and FAILING in line)
    assert broken < first_stack and lines[broken - 2].startswith("## What broke: 1 result in 1 of 36 cells")
    assert "since run `r4`" in lines[broken] and "2 runs in a row" in lines[broken] and "last pass run `r3`" in lines[broken]
    assert "Cells × hosts:" in md

    data = json.loads(render(report, "json"))
    assert [(f["cell"], f["smoke"], f["status"]) for f in data["failures"]] == [(FAILING, SMOKES[-1], "fail")]
    assert data["failures"][0]["failing_since"]["run_id"] == "r4" and data["failures"][0]["failing_runs"] == 2
    cell = data["stacks"][0]["cells"][0]
    assert cell["host_status"][H200.label()] == "fail" and cell["history"][SMOKES[-1]]["total"] == 10
    assert data["stacks"][0]["hosts"] == beta.hosts


def test_nothing_broke_is_said(tmp_path) -> None:  # noqa: ANN001
    cell = make_cell("aaaaaaaaaaa1", "demo", {"six": "1.17.0"}, smokes=("python-imports",))
    report = build_report([rec(cell, "python-imports", "pass", host=CPU)], [cell])
    assert report.failures == [] and json.loads(render(report, "json"))["failures"] == []
    assert "Nothing broke" in render(report, "md") and "Nothing broke" in render(report, "html")


def test_arch_scan_verdicts_need_no_emoji_font() -> None:
    from pinmatrix.report.archscan import arch_scan_html

    tables = [{"stack": "gb10", "gpu": "sm_121", "packages": ["torch", "flashinfer-python"],
               "rows": [{"id": "aaaaaaaaaaa1", "name": "gb10[x]", "arch_flags": ["12.1a"],
                         "verdicts": {"torch": "native", "flashinfer-python": "cannot-run 3/9"}, "findings": []}]}]
    html = arch_scan_html(tables)
    assert '<span class="av av-native"' in html and '<span class="av av-cannot-run"' in html
    assert not any(icon in html for icon in ARCH_ICONS.values())
    assert not any(ord(ch) > 0x2600 for ch in html)


# ------------------------------------------------------------------------------------------- in Chromium

@pytest.fixture(scope="module")
def page(report, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN001, ANN201
    need_chromium()
    out = tmp_path_factory.mktemp("report")
    return write_reports(report, out, ["html"])["html"]


BOX = ("(() => { const e = document.querySelector(%r); const r = e.getBoundingClientRect();"
       " const cs = getComputedStyle(e); return {left: r.left, right: r.right, top: r.top, bottom: r.bottom,"
       " text: e.textContent, font: parseFloat(cs.fontSize), clipped: e.scrollWidth > e.clientWidth + 1,"
       " docWidth: document.documentElement.clientWidth}; })()")
FAILING_SMOKE = f'li.broken-item[data-cell="{FAILING}"] .broken-smoke'


def test_the_failure_is_in_the_first_screen(page) -> None:  # noqa: ANN001
    with report_page(page.as_uri(), width=1400, height=1000) as browser:
        box = browser.evaluate(BOX % FAILING_SMOKE)
        assert box["text"] == SMOKES[-1]
        assert 0 <= box["left"] and box["right"] <= 1400 and 0 <= box["top"] and box["bottom"] <= 1000, box
        height = browser.evaluate("document.documentElement.scrollHeight")
        assert height > 3000  # a long page: the failure is on top, not found by scrolling
        since = browser.evaluate(f"document.querySelector('li.broken-item[data-cell=\"{FAILING}\"] .broken-since')"
                                 ".textContent.replace(/\\s+/g, ' ').trim()")
        assert "broken since run r4" in since and "2 runs in a row" in since and "last pass: run r3" in since


def test_the_failing_smoke_is_readable_at_420_px(page) -> None:  # noqa: ANN001
    # a phone's viewport: the page's width=device-width applies
    with report_page(page.as_uri(), width=420, height=900, mobile=True) as browser:
        box = browser.evaluate(BOX % FAILING_SMOKE)
        assert box["docWidth"] <= 420
        assert 0 <= box["left"] and box["right"] <= box["docWidth"], box  # inside the viewport, not scrolled off
        assert box["top"] >= 0 and box["bottom"] <= 900, box  # in the first screen
        assert box["font"] >= 12 and not box["clipped"], box
        reason = browser.evaluate(BOX % f'li.broken-item[data-cell="{FAILING}"] .broken-reason')
        assert reason["right"] <= reason["docWidth"] and "illegal memory access" in reason["text"]
        # the section holding it does not overflow the page sideways
        section = browser.evaluate(BOX % "section#broken")
        assert section["right"] <= section["docWidth"]


def test_a_screenshot_of_the_first_screen(page, tmp_path) -> None:  # noqa: ANN001
    """The first screen at 1400x1000, as docs/report.png shows it (`PINMATRIX_UPDATE_DOCS=1` rewrites that file
    from this page: 36 made-up cells x 15 smokes on two hosts, one smoke of one cell broken since run r4)."""
    import os
    import struct
    from pathlib import Path

    with report_page(page.as_uri(), width=1400, height=1000) as browser:
        data = browser.screenshot({"x": 0, "y": 0, "width": 1400, "height": 1000})
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24]) == (1400, 1000)
    (tmp_path / "report.png").write_bytes(data)
    if os.environ.get("PINMATRIX_UPDATE_DOCS") == "1":
        (Path(__file__).resolve().parents[3] / "docs" / "report.png").write_bytes(data)
