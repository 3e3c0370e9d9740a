"""The report's data model: results store records joined with the matrix's cells, grouped by stack.

Every output format (HTML, Markdown, JUnit XML, JSON) renders this one model, so they cannot disagree.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path
from typing import Any

from pinmatrix.cell import KNOWN_AXES, Cell
from pinmatrix.names import check_name
from pinmatrix.project.catalogue import matches
from pinmatrix.results.store import HostFingerprint, SmokeRecord
from pinmatrix.sanitize import terminal_text
from pinmatrix.statuses import SEVERITY, STATUS_LABELS

LOG_EXCERPT_LINES = 40
LOG_EXCERPT_CHARS = 6000
BROKEN: tuple[str, ...] = ("fail", "degraded", "xpass")
"""The statuses a report leads with: what broke (and the surprise of a known issue that no longer fails)."""
HISTORY_RUNS = 10
"""How many of the latest runs of a cell x smoke the report shows."""
FAILURES_LISTED = 100
"""How many broken results index.html and summary.md list one by one, worst first (report.json has them all)."""


def natural_key(text: str) -> list[tuple[int, int | str]]:
    """Sort key that orders '9.0' before '12.1' and '0.0.30' before '0.0.35'."""
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", text) if p]


def worst(statuses: Iterable[str]) -> str:
    """The worst of the given statuses; "missing" when there are none."""
    found = list(statuses)
    if not found:
        return "missing"
    return max(found, key=lambda s: SEVERITY.get(s, SEVERITY["fail"]))


def log_file(log_path: str | None, run_id: str, roots: Sequence[Path]) -> Path | None:
    """The file of a record's log, only if it lies under ``ROOT/RUN_ID/`` for one of the report's log roots
    (the run's own log folder), after every symlink and '..' is resolved; else None.

    A record says where its log was (``/x/<state folder>/logs/RUN/CELL/SMOKE.log``); the same tail is also
    looked for under each root, for logs copied elsewhere (results/h200/logs/RUN/...). A path that names
    anything else (/etc/passwd, ../../secret, a symlink out of the root) is never opened."""

    if not log_path:
        return None
    try:
        check_name(run_id, "run id")
    except ValueError:
        return None  # a run id such as '..' or 'a/b' could itself walk out of a root
    path = Path(log_path)
    tails = [path.parts[i + 1:] for i, part in enumerate(path.parts) if part == run_id]
    for root in roots:
        try:
            base = (Path(root) / run_id).resolve()
        except (OSError, RuntimeError):
            continue
        candidates = ([path] if path.is_absolute() else []) + [base.joinpath(*tail) for tail in tails if tail]
        for candidate in candidates:
            try:
                real = candidate.resolve()
                if real.is_relative_to(base) and real != base and real.is_file():
                    return real
            except (OSError, RuntimeError, ValueError):
                continue
    return None


def read_log_excerpt(log_path: str | None, roots: Sequence[Path] = (), run_id: str = "") -> str | None:
    """The last lines of a smoke's log, or None when the log is not under the run's own log folder
    (``log_file``) or not reachable from here."""
    path = log_file(log_path, run_id, roots)
    if path is None:
        return None
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    lines = terminal_text(text, newlines=True).splitlines()[-LOG_EXCERPT_LINES:]  # no escape sequences
    return "\n".join(lines)[-LOG_EXCERPT_CHARS:]


@dataclass(frozen=True)
class HistoryRun:
    """One recorded run of a smoke of a cell on one host."""

    run_id: str
    finished_at: str
    status: str
    host_label: str

    def to_dict(self) -> dict[str, str]:
        return {"run_id": self.run_id, "finished_at": self.finished_at, "status": self.status,
                "host_label": self.host_label}


@dataclass(frozen=True)
class SmokeHistory:
    """What the results store remembers of a cell x smoke: its last runs and, when the latest run broke, since
    when (the first broken run after the last pass, on the host that is broken now)."""

    runs: tuple[HistoryRun, ...] = ()  # the last HISTORY_RUNS, oldest first
    total: int = 0  # every plain run recorded
    failing_since: HistoryRun | None = None
    failing_runs: int = 0  # runs since then, that one included, all broken (on that host)
    last_pass: HistoryRun | None = None

    @classmethod
    def of(cls, runs: Sequence[HistoryRun]) -> SmokeHistory:
        """The history of one cell x smoke x host, from its runs oldest first."""
        since: HistoryRun | None = None
        streak = 0
        for run in reversed(runs):
            if run.status not in BROKEN:
                break
            since, streak = run, streak + 1
        last_pass = next((r for r in reversed(runs) if r.status == "pass"), None)
        return cls(tuple(runs[-HISTORY_RUNS:]), len(runs), since, streak, last_pass)

    @classmethod
    def merge(cls, parts: Sequence[SmokeHistory]) -> SmokeHistory:
        """One cell x smoke over its hosts: the latest runs of all, broken since the earliest host's start."""
        runs = sorted((r for h in parts for r in h.runs), key=lambda r: r.finished_at)
        broken = [h for h in parts if h.failing_since is not None]
        first = min(broken, key=lambda h: h.failing_since.finished_at if h.failing_since else "", default=None)
        passes = [h.last_pass for h in parts if h.last_pass is not None]
        return cls(tuple(runs[-HISTORY_RUNS:]), sum(h.total for h in parts),
                   first.failing_since if first else None, first.failing_runs if first else 0,
                   max(passes, key=lambda r: r.finished_at, default=None))

    def to_dict(self) -> dict[str, Any]:
        return {"runs": [r.to_dict() for r in self.runs], "total": self.total,
                "failing_since": self.failing_since.to_dict() if self.failing_since else None,
                "failing_runs": self.failing_runs,
                "last_pass": self.last_pass.to_dict() if self.last_pass else None}


@dataclass(frozen=True)
class SmokeResult:
    """The latest result of one smoke on one host."""

    smoke: str
    status: str
    failure_class: str | None
    reason: str
    host_id: str
    host_label: str
    host: dict[str, Any]
    run_id: str
    finished_at: str
    duration_s: float
    metrics: dict[str, Any]
    known_issue: str | None
    image_digest: str | None
    log_path: str | None
    log_excerpt: str | None
    host_vs_lock: dict[str, Any] | None = None  # host runtime: how the host differed from the cell's lock
    history: SmokeHistory = field(default_factory=SmokeHistory)  # this cell x smoke on this host

    def to_dict(self) -> dict[str, Any]:
        """The JSON form; the log excerpt stays in the HTML (report.json names the log's path)."""
        return {
            "smoke": self.smoke, "status": self.status, "failure_class": self.failure_class,
            "reason": self.reason, "host_id": self.host_id, "host_label": self.host_label, "host": self.host,
            "run_id": self.run_id, "finished_at": self.finished_at, "duration_s": self.duration_s,
            "metrics": self.metrics, "known_issue": self.known_issue, "image_digest": self.image_digest,
            "log_path": self.log_path, "host_vs_lock": self.host_vs_lock, "history": self.history.to_dict(),
        }


@dataclass
class CellRow:
    id: str
    stack: str
    name: str
    pins: dict[str, str]
    in_matrix: bool
    smokes: list[str]  # the smokes selected for the cell (plus any with results)
    results: list[SmokeResult]
    min_driver: str | None = None
    compute_capability: str | None = None
    gpu_required: bool = True
    required: list[str] | None = None  # smokes the stack's promotion policy requires (None: every smoke)

    @cached_property
    def smoke_status(self) -> dict[str, str]:
        """Per smoke: the worst latest status across hosts ("missing" when no host has run it), the worst
        smokes first (then in the cell's order)."""
        by_smoke: dict[str, list[str]] = defaultdict(list)
        for r in self.results:
            by_smoke[r.smoke].append(r.status)
        status = {s: worst(by_smoke.get(s, [])) for s in self.smokes}
        return dict(sorted(status.items(), key=lambda kv: -SEVERITY.get(kv[1], SEVERITY["fail"])))

    def host_status(self, hosts: Iterable[str]) -> dict[str, str]:
        """Per host label: the worst latest status of the cell's smokes there ("missing": nothing ran there)."""
        return {h: worst(r.status for r in self.results if r.host_label == h) for h in hosts}

    @cached_property
    def driver_status(self) -> dict[str, str]:
        """Per NVIDIA driver its results were measured on (lowest first; "none" for hosts without one): the worst
        latest status there. The driver is a tested axis: a cell clean on 580.142 may break on 590.48.01."""
        by_driver: dict[str, list[str]] = defaultdict(list)
        for r in self.results:
            by_driver[str(r.host.get("driver") or "none")].append(r.status)
        return {d: worst(by_driver[d]) for d in sorted(by_driver, key=natural_key)}

    @cached_property
    def history(self) -> dict[str, SmokeHistory]:
        """Per smoke with results: its runs over every host, and since when it is broken."""
        parts: dict[str, list[SmokeHistory]] = defaultdict(list)
        for r in self.results:
            parts[r.smoke].append(r.history)
        return {smoke: SmokeHistory.merge(p) for smoke, p in parts.items()}

    @cached_property
    def broken(self) -> list[SmokeResult]:
        """The latest results that broke (fail, degraded, unexpected pass), worst first."""
        return [r for r in self.results if r.status in BROKEN]

    @cached_property
    def status(self) -> str:
        """The worst status of the smokes that count: every required smoke, and the optional ones that ran
        and did not skip. So a cell whose required smokes all pass is "pass" although optional smokes skipped
        (NVFP4 smokes on sm_90); ``skipped`` says how many."""

        counted = [st for name, st in self.smoke_status.items()
                   if self.required is None or st not in ("skip", "missing")
                   or any(matches(r, name) for r in self.required)]
        return worst(counted) if self.smokes else "missing"

    @cached_property
    def skipped(self) -> int:
        """How many of the cell's smokes were skipped (on their worst host)."""
        return sum(st == "skip" for st in self.smoke_status.values())

    @cached_property
    def status_label(self) -> str:
        """The status in words, with the skip count when smokes skipped: "pass (2 skipped)"."""
        label = STATUS_LABELS[self.status]
        return f"{label} ({self.skipped} skipped)" if self.skipped and self.status != "skip" else label

    @cached_property
    def failure_class(self) -> str | None:
        """The failure class of the worst result (the first one found among the worst)."""
        target = self.status
        for r in sorted(self.results, key=lambda r: (r.smoke, r.host_label)):
            if r.status == target and r.failure_class:
                return r.failure_class
        return None

    @cached_property
    def counts(self) -> dict[str, int]:
        return dict(Counter(self.smoke_status.values()))

    @cached_property
    def host_differences(self) -> list[str]:
        """One line per host whose runtime differed from the cell's lock (host runtime, no image)."""
        out: dict[str, str] = {}
        for r in self.results:
            diff = r.host_vs_lock
            if not diff or diff.get("identical"):
                continue
            packages = diff.get("packages") or []
            shown = ", ".join(f"{p['package']} {p.get('host') or 'absent'} (lock {p['lock']})" for p in packages[:6])
            more = f" and {len(packages) - 6} more" if len(packages) > 6 else ""
            out[r.host_label] = (f"{r.host_label}: host runtime, Python {diff.get('host_python')} (cell "
                                 f"{diff.get('cell_python')}); {len(packages)} locked package(s) differ"
                                 + (f": {shown}{more}" if packages else ""))
        return list(out.values())

    @cached_property
    def image_digests(self) -> list[str]:
        return sorted({r.image_digest for r in self.results if r.image_digest})

    @cached_property
    def hosts(self) -> list[str]:
        return sorted({r.host_label for r in self.results})


@dataclass
class StackReport:
    name: str
    axes: list[str]  # axes whose value differs between the stack's cells (the table's columns)
    fixed: dict[str, str]  # axes with one value across the stack
    smokes: list[str]
    cells: list[CellRow]
    pivot: tuple[str, str] | None  # default (row axis, column axis) for the pivot view; "" = no axis
    description: str = ""  # the stack's description in matrix.toml

    @cached_property
    def status(self) -> str:
        return worst(c.status for c in self.cells)

    @cached_property
    def hosts(self) -> list[str]:
        """The hosts with results in this stack (the grid's columns)."""
        return sorted({r.host_label for c in self.cells for r in c.results})

    @cached_property
    def host_drivers(self) -> dict[str, str]:
        """Per host of the grid: its NVIDIA driver ("none" for a host without one)."""
        return {r.host_label: str(r.host.get("driver") or "none") for c in self.cells for r in c.results}

    def values(self, axis: str) -> list[str]:
        """The distinct values of an axis across the stack's cells, in natural order."""
        return sorted({c.pins[axis] for c in self.cells if axis in c.pins}, key=natural_key)

    @cached_property
    def counts(self) -> dict[str, int]:
        return dict(Counter(c.status for c in self.cells))


@dataclass
class Report:
    title: str
    generated_at: str
    stacks: list[StackReport] = field(default_factory=list)
    arch_scan: list[dict[str, Any]] = field(default_factory=list)  # report.archscan.arch_scan_tables(...)

    @property
    def cells(self) -> list[CellRow]:
        return [c for s in self.stacks for c in s.cells]

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(c.status for c in self.cells))

    @property
    def smoke_counts(self) -> dict[str, int]:
        return dict(Counter(s for c in self.cells for s in c.smoke_status.values()))

    @property
    def failures(self) -> list[tuple[CellRow, SmokeResult]]:
        """Every broken latest result, worst first, then by stack and cell as the page shows them."""
        found = [(c, r) for c in self.cells for r in c.broken]
        return sorted(found, key=lambda cr: -SEVERITY[cr[1].status])


