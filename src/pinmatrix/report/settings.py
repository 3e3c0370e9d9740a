"""What one report is asked for (``ReportSettings``, built once by ``pinmatrix report`` from the command line over
matrix.toml) and the one step that makes it: join, render every format, screenshot, judge (``publish``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pinmatrix.cell import Cell
from pinmatrix.errors import PinmatrixError
from pinmatrix.paths import REPORT_DIR
from pinmatrix.report.archscan import arch_scan_tables, load_arch_scans
from pinmatrix.report.browser import screenshot_file
from pinmatrix.report.github_actions import append_step_summary, report_annotations, under_github
from pinmatrix.report.model import SEVERITY, CellRow, Report, build_report
from pinmatrix.report.write import render, write_reports
from pinmatrix.results.store import SmokeRecord
from pinmatrix.statuses import FORMATS


@dataclass(frozen=True)
class ReportSettings:
    out: Path = REPORT_DIR
    formats: tuple[str, ...] = tuple(FORMATS)
    title: str = "pinmatrix report"
    cells: Sequence[Cell] = ()  # the matrix's cells (none: cells are named by id)
    stacks: tuple[str, ...] | None = None  # only these stacks
    pivot: tuple[str, str] | None = None
    log_roots: tuple[Path, ...] = ()  # where logs are read from (under RUN/ of their own run only)
    catalogue: Sequence[str] | None = None  # the smoke names, to expand group selectors
    required: dict[str, list[str]] | None = None  # cell id -> the smokes its promotion policy requires
    descriptions: dict[str, str] = field(default_factory=dict)  # stack -> description
    arch_scans: tuple[Path, ...] = ()  # arch-scan.json files whose tables join every format
    screenshot: Path | None = None  # a PNG of index.html (needs the html format)
    screenshot_at: str = ""  # appended to the page's URL for the screenshot
    fail_on: str | None = None  # a status: cells at or past it make the report fail
    matrix_file: str = "matrix.toml"  # what GitHub annotations point at

    def __post_init__(self) -> None:
        if self.screenshot is not None and "html" not in self.formats:
            raise PinmatrixError("--screenshot needs the html format")


@dataclass
class ReportOutcome:
    report: Report
    paths: dict[str, Path]  # format -> the file written
    screenshot: tuple[int, int] | None = None  # its width and height
    failing: list[CellRow] = field(default_factory=list)  # cells at or past fail_on
    annotations: list[str] = field(default_factory=list)  # GitHub Actions workflow commands, to print on stdout


def publish(settings: ReportSettings, records: Sequence[SmokeRecord]) -> ReportOutcome:
    """The report of ``records`` joined with the cells, written in every format asked for (each file whole or
    not at all), with its screenshot; the cells at or past ``fail_on``. Under GitHub Actions, the Markdown summary
    is appended to the job's summary and the failed smokes become annotations (``report.github_actions``)."""
    report = build_report(records, settings.cells, stack=settings.stacks, pivot=settings.pivot, title=settings.title,
                          log_roots=settings.log_roots, catalogue=settings.catalogue, required=settings.required,
                          descriptions=settings.descriptions)
    if settings.arch_scans:
        report.arch_scan = arch_scan_tables(load_arch_scans(list(settings.arch_scans)))
    outcome = ReportOutcome(report, write_reports(report, settings.out, settings.formats))
    if settings.screenshot is not None:
        outcome.screenshot = screenshot_file(outcome.paths["html"], settings.screenshot, suffix=settings.screenshot_at)
    if under_github():
        outcome.annotations = report_annotations(report, settings.matrix_file)
        append_step_summary(render(report, "md"))
    if settings.fail_on:
        outcome.failing = [c for c in report.cells if SEVERITY[c.status] >= SEVERITY[settings.fail_on]]
    return outcome
