"""The HTML report in a real headless Chromium (Debian's chromium, driven by Playwright through its
executable_path: no browser download): the tables render, the axis filters and the status filter hide rows, the
pivot follows the filters, a cell link opens its smoke details, the diff view names the differing axes; and
report.browser's screenshot, taken by chromium's own --headless --screenshot, is a PNG of the asked size."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest
from report_browser import Page, need_chromium, report_page
from report_data import H200, make_cell, rec

from pinmatrix.report.browser import BrowserError, screenshot_file
from pinmatrix.report.model import build_report
from pinmatrix.report.write import write_reports


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Page, Any, Any]]:
    need_chromium()
    tmp = tmp_path_factory.mktemp("report")
    cells, records = [], []
    n = 0
    for driver in ("580.142", "590.48.01", "595.58.03"):
        for torch in ("2.9.1", "2.10.0"):
            n += 1
            c = make_cell(f"{n:012x}", "gb10", {"driver": driver, "cuda": "13.0", "torch": torch},
                          smokes=("host-probe", "nvfp4-gemm"))
            cells.append(c)
            records.append(rec(c, "host-probe", "pass", host=H200))
            if driver == "595.58.03":
                records.append(rec(c, "nvfp4-gemm", "fail", failure_class="illegal-memory-access",
                                   reason="cuTensorMapEncodeTiled", log_path=str(tmp / "logs" / "r1" / "nvfp4.log")))
            elif driver == "590.48.01":
                records.append(rec(c, "nvfp4-gemm", "degraded", failure_class="memory-leak",
                                   metrics={"leak_mib": 812.5}))
            else:
                records.append(rec(c, "nvfp4-gemm", "pass", metrics={"tflops": 401.2}))
    other = make_cell("0000000000aa", "demo", {"six": "1.17.0"}, smokes=("python-imports",))
    cells.append(other)
    (tmp / "logs" / "r1").mkdir(parents=True)  # a report reads logs only from under ROOT/RUN_ID/
    (tmp / "logs" / "r1" / "nvfp4.log").write_text("loading\nRuntimeError: illegal memory access in cuTensorMapEncodeTiled\n")
    paths = write_reports(build_report(records, cells, pivot=("driver", "torch"), log_roots=[tmp / "logs"]),
                          tmp / "out", ["html"])
    with report_page(paths["html"].resolve().as_uri(), width=1300, height=900) as browser:
        yield browser, tmp, paths["html"]


def visible_rows(browser: Page, stack: str) -> list[str]:
    return browser.evaluate(
        f"Array.from(document.querySelectorAll('table.cells[data-stack=\"{stack}\"] tr.cell-row'))"
        ".filter(tr => !tr.hidden && tr.offsetParent !== null).map(tr => tr.dataset.cell)"
    )


def choose(browser: Page, selector: str, value: str) -> None:
    browser.evaluate(
        f"(() => {{ const s = document.querySelector('{selector}'); s.value = {value!r};"
        " s.dispatchEvent(new Event('change')); })()"
    )


def test_tables_render(page) -> None:
    browser, _, _ = page
    assert browser.evaluate("document.querySelectorAll('section.stack').length") == 2
    assert len(visible_rows(browser, "gb10")) == 6
    assert browser.evaluate("document.querySelector('section.stack[data-stack=\"gb10\"] h2 .badge').textContent") == "FAIL"
    # the row's colour follows its worst smoke: computed style, not just a class name
    colour = browser.evaluate(
        "getComputedStyle(document.querySelector('tr[data-cell=\"000000000005\"] td')).borderLeftColor")
    assert colour == "rgb(210, 59, 59)"
    # default pivot: driver rows x torch columns, each bucket coloured by its worst cell
    assert browser.evaluate("document.querySelector('#pivot-gb10 table').dataset.rowAxis") == "driver"
    statuses = browser.evaluate("Array.from(document.querySelectorAll('#pivot-gb10 td.pv')).map(td => td.dataset.status)")
    assert statuses == ["pass", "pass", "degraded", "degraded", "fail", "fail"]


def test_filters_hide_rows_and_update_pivot(page) -> None:
    browser, _, _ = page
    choose(browser, 'select.filter[data-stack="gb10"][data-axis="driver"]', "595.58.03")
    assert visible_rows(browser, "gb10") == ["000000000005", "000000000006"]
    assert browser.evaluate("document.querySelector('span.count[data-stack=\"gb10\"]').textContent") == "2 of 6 cells"
    assert browser.evaluate("document.querySelectorAll('#pivot-gb10 td.pv[data-status]').length") == 2
    choose(browser, 'select.filter[data-stack="gb10"][data-axis="torch"]', "2.10.0")
    assert visible_rows(browser, "gb10") == ["000000000006"]
    choose(browser, 'select.filter[data-stack="gb10"][data-axis="driver"]', "")
    choose(browser, 'select.filter[data-stack="gb10"][data-axis="torch"]', "")
    choose(browser, 'select.filter[data-stack="gb10"][data-axis="@status"]', "degraded")
    assert visible_rows(browser, "gb10") == ["000000000003", "000000000004"]
    assert len(visible_rows(browser, "demo")) == 1  # filters are per stack
    choose(browser, 'select.filter[data-stack="gb10"][data-axis="@status"]', "")
    assert len(visible_rows(browser, "gb10")) == 6
    # re-pivot on other axes
    choose(browser, 'select.pivot-axis[data-stack="gb10"][data-role="row"]', "torch")
    choose(browser, 'select.pivot-axis[data-stack="gb10"][data-role="col"]', "driver")
    head = browser.evaluate("Array.from(document.querySelectorAll('#pivot-gb10 thead th')).map(th => th.textContent)")
    assert head[1:] == ["580.142", "590.48.01", "595.58.03"]


def test_click_through_to_smoke_details(page) -> None:
    browser, _, _ = page
    hidden = browser.evaluate("getComputedStyle(document.getElementById('cell-000000000005')).display")
    assert hidden == "none"
    browser.evaluate("document.querySelector('tr[data-cell=\"000000000005\"] a.cell-link').click()")
    assert browser.evaluate("location.hash") == "#cell-000000000005"
    assert browser.evaluate("getComputedStyle(document.getElementById('cell-000000000005')).display") == "block"
    text = browser.evaluate("document.getElementById('cell-000000000005').innerText")
    assert "illegal-memory-access" in text and "cuTensorMapEncodeTiled" in text
    assert browser.evaluate("document.querySelector('#cell-000000000005 details.log').open") is True
    metrics = browser.evaluate("document.getElementById('cell-000000000003').textContent")
    assert "leak_mib" in metrics and "812.5" in metrics


def test_diff_names_the_axes_that_differ(page) -> None:
    browser, _, _ = page
    choose(browser, "#diff-a", "000000000001")
    choose(browser, "#diff-b", "000000000006")
    assert browser.evaluate("document.getElementById('diff-axes').dataset.axes") == "driver,torch"
    assert "Differs in 2 axes: driver, torch" in browser.evaluate("document.getElementById('diff-axes').textContent")
    changed = browser.evaluate("Array.from(document.querySelectorAll('#diff-result tr.changed td:first-child')).map(td => td.textContent)")
    assert changed == ["driver", "torch", "smoke nvfp4-gemm", "status"]
    choose(browser, "#diff-b", "000000000002")
    assert browser.evaluate("document.getElementById('diff-axes').dataset.axes") == "torch"


def test_screenshot_is_a_png_of_the_asked_size(page) -> None:
    _, tmp, html = page
    out = tmp / "report.png"
    width, height = screenshot_file(html, out, width=1200, max_height=700, suffix="#cell-000000000005")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (width, height) == (1200, 700)
    assert screenshot_file(html, tmp / "tall.png", width=800)[1] == 2400  # the default height


def test_a_chromium_that_writes_nothing_is_one_error(page, tmp_path) -> None:  # noqa: ANN001
    _, _, html = page
    with pytest.raises(BrowserError, match=r"^chromium exited with status 0 and no screenshot"):
        screenshot_file(html, tmp_path / "x.png", executable="/bin/true")
    assert not (tmp_path / "x.png").exists()