def concrete_smokes(selectors: Sequence[str], result_names: Iterable[str],
                    catalogue: Sequence[str] | None = None) -> list[str]:
    """The smoke names a cell stands for. Matrix selectors may name groups ('xformers-tiled-matmul-boundary'
    selects '...-output', '-a', '-b'); with the catalogue's names they are expanded, without it a selector
    is kept only until a result of a smoke it selects shows up. Names with results are always included."""

    results = list(dict.fromkeys(result_names))
    if catalogue is not None:
        names = [n for n in catalogue if any(matches(p, n) for p in selectors)]
    else:
        names = [p for p in selectors if not any(matches(p, r) for r in results) or p in results]
    return names + [r for r in results if r not in names]


def _axis_order(axes: Iterable[str]) -> list[str]:
    known = [a for a in KNOWN_AXES if a in axes]
    return known + sorted(a for a in axes if a not in KNOWN_AXES)


def _severity_first(results: Iterable[SmokeResult], order: Sequence[str]) -> list[SmokeResult]:
    """Results worst first, then in the cell's smoke order, then by host."""
    rank = {name: i for i, name in enumerate(order)}
    return sorted(results, key=lambda r: (-SEVERITY.get(r.status, SEVERITY["fail"]), rank.get(r.smoke, len(rank)),
                                          r.smoke, r.host_label))


