"""GitHub Actions' own ways of showing a run, used only under ``GITHUB_ACTIONS=true``: an ``::error`` workflow
command per failed smoke of a cell or per cell whose build failed (an annotation on the run, pointing at the
matrix file), a ``::warning`` per infrastructure error (the harness, not the cell), and the Markdown summary
appended to ``$GITHUB_STEP_SUMMARY``. Elsewhere nothing is printed or written.

Workflow commands are one line each: the message's ``%``, CR and LF are written ``%25``, ``%0D``, ``%0A`` and a
property's ``:`` and ``,`` also ``%3A``, ``%2C`` (GitHub's toolkit, ``command.ts``), after ``terminal_text``
removed escape sequences, so a smoke's output cannot end the line and issue a command of its own."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from pinmatrix.image.settings import CellBuildResult
from pinmatrix.report.model import Report, worst
from pinmatrix.sanitize import terminal_text
from pinmatrix.statuses import INFRA_STATUSES

FAILED = ("fail", "degraded")


def under_github(environ: Mapping[str, str] | None = None) -> bool:
    return (os.environ if environ is None else environ).get("GITHUB_ACTIONS") == "true"


def _data(text: str) -> str:
    return terminal_text(text, newlines=True).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def workflow_command(kind: str, message: str, *, file: str | None = None, title: str | None = None) -> str:
    """``::error file=F,title=T::message`` (``kind``: error, warning, notice), every value escaped."""
    props = ",".join(f"{key}={_prop(value)}" for key, value in (("file", file), ("title", title)) if value)
    return f"::{kind}{' ' + props if props else ''}::{_data(message)}"


def report_annotations(report: Report, matrix_file: str) -> list[str]:
    """One ``::error`` per failed or degraded smoke of a cell, one ``::warning`` per infrastructure error."""
    lines = []
    for cell in report.cells:
        for smoke in cell.smokes:
            results = [r for r in cell.results if r.smoke == smoke]
            status = worst(r.status for r in results)
            first = next((r for r in results if r.status == status), None)
            if first is None or (status not in FAILED and status not in INFRA_STATUSES):
                continue
            cls = f" [{first.failure_class}]" if first.failure_class else ""
            where = f"{status}{cls} on {first.host_label}: {first.reason}".rstrip(": ")
            kind = "error" if status in FAILED else "warning"
            lines.append(workflow_command(kind, where, file=matrix_file,
                                          title=f"{cell.name} ({cell.id}) {smoke}"))
    return lines


def build_annotations(results: Iterable[CellBuildResult], matrix_file: str,
                      environ: Mapping[str, str] | None = None) -> list[str]:
    """Under GitHub Actions: one ``::error`` per cell whose build failed; elsewhere none."""
    if not under_github(environ):
        return []
    return [workflow_command("error", f"build failed: {r.reason}" + (f" (log: {r.log})" if r.log else ""),
                             file=matrix_file, title=f"{r.cell.name} ({r.cell.id})")
            for r in results if r.status == "failed"]


def append_step_summary(markdown: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """Append ``markdown`` to ``$GITHUB_STEP_SUMMARY`` under GitHub Actions (the file GitHub shows on the run's
    page); the file appended to, or None when not there."""
    env = os.environ if environ is None else environ
    target = env.get("GITHUB_STEP_SUMMARY")
    if not under_github(env) or not target:
        return None
    with open(target, "a", encoding="utf-8") as out:
        out.write(markdown if markdown.endswith("\n") else markdown + "\n")
    return Path(target)
