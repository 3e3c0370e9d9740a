"""A report at fleet scale: past ``INLINE_CELLS`` cells index.html leads with what broke (the worst
``FAILURES_LISTED`` one by one, all of them summarised) and the grid, and holds no cell's details: those are on
numbered pages beside it, each cell's link naming its page (a static folder that opens from file://); report.json
is written a cell at a time and reads back as the one object its pieces make; a report that fails midway
leaves the earlier one whole."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from report_browser import need_chromium, report_page
from report_data import H200, make_cell, rec

from pinmatrix.report import html as report_html
from pinmatrix.report.jsonstream import write_json
from pinmatrix.report.model import FAILURES_LISTED, Report, build_report, cell_to_dict, report_head, stack_head
from pinmatrix.report.write import write_reports

SMOKES = tuple(f"smoke-{i:02d}" for i in range(6))
N_CELLS = report_html.INLINE_CELLS + 50


def fleet(n: int = N_CELLS) -> Report:
    """``n`` cells of two stacks, 6 smokes each; 3 cells in 5 fail smoke-03 (so more broken results than
    index.html lists one by one)."""
    cells, records = [], []
    for i in range(n):
        cell = make_cell(f"{i:012x}", f"s{i % 2}", {"torch": f"2.{i % 9}.0", "n": str(i)}, smokes=SMOKES)
        cells.append(cell)
        for smoke in SMOKES:
            broken = smoke == "smoke-03" and i % 5 < 3
            records.append(rec(cell, smoke, "fail" if broken else "pass", metrics={"tflops": 400.0 + i},
                               failure_class="illegal-memory-access" if broken else None,
                               reason=f"CUDA error in cell {i}" if broken else ""))
    return build_report(records, cells)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Report, Path]:
    report = fleet()
    out = tmp_path_factory.mktemp("fleet")
    write_reports(report, out)
    return report, out


def test_index_leads_with_what_broke_and_holds_no_details(written) -> None:  # noqa: ANN001
    report, out = written
    index = (out / "index.html").read_text()
    assert 'class="cell-detail"' not in index  # no cell's details, passing or failing
    assert "CUDA error in cell" in index  # the failures themselves are there, first
    assert index.index('id="broken"') < index.index('class="stack"') < index.index('<table class="grid"')
    listed = re.findall(r'<li class="broken-item" data-cell="(\w+)"', index)
    failures = report.failures
    assert len(failures) > FAILURES_LISTED
    assert listed == [c.id for c, _ in failures[:FAILURES_LISTED]]
    # the summary counts every broken result, not just the listed ones
    assert index.index('<table class="broken-summary">') < index.index('<li class="broken-item"')  # counts first
    summary = index.split('<table class="broken-summary">', 1)[1].split("</table>", 1)[0]
    counts = re.findall(r'<td class="num">(\d+)</td>\s*<td class="num">(\d+)</td>', summary)
    assert counts == [(str(len(failures)), str(len({c.id for c, _ in failures})))]
    assert "smoke-03" in summary and "illegal-memory-access" in summary


def test_summary_md_lists_the_worst_and_counts_the_rest(written) -> None:  # noqa: ANN001
    report, out = written
    md = (out / "summary.md").read_text()
    lines = [line for line in md.splitlines() if line.startswith("- 🔴 **smoke-03**")]
    assert len(lines) == FAILURES_LISTED
    assert f"- and {len(report.failures) - FAILURES_LISTED} more (index.html counts them all" in md


def test_each_cells_link_names_the_page_that_holds_its_details(written) -> None:  # noqa: ANN001
    report, out = written
    index = (out / "index.html").read_text()
    links = dict(re.findall(r'<tr class="cell-row[^"]*" data-cell="(\w+)"[^>]*>\s*<td>.*?</td>\s*<td><a href="([^"]+)"',
                            index))
    assert set(links) == {c.id for c in report.cells}
    pages = sorted(p.name for p in out.glob("cells-*.html"))
    per_page = report_html.CELLS_PER_PAGE
    assert pages == [f"cells-{n:03d}.html" for n in range(1, -(-N_CELLS // per_page) + 1)]
    texts = {name: (out / name).read_text() for name in pages}
    for cell in report.cells:
        page, anchor = links[cell.id].split("#")
        assert anchor == f"cell-{cell.id}"
        assert f'id="cell-{cell.id}"' in texts[page], cell.id
        assert sum(f'id="cell-{cell.id}"' in t for t in texts.values()) == 1
    failing = next(c for c, _ in report.failures)
    page = texts[links[failing.id].split("#")[0]]
    assert f"CUDA error in cell {int(failing.id, 16)}" in page and "tflops" in page
    assert 'href="index.html"' in page
    data = json.loads(index.split('id="pinmatrix-data">', 1)[1].split("</script>", 1)[0])
    assert {c["id"]: c["href"] for s in data["stacks"] for c in s["cells"]} == links  # the pivot's links


def test_a_small_report_keeps_its_details_inline_and_drops_old_pages(written, tmp_path) -> None:  # noqa: ANN001
    report, _ = written
    out = tmp_path / "out"
    write_reports(report, out, ["html"])
    assert list(out.glob("cells-*.html"))
    small = fleet(4)
    (out / "cells-notes.html").write_text("mine")  # not a page name: left alone
    write_reports(small, out, ["html"])
    assert sorted(p.name for p in out.glob("cells-*.html")) == ["cells-notes.html"]
    index = (out / "index.html").read_text()
    assert all(f'<section class="cell-detail" id="cell-{c.id}"' in index for c in small.cells)
    assert all(f'href="#cell-{c.id}"' in index for c in small.cells)


class Recording:
    """A text handle that keeps each write apart."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)