class _HostViews:
    """Each host's label and JSON form, made once per host rather than once per record (a fleet's report reads
    tens of thousands of records from a few hosts); the forms are shared, read-only, by the results."""

    def __init__(self) -> None:
        self._views: dict[HostFingerprint, tuple[str, dict[str, Any]]] = {}

    def __call__(self, host: HostFingerprint) -> tuple[str, dict[str, Any]]:
        view = self._views.get(host)
        if view is None:
            view = self._views[host] = (host.label(), host.to_dict())
        return view


def _result(rec: SmokeRecord, log_roots: Sequence[Path], history: SmokeHistory, hosts: _HostViews) -> SmokeResult:
    label, host = hosts(rec.host)
    return SmokeResult(
        smoke=rec.smoke, status=rec.status, failure_class=rec.failure_class, reason=rec.reason,
        host_id=rec.host.id, host_label=label, host=host, run_id=rec.run_id,
        finished_at=rec.finished_at, duration_s=rec.duration_s, metrics=dict(rec.metrics),
        known_issue=rec.known_issue, image_digest=rec.image_digest, log_path=rec.log_path,
        log_excerpt=read_log_excerpt(rec.log_path, log_roots, rec.run_id),
        host_vs_lock=(rec.environment or {}).get("host_vs_lock"),
        history=history,
    )


