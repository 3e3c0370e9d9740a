"""``pinmatrix report``: render the results store as HTML, Markdown, JUnit XML and JSON."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

from pinmatrix.cell import Cell
from pinmatrix.commands._common import add_limit_argument, examples, read_input
from pinmatrix.errors import PinmatrixError
from pinmatrix.matrix.selection import load
from pinmatrix.paths import LOGS_DIR, REPORT_DIR
from pinmatrix.project.catalogue import SmokeError, find_smoke_dir, load_catalogue
from pinmatrix.project.matrix_toml import Matrix, require_stack
from pinmatrix.project.policy import policy_for
from pinmatrix.release.promote import required_smoke_names
from pinmatrix.report.jsonstream import write_json
from pinmatrix.report.model import SEVERITY, STATUS_LABELS
from pinmatrix.report.settings import ReportSettings, publish
from pinmatrix.results.store import DEFAULT_PATH, ResultsStore, SmokeRecord
from pinmatrix.sanitize import terminal_text
from pinmatrix.statuses import FORMATS, SEVERITY_ORDER


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report", help="write the HTML report, a Markdown summary, JUnit XML and JSON from the results store",
        description="Join the latest result of every cell x host x smoke with the matrix's cells and write "
                    "index.html (one table per stack coloured by each cell's worst smoke status, filters by axis "
                    "value, a pivot of two axes, a diff of two cells, smoke details with metrics and log "
                    "excerpts), summary.md (for a CI job summary), junit.xml (one test case per cell x smoke) "
                    "and report.json.",
        **examples(f"pinmatrix report                           # {REPORT_DIR}/: index.html, summary.md, junit.xml, report.json",
                   "pinmatrix report --stack demo -f md --fail-on fail",
                   "pinmatrix report --from-json results.json --screenshot report.png"),
    )
    p.add_argument("matrix", nargs="?", type=Path, default=None,
                   help="the matrix file (default: ./matrix.toml when it exists; without one, cells are named by id)")
    add_limit_argument(p)
    p.add_argument("--results", type=Path, default=DEFAULT_PATH, metavar="PATH",
                   help=f"the results store (default: {DEFAULT_PATH})")
    p.add_argument("--from-json", type=Path, action="append", default=[], metavar="FILE",
                   help="also read exported result rows from FILE (a JSON list, as `pinmatrix ci k8s` jobs "
                        "write them; - reads stdin); repeatable; the store is not modified")
    p.add_argument("--logs", type=Path, action="append", default=[], metavar="DIR",
                   help="a folder of smoke logs (as `pinmatrix smoke --logs DIR` writes them: DIR/RUN/CELL/SMOKE.log); "
                        "repeatable. A log is read into the report only from under DIR/RUN/ of its own run, for DIR "
                        f"one of these, ./{LOGS_DIR}, or logs/ beside the store or a --from-json file")
    p.add_argument("--arch-scan", type=Path, action="append", default=[], metavar="FILE",
                   help="add the cells x packages table of a `pinmatrix arch-scan --out DIR` run (DIR/arch-scan.json) "
                        "to every format; repeatable")
    p.add_argument("--out", "-o", type=Path, default=REPORT_DIR, metavar="DIR",
                   help=f"output directory (default: {REPORT_DIR})")
    p.add_argument("--format", "-f", dest="formats", action="append", choices=FORMATS, default=None,
                   help="write only this format (repeatable; default: all of html, md, junit, json)")
    p.add_argument("--stack", "-s", metavar="S", action="append", help="only stack S (repeatable)")
    p.add_argument("--pivot", metavar="ROW,COL", help="the pivot's default axes, e.g. 'driver,torch'")
    p.add_argument("--title", default=None, help="page title (default: '<matrix name> report')")
    p.add_argument("--screenshot", type=Path, metavar="PNG",
                   help="also save a screenshot of index.html's first 2400 px (chromium --headless --screenshot)")
    p.add_argument("--screenshot-at", default="", metavar="SUFFIX",
                   help="appended to the page's URL for the screenshot: '?a=ID&b=ID' preselects the diff view, "
                        "'#cell-ID' opens a cell's smoke details")
    p.add_argument("--json", action="store_true",
                   help="also print the report (report.json's content) on stdout; the file list goes to stderr")
    p.add_argument("--fail-on", choices=SEVERITY_ORDER[1:], metavar="STATUS",
                   help="exit 1 when any cell's worst status is STATUS or worse "
                        f"(order: {' < '.join(SEVERITY_ORDER)})")
    p.set_defaults(func=run)


def _read_json_rows(path: Path) -> list[SmokeRecord]:

    try:
        rows = json.loads(read_input(path, "results file"))
    except json.JSONDecodeError as err:
        raise PinmatrixError(f"{path}: not a JSON results file: {err}") from None
    if not isinstance(rows, list):
        raise PinmatrixError(f"{path}: expected a JSON list of result rows")
    try:
        return [SmokeRecord.from_dict(r) for r in rows]
    except PinmatrixError as err:
        raise PinmatrixError(f"{path}: {err}") from None


def log_roots(args: argparse.Namespace) -> list[Path]:
    """The folders whose RUN_ID/ subfolders a report may read logs from: --logs, ./``LOGS_DIR`` (the
    default of `pinmatrix smoke --logs`), and logs/ beside the store and beside each --from-json file."""
    roots = [*args.logs, Path.cwd() / LOGS_DIR, args.results.parent / "logs"]
    roots += [p.parent / "logs" for p in args.from_json]
    return list(dict.fromkeys(r.resolve() for r in roots))


def _catalogue(matrix_path: Path | None) -> list[str] | None:
    """The smoke catalogue's names (to expand group selectors), or None when there is no catalogue here."""

    explicit = matrix_path.resolve().parent / "smoke" if matrix_path is not None else None
    try:
        directory = find_smoke_dir(explicit if explicit is not None and explicit.is_dir() else None)
        return [s.name for s in load_catalogue(directory)]
    except SmokeError:
        return None


