"""The static HTML report, rendered with jinja2 and streamed to its files: index.html (inline CSS and script, no
network) leads with what broke and the cells x hosts grid. A report of up to ``INLINE_CELLS`` cells holds every
cell's smoke details itself; a larger one (a fleet: thousands of cells) lists the worst ``FAILURES_LISTED`` broken
results with a summary of all of them, and writes the cells' details on pages of ``CELLS_PER_PAGE`` beside it
(``cells-001.html``, ...), each cell linked to its page: a static folder that opens from file://."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, TextIO

import jinja2

from pinmatrix.report.archscan import arch_scan_html
from pinmatrix.report.model import FAILURES_LISTED, SEVERITY, STATUS_LABELS, CellRow, Report

# Display order of the legend and the status filter: best first.
STATUS_ORDER: list[str] = sorted(SEVERITY, key=SEVERITY.__getitem__)
INLINE_CELLS = 200
"""Up to this many cells, index.html holds every cell's details; beyond, they are on pages of their own."""
CELLS_PER_PAGE = 100
PAGE_NAME = "cells-{:03d}.html"
PAGE_PATTERN = re.compile(r"cells-\d{3,}\.html")
"""The detail pages' file names: numbered, never made from a cell id or any other recorded text."""

Opener = Callable[[str], AbstractContextManager[TextIO]]


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


@dataclass
class Layout:
    """Where each cell's details are: inline (no pages) or on a numbered page."""

    pages: list[tuple[str, list[CellRow]]] = field(default_factory=list)
    hrefs: dict[str, str] = field(default_factory=dict)  # cell id -> the link to its details
    stack_pages: dict[str, list[str]] = field(default_factory=dict)  # stack -> the pages holding its cells


def layout(report: Report) -> Layout:
    cells = report.cells
    if len(cells) <= INLINE_CELLS:
        return Layout(hrefs={c.id: f"#cell-{c.id}" for c in cells})
    out = Layout()
    for start in range(0, len(cells), CELLS_PER_PAGE):
        name = PAGE_NAME.format(len(out.pages) + 1)
        chunk = cells[start:start + CELLS_PER_PAGE]
        out.pages.append((name, chunk))
        for c in chunk:
            out.hrefs[c.id] = f"{name}#cell-{c.id}"
            names = out.stack_pages.setdefault(c.stack, [])
            if name not in names:
                names.append(name)
    return out


@dataclass(frozen=True)
class FailureGroup:
    """The broken results of one status, smoke and failure class: how many, in how many cells, on which hosts."""

    status: str
    smoke: str
    failure_class: str | None
    results: int
    cells: int
    hosts: list[str]


def failure_summary(report: Report) -> list[FailureGroup]:
    """Every broken result counted by status, smoke and failure class; the worst status first, then the most
    results."""
    groups: dict[tuple[str, str, str | None], list[tuple[str, str]]] = defaultdict(list)
    for cell, r in report.failures:
        groups[(r.status, r.smoke, r.failure_class)].append((cell.id, r.host_label))
    rows = [FailureGroup(status, smoke, fc, len(found), len({c for c, _ in found}), sorted({h for _, h in found}))
            for (status, smoke, fc), found in groups.items()]
    return sorted(rows, key=lambda g: (-SEVERITY[g.status], -g.results, g.smoke, g.failure_class or ""))


def page_data(report: Report, hrefs: dict[str, str]) -> dict[str, Any]:
    """What the page's script needs (filters, pivot, diff): each cell's pins, its status, its smokes' statuses in
    the order of its stack's ``smokes`` (null: not the cell's), and its link."""
    return {"stacks": [{"name": s.name, "smokes": s.smokes, "cells": [
        {"id": c.id, "name": c.name, "pins": c.pins, "status": c.status, "failure_class": c.failure_class,
         "smokes": [c.smoke_status.get(smoke) for smoke in s.smokes], "href": hrefs[c.id]}
        for c in s.cells]} for s in report.stacks]}


def _index_chunks(env: jinja2.Environment, report: Report, where: Layout) -> Iterator[str]:
    return env.get_template("report.html.j2").generate(
        report=report, statuses=STATUS_ORDER, labels=STATUS_LABELS, hrefs=where.hrefs, pages=bool(where.pages),
        stack_pages=where.stack_pages, listed=FAILURES_LISTED, failure_summary=failure_summary(report),
        data_json=_script_json(page_data(report, where.hrefs)), labels_json=_script_json(STATUS_LABELS),
        severity_json=_script_json(SEVERITY),
        arch_scan_html=arch_scan_html(report.arch_scan) if report.arch_scan else "",
    )


def write_html(report: Report, open_file: Opener) -> list[str]:
    """Write index.html and, for a report of more than ``INLINE_CELLS`` cells, its detail pages, each through
    ``open_file(name)`` as it is rendered; returns the names written."""
    env = environment()
    where = layout(report)
    with open_file("index.html") as handle:
        handle.writelines(_index_chunks(env, report, where))
    page = env.get_template("cells.html.j2")
    names = [name for name, _ in where.pages]
    total = len(report.cells)
    for n, (name, cells) in enumerate(where.pages):
        first = n * CELLS_PER_PAGE + 1
        with open_file(name) as handle:
            handle.writelines(page.generate(report=report, cells=cells, labels=STATUS_LABELS, first=first,
                                            last=first + len(cells) - 1, total=total, page_names=names,
                                            this_page=name))
    return ["index.html", *names]


def render_html(report: Report) -> str:
    """index.html's text (the detail pages of a large report are written by ``write_html`` only)."""
    return "".join(_index_chunks(environment(), report, layout(report)))