def choose_pivot(axes: list[str], cells: list[CellRow], requested: tuple[str, str] | None) -> tuple[str, str] | None:
    """The pivot's (row, column) axes: the requested pair when both exist in the stack, else the two
    varying axes with the most distinct values."""
    present = {a for c in cells for a in c.pins}
    if requested and requested[0] in present and requested[1] in present and requested[0] != requested[1]:
        return requested
    if not axes:
        return None
    if len(axes) == 1:
        return (axes[0], "")  # one varying axis: its values as rows, one column
    ranked = sorted(axes, key=lambda a: (-len({c.pins.get(a) for c in cells}), axes.index(a)))
    first, second = ranked[0], ranked[1]
    # keep the matrix's axis order for readability
    return (first, second) if axes.index(first) < axes.index(second) else (second, first)


def build_report(
    records: Iterable[SmokeRecord],
    cells: Iterable[Cell] = (),
    *,
    stack: str | Iterable[str] | None = None,
    pivot: tuple[str, str] | None = None,
    title: str = "pinmatrix report",
    log_roots: Sequence[Path] = (),
    now: datetime | None = None,
    catalogue: Sequence[str] | None = None,
    required: Mapping[str, Sequence[str]] | None = None,
    descriptions: Mapping[str, str] | None = None,
) -> Report:
    """Join the latest result per (cell, host, smoke) with the matrix's cells.

    Cells with no results appear with status "missing"; results of cell ids that are no longer in the
    matrix appear too (named by id), so nothing recorded is hidden. ``required`` maps cell id -> the smokes
    its promotion policy requires (see CellRow.status); ``descriptions`` maps stack -> its description."""
    stacks_wanted = None if stack is None else ({stack} if isinstance(stack, str) else set(stack))
    latest: dict[tuple[str, str, str], SmokeRecord] = {}
    runs: dict[tuple[str, str, str], list[HistoryRun]] = defaultdict(list)
    hosts = _HostViews()
    for rec in records:  # records come oldest first: later ones replace earlier ones
        if rec.is_probe:  # a bisect probe (a point of a search: a parameter or axis value) is no cell's verdict
            continue
        if stacks_wanted is None or rec.stack in stacks_wanted:
            key = (rec.cell_id, rec.host.id, rec.smoke)
            latest[key] = rec
            runs[key].append(HistoryRun(rec.run_id, rec.finished_at, rec.status, hosts(rec.host)[0]))
    histories = {key: SmokeHistory.of(sorted(found, key=lambda r: r.finished_at)) for key, found in runs.items()}
    by_cell: dict[str, list[SmokeRecord]] = defaultdict(list)
    for rec in latest.values():
        by_cell[rec.cell_id].append(rec)

    def results_of(recs: list[SmokeRecord], order: Sequence[str]) -> list[SmokeResult]:
        made = (_result(r, log_roots, histories[(r.cell_id, r.host.id, r.smoke)], hosts) for r in recs)
        return _severity_first(made, order)

    rows: dict[str, CellRow] = {}
    for cell in cells:
        if stacks_wanted is not None and cell.stack not in stacks_wanted:
            continue
        recs = by_cell.get(cell.id, [])
        smokes = concrete_smokes(cell.smokes, sorted(r.smoke for r in recs), catalogue)
        rows[cell.id] = _cell_row(cell, smokes, results_of(recs, smokes),
                                  list(required[cell.id]) if required is not None and cell.id in required else None)
    for cell_id, recs in by_cell.items():
        if cell_id in rows:
            continue
        rows[cell_id] = CellRow(
            id=cell_id, stack=recs[0].stack, name=f"{recs[0].stack} {cell_id} (not in matrix)", pins={},
            in_matrix=False, smokes=sorted({r.smoke for r in recs}),
            results=results_of(recs, sorted({r.smoke for r in recs})),
        )

    by_stack: dict[str, list[CellRow]] = defaultdict(list)
    for row in rows.values():
        by_stack[row.stack].append(row)
    stacks = [_stack_report(name, by_stack[name], pivot, (descriptions or {}).get(name, "")) for name in sorted(by_stack)]
    stacks.sort(key=lambda st: -SEVERITY[st.status] if st.status in BROKEN else 0)  # stable: by name otherwise
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Report(title=title, generated_at=stamp, stacks=stacks)


