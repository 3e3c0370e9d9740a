"""The driver as a tested axis in the report: the cells x hosts grid names each host's driver and, per cell, the
worst status on each driver its results were measured on (HTML, Markdown, JSON)."""

from __future__ import annotations

import json

from report_browser import report_page
from report_data import CPU, make_cell, rec

from pinmatrix.report.model import build_report
from pinmatrix.report.write import render
from pinmatrix.results.store import HostFingerprint


def _gb10(driver: str) -> HostFingerprint:
    return HostFingerprint.make(hostname="spark", gpu_name="NVIDIA GB10", gpu_count=1, driver=driver,
                                capability="12.1", cuda_driver_api="13.0")


def _report():  # noqa: ANN202
    cell = make_cell("0000000000aa", "gb10", {"driver": "580.142", "arch": "12.1a"}, smokes=("unified-memory-leak",),
                     arch_flags=("12.1a",), compute_capability="12.1")
    other = make_cell("0000000000bb", "gb10", {"driver": "580.142", "arch": "12.0f"}, smokes=("unified-memory-leak",),
                      arch_flags=("12.0f",), compute_capability="12.1")
    records = [rec(cell, "unified-memory-leak", "pass", host=_gb10("580.142")),
               rec(cell, "unified-memory-leak", "fail", host=_gb10("590.48.01"), failure_class="memory-leak"),
               rec(cell, "unified-memory-leak", "pass", host=_gb10("595.58.03")),
               rec(other, "unified-memory-leak", "pass", host=_gb10("580.142")),
               rec(other, "unified-memory-leak", "skip", host=CPU)]
    return build_report(records, [cell, other])


def test_each_cell_says_how_it_did_on_each_driver() -> None:
    (stack,) = _report().stacks
    rows = {c.id: c for c in stack.cells}
    assert rows["0000000000aa"].driver_status == {"580.142": "pass", "590.48.01": "fail", "595.58.03": "pass"}
    assert rows["0000000000bb"].driver_status == {"580.142": "pass", "none": "skip"}
    assert sorted(stack.host_drivers.values()) == ["580.142", "590.48.01", "595.58.03", "none"]
    doc = json.loads(render(_report(), "json"))["stacks"][0]
    assert doc["cells"][0]["driver_status"]["590.48.01"] == "fail" and "host_drivers" in doc


def test_the_grid_has_a_driver_row_and_column_in_html_and_markdown() -> None:
    report = _report()
    page = render(report, "html")
    assert '<tr class="driver-row"><th class="muted">driver</th>' in page
    assert page.count('<th class="gh mono" data-driver="590.48.01">590.48.01</th>') == 1
    assert '<span class="mono" data-driver="590.48.01" data-status="fail">' in page
    md = render(report, "md")
    row = next(line for line in md.splitlines() if line.startswith("| `0000000000aa` | 🟢"))
    assert row.endswith("| 🟢&nbsp;580.142 🔴&nbsp;590.48.01 🟢&nbsp;595.58.03 |")
    assert "| by driver |" in md


GRID_BOX = """(() => { const t = document.querySelector('table.grid'); t.scrollIntoView();
  const h = t.closest('div').previousElementSibling; const a = h.getBoundingClientRect(), b = t.getBoundingClientRect();
  return {x: 0, y: a.top + window.scrollY - 8, width: Math.ceil(b.right) + 16, height: Math.ceil(b.bottom - a.top) + 16,
          driver_row: !!t.querySelector('tr.driver-row')}; })()"""


def test_a_screenshot_of_the_grid_with_its_drivers(tmp_path) -> None:  # noqa: ANN001
    """The cells x hosts grid in headless Chromium, as docs/report-drivers.png shows it (`PINMATRIX_UPDATE_DOCS=1`
    rewrites that file from this made-up report: a GB10 cell clean on 580.142 and 595.58.03, failing its
    unified-memory smoke on 590.48.01)."""
    import os
    import struct
    from pathlib import Path
    page = tmp_path / "index.html"
    page.write_text(render(_report(), "html"))
    with report_page(page.as_uri(), width=1100, height=900) as browser:
        box = browser.evaluate(GRID_BOX)
        assert box.pop("driver_row") is True
        data = browser.screenshot(box)
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24])[1] > 60
    if os.environ.get("PINMATRIX_UPDATE_DOCS") == "1":
        (Path(__file__).resolve().parents[3] / "docs" / "report-drivers.png").write_bytes(data)
