"""Writing a report: each format streamed into a temporary file beside its target as it is rendered (report.json
a cell at a time, index.html and its detail pages as jinja2 makes them), then every file renamed into place once
all are written, so an error leaves the earlier report whole; detail pages of an earlier, larger report that this
one does not have are removed. ``render`` gives one format as text (index.html without its pages)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TextIO

from pinmatrix.atomic import atomic_path
from pinmatrix.report.html import PAGE_PATTERN, render_html, write_html
from pinmatrix.report.jsonstream import json_chunks, write_json
from pinmatrix.report.junit import render_junit
from pinmatrix.report.markdown import render_markdown
from pinmatrix.report.model import Report
from pinmatrix.statuses import FORMATS


def render(report: Report, fmt: str) -> str:
    if fmt == "html":
        return render_html(report)
    if fmt == "md":
        return render_markdown(report)
    if fmt == "junit":
        return render_junit(report)
    if fmt == "json":
        return "".join(json_chunks(report))
    raise ValueError(f"unknown report format {fmt!r}")


class _Staging:
    """Files written to temporaries in ``out_dir``, renamed into place together when ``stack`` closes cleanly
    (and removed when it does not)."""

    def __init__(self, out_dir: Path, stack: ExitStack) -> None:
        self.out_dir = out_dir
        self.stack = stack
        self.names: list[str] = []

    @contextmanager
    def open(self, name: str) -> Iterator[TextIO]:
        tmp = self.stack.enter_context(atomic_path(self.out_dir / name))
        self.names.append(name)
        with tmp.open("w", encoding="utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())


def _write_format(report: Report, fmt: str, staging: _Staging) -> None:
    if fmt == "html":
        write_html(report, staging.open)
        return
    with staging.open(FORMATS[fmt]) as handle:
        if fmt == "json":
            write_json(report, handle)
        else:
            handle.write(render(report, fmt))


def write_reports(report: Report, out_dir: Path, formats: Iterable[str] = tuple(FORMATS)) -> dict[str, Path]:
    """Write every format asked for (all or none of them replace the files there); returns format -> path."""
    formats = list(formats)
    unknown = [fmt for fmt in formats if fmt not in FORMATS]
    if unknown:
        raise ValueError(f"unknown report format {unknown[0]!r}")
    out_dir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        staging = _Staging(out_dir, stack)
        for fmt in formats:
            _write_format(report, fmt, staging)
    if "html" in formats:
        for stale in out_dir.iterdir():
            if PAGE_PATTERN.fullmatch(stale.name) and stale.name not in staging.names:
                stale.unlink(missing_ok=True)
    return {fmt: out_dir / FORMATS[fmt] for fmt in formats}