def _cell_row(cell: Cell, smokes: list[str], results: list[SmokeResult], required: list[str] | None) -> CellRow:
    """A matrix cell's row; applied patches show as the pseudo-axis ``patches``."""
    pins = {k: str(v) for k, v in cell.pins.items()}
    applied = [p.id for p in cell.patches_to_apply]
    if applied:
        pins["patches"] = " + ".join(applied)
    return CellRow(id=cell.id, stack=cell.stack, name=cell.name, pins=pins, in_matrix=True, smokes=smokes,
                   results=results, min_driver=cell.min_driver, compute_capability=cell.compute_capability,
                   gpu_required=cell.gpu_required, required=required)


def _stack_report(name: str, rows: list[CellRow], pivot: tuple[str, str] | None, description: str) -> StackReport:
    """One stack's table: broken cells first, then the rest in the matrix's natural order; the axes that vary as
    columns, the rest as the stack's fixed pins; the smokes that broke somewhere first."""
    stack_rows = sorted(rows, key=lambda r: (-SEVERITY[r.status] if r.status in BROKEN else 0,
                                             not r.in_matrix, natural_key(r.name), r.id))
    if any("patches" in r.pins for r in stack_rows):  # a pseudo-axis: filters, pivot and diff see it
        for r in stack_rows:
            if r.in_matrix:
                r.pins.setdefault("patches", "none")
    all_axes = _axis_order({a for r in stack_rows for a in r.pins})
    varying = [a for a in all_axes if len({r.pins.get(a) for r in stack_rows}) > 1]
    fixed = {a: stack_rows[0].pins[a] for a in all_axes if a not in varying and a in stack_rows[0].pins}
    stack_smokes: list[str] = []
    for r in stack_rows:
        stack_smokes += [s for s in r.smokes if s not in stack_smokes]
    stack_smokes.sort(key=lambda smoke: -SEVERITY[worst(r.smoke_status[smoke] for r in stack_rows
                                                         if smoke in r.smoke_status)])
    return StackReport(name=name, axes=varying, fixed=fixed, smokes=stack_smokes, cells=stack_rows,
                       pivot=choose_pivot(varying, stack_rows, pivot), description=description)


