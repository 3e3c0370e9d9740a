"""The static HTML report: one self-contained page (inline CSS and script, no network), rendered with jinja2."""

from __future__ import annotations

import json
from typing import Any

import jinja2

from pinmatrix.report.archscan import arch_scan_html
from pinmatrix.report.model import SEVERITY, STATUS_LABELS, Report, report_to_dict

# Display order of the legend and the status filter: best first.
STATUS_ORDER: list[str] = sorted(SEVERITY, key=SEVERITY.__getitem__)


def _fmtnum(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _script_json(data: Any) -> str:
    """JSON safe to embed inside a <script> element: no '</script>', no '<!--'."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("pinmatrix.report", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmtnum"] = _fmtnum
    return env


def render_html(report: Report) -> str:
    template = environment().get_template("report.html.j2")
    return template.render(
        report=report,
        statuses=STATUS_ORDER,
        labels=STATUS_LABELS,
        data_json=_script_json(report_to_dict(report, with_results=False)),
        labels_json=_script_json(STATUS_LABELS),
        severity_json=_script_json(SEVERITY),
        arch_scan_html=arch_scan_html(report.arch_scan) if report.arch_scan else "",
    )