def _required_smokes(matrix: Matrix, cells: list[Cell], catalogue: list[str] | None) -> dict[str, list[str]]:
    """Per cell: the smokes its stack's promotion policy requires (a cell whose required smokes all pass is
    reported as passing, however many optional smokes skipped)."""

    policies = {name: policy_for(matrix, name) for name in {c.stack for c in cells}}
    return {c.id: required_smoke_names(c, policies[c.stack], catalogue)[0] for c in cells}


def run(args: argparse.Namespace) -> int:
    settings, cells = report_settings(args)
    outcome = publish(settings, _records(args, cells))
    say = functools.partial(print, file=sys.stderr if args.json else sys.stdout)
    for fmt in settings.formats:
        say(f"{fmt:6} {outcome.paths[fmt]}")
    if outcome.screenshot is not None:
        w, h = outcome.screenshot
        say(f"png    {settings.screenshot} ({w}x{h})")
    counts = outcome.report.counts
    summary = ", ".join(f"{counts[s]} {STATUS_LABELS[s]}" for s in sorted(counts, key=SEVERITY.__getitem__))
    say(f"{len(outcome.report.cells)} cells: {summary or 'none'}")
    for line in outcome.annotations:  # GitHub Actions reads workflow commands from stdout and stderr
        say(line)
    if args.json:
        write_json(outcome.report, sys.stdout)  # streamed: a fleet's report is never one string
    if outcome.failing:
        say(terminal_text(f"{len(outcome.failing)} cells at or past {args.fail_on}: "
                          + ", ".join(f"{c.id} ({c.status})" for c in outcome.failing)))
    return 1 if outcome.failing else 0


def report_settings(args: argparse.Namespace) -> tuple[ReportSettings, list[Cell]]:
    """The one place `report`'s settings are made: the command line over matrix.toml (its cells, required
    smokes, stack descriptions and name for the title)."""
    matrix_path, cells, required, descriptions, title = _from_matrix(args)
    settings = ReportSettings(
        out=args.out, formats=tuple(args.formats or FORMATS), title=title or "pinmatrix report", cells=cells,
        stacks=tuple(args.stack) if args.stack else None, pivot=_pivot(args.pivot), log_roots=tuple(log_roots(args)),
        catalogue=_catalogue(matrix_path), required=required, descriptions=descriptions,
        arch_scans=tuple(args.arch_scan), screenshot=args.screenshot, screenshot_at=args.screenshot_at,
        fail_on=args.fail_on, matrix_file=str(matrix_path or "matrix.toml"))
    return settings, cells


def _from_matrix(args: argparse.Namespace) -> tuple[Path | None, list[Cell], dict[str, list[str]] | None,
                                                    dict[str, str], str | None]:
    """The matrix (--matrix, else ./matrix.toml when there is one): its cells, each cell's required smokes,
    the stacks' descriptions and the report's title."""
    matrix_path = args.matrix
    if matrix_path is None and Path("matrix.toml").is_file():
        matrix_path = Path("matrix.toml")
    if matrix_path is None:
        return None, [], None, {}, args.title
    matrix, expansion = load(matrix_path)
    for name in args.stack or []:
        require_stack(matrix, name)
    cells = list(expansion.cells)
    descriptions = {name: stack.description for name, stack in matrix.stacks.items() if stack.description}
    return (matrix_path, cells, _required_smokes(matrix, cells, _catalogue(matrix_path)), descriptions,
            args.title or f"{matrix.settings.name} report")


def _pivot(text: str | None) -> tuple[str, str] | None:
    if not text:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise PinmatrixError(f"--pivot {text!r}: expected two different axes, e.g. 'driver,torch'")
    return parts[0], parts[1]


def _records(args: argparse.Namespace, cells: list[Cell]) -> list[SmokeRecord]:
    """The results store's rows (when there is one, or no --from-json), then the --from-json files' rows."""
    records: list[SmokeRecord] = []
    if args.results.exists() or not args.from_json:
        if not args.results.exists() and not cells:
            raise PinmatrixError(f"{args.results}: no results store (run `pinmatrix smoke` first, or pass --from-json)")
        if args.results.exists():
            records = ResultsStore(args.results).query()
    for path in args.from_json:
        records += _read_json_rows(path)
    return records