def test_report_json_is_streamed_and_reads_back_whole() -> None:
    report = fleet()
    handle = Recording()
    write_json(report, handle)  # type: ignore[arg-type]
    text = "".join(handle.writes)
    whole = {**report_head(report), "stacks": [{**stack_head(s), "cells": [cell_to_dict(c, s.hosts) for c in s.cells]}
                                              for s in report.stacks]}
    assert json.loads(text) == json.loads(json.dumps(whole))
    assert len(handle.writes) > len(report.cells)
    biggest = max(len(w) for w in handle.writes)
    assert biggest < len(text) / 50, biggest  # no piece is a large part of the document
    cell_lines = [line for line in text.splitlines() if line.startswith('      {"compute_capability"')]
    assert len(cell_lines) == len(report.cells)  # one cell per line
    assert all(json.loads(line.rstrip(","))["results"] for line in cell_lines)


def test_a_report_that_fails_midway_leaves_the_earlier_one_whole(written, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    report, _ = written
    out = tmp_path / "out"
    write_reports(fleet(4), out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def broken(*_: Any) -> Iterator[str]:
        yield '{"schema": '
        raise RuntimeError("disk full")

    monkeypatch.setattr("pinmatrix.report.write.write_json", lambda r, h: h.writelines(broken()))
    with pytest.raises(RuntimeError, match="disk full"):
        write_reports(report, out)  # html (with its pages), md and junit are written before json
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no page, no temporary, nothing replaced


def test_the_failures_summary_groups_by_status_smoke_and_class() -> None:
    cells = [make_cell(f"{i:012x}", "s", {"n": str(i)}, smokes=("a", "b")) for i in range(3)]
    records = [rec(cells[0], "a", "fail", failure_class="oom"), rec(cells[1], "a", "fail", failure_class="oom"),
               rec(cells[1], "b", "degraded", failure_class="slow"), rec(cells[2], "a", "fail", failure_class="nan"),
               rec(cells[2], "b", "pass")]
    groups = report_html.failure_summary(build_report(records, cells))
    assert [(g.status, g.smoke, g.failure_class, g.results, g.cells) for g in groups] == [
        ("fail", "a", "oom", 2, 2), ("fail", "a", "nan", 1, 1), ("degraded", "b", "slow", 1, 1)]
    assert groups[0].hosts == [H200.label()]


def test_a_cells_link_opens_its_details_page_in_chromium(written) -> None:  # noqa: ANN001
    need_chromium()
    report, out = written
    failing = report.failures[0][0]
    with report_page((out / "index.html").resolve().as_uri(), width=1300, height=900) as browser:
        chip = browser.evaluate(f"document.querySelector('#pivot-{failing.stack} a.chip').getAttribute('href')")
        assert re.fullmatch(r"cells-\d{3}\.html#cell-\w{12}", chip)  # the pivot links to the pages too
        with browser.page.expect_navigation():
            browser.evaluate(f"document.querySelector('tr.cell-row[data-cell=\"{failing.id}\"] a.cell-link').click()")
        assert re.search(r"/cells-\d{3}\.html$", browser.evaluate("location.pathname"))
        assert browser.evaluate("location.hash") == f"#cell-{failing.id}"
        section = f"document.getElementById('cell-{failing.id}')"
        assert browser.evaluate(f"getComputedStyle({section}).display") == "block"
        assert f"CUDA error in cell {int(failing.id, 16)}" in browser.evaluate(f"{section}.innerText")
        top = browser.evaluate(f"{section}.getBoundingClientRect().top")
        assert 0 <= top < 900  # scrolled to it


def test_report_json_on_stdout_is_the_file(tmp_path, capsys, monkeypatch) -> None:  # noqa: ANN001
    from pinmatrix.cli import main

    monkeypatch.chdir(tmp_path)  # no matrix.toml: cells are named by id
    cell = make_cell("c0ffee000001", "s", {"n": "1"}, smokes=("a",))
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([rec(cell, "a", "fail", failure_class="oom").to_dict()]))
    assert main(["report", "--results", str(tmp_path / "none.sqlite"), "--from-json", str(rows), "--out",
                 str(tmp_path / "out"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((tmp_path / "out" / "report.json").read_text())
    assert printed["failures"][0]["cell"] == "c0ffee000001"
