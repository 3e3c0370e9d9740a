"""Rendering a report in each format, and writing the files (each atomically, after all are rendered)."""


from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from pinmatrix.atomic import atomic_write_text
from pinmatrix.report.html import render_html
from pinmatrix.report.junit import render_junit
from pinmatrix.report.markdown import render_markdown
from pinmatrix.report.model import Report, report_to_dict
from pinmatrix.statuses import FORMATS


def render(report: Report, fmt: str) -> str:
    if fmt == "html":
        return render_html(report)
    if fmt == "md":
        return render_markdown(report)
    if fmt == "junit":
        return render_junit(report)
    if fmt == "json":
        return json.dumps(report_to_dict(report), indent=2, sort_keys=True) + "\n"
    raise ValueError(f"unknown report format {fmt!r}")


def write_reports(report: Report, out_dir: Path, formats: Iterable[str] = tuple(FORMATS)) -> dict[str, Path]:
    """Render every format first, then write each file atomically; returns format -> path."""
    rendered = {fmt: render(report, fmt) for fmt in formats}
    paths: dict[str, Path] = {}
    for fmt, text in rendered.items():
        path = out_dir / FORMATS[fmt]
        atomic_write_text(path, text)
        paths[fmt] = path
    return paths