def failure_to_dict(cell: CellRow, result: SmokeResult) -> dict[str, Any]:
    """One line of "what broke": the cell, the smoke, the host, the reason and since when."""
    history = result.history
    return {"stack": cell.stack, "cell": cell.id, "name": cell.name, "smoke": result.smoke, "status": result.status,
            "host_label": result.host_label, "failure_class": result.failure_class, "reason": result.reason,
            "known_issue": result.known_issue, "run_id": result.run_id, "finished_at": result.finished_at,
            "failing_since": history.failing_since.to_dict() if history.failing_since else None,
            "failing_runs": history.failing_runs,
            "last_pass": history.last_pass.to_dict() if history.last_pass else None}


def report_head(report: Report) -> dict[str, Any]:
    """The JSON form's fields before its stacks: schema, title, counts, what broke, the arch scan."""
    return {
        "schema": "pinmatrix-report/1",
        "title": report.title,
        "generated_at": report.generated_at,
        "counts": report.counts,
        "smoke_counts": report.smoke_counts,
        "failures": [failure_to_dict(c, r) for c, r in report.failures],
        **({"arch_scan": report.arch_scan} if report.arch_scan else {}),
    }


def stack_head(stack: StackReport) -> dict[str, Any]:
    """One stack's JSON fields but its cells."""
    return {"name": stack.name, "description": stack.description, "status": stack.status, "axes": stack.axes,
            "fixed": stack.fixed, "smokes": stack.smokes, "pivot": list(stack.pivot) if stack.pivot else None,
            "counts": stack.counts, "hosts": stack.hosts, "host_drivers": stack.host_drivers}


def cell_to_dict(c: CellRow, hosts: Sequence[str]) -> dict[str, Any]:
    """One cell of a stack whose grid has ``hosts``, with its latest results and its history."""
    return {
        "id": c.id, "name": c.name, "stack": c.stack, "pins": c.pins, "in_matrix": c.in_matrix,
        "status": c.status, "status_label": c.status_label, "skipped": c.skipped,
        "required_smokes": c.required, "failure_class": c.failure_class, "smoke_status": c.smoke_status,
        "min_driver": c.min_driver, "compute_capability": c.compute_capability,
        "gpu_required": c.gpu_required, "image_digests": c.image_digests, "hosts": c.hosts,
        "host_status": c.host_status(hosts), "driver_status": c.driver_status,
        "results": [r.to_dict() for r in c.results], "history": {k: h.to_dict() for k, h in c.history.items()},
    }
