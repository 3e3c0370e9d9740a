"""The Markdown summary: short enough for a CI job summary ($GITHUB_STEP_SUMMARY), one table per stack."""

from __future__ import annotations

from pinmatrix.report.archscan import arch_scan_markdown
from pinmatrix.report.model import FAILURES_LISTED, STATUS_LABELS, CellRow, Report, SmokeResult
from pinmatrix.sanitize import markdown_code, markdown_text

ICONS: dict[str, str] = {
    "pass": "🟢", "skip": "⚪", "missing": "◻️", "xfail": "🟡", "xpass": "🟣", "degraded": "🟠", "fail": "🔴",
    "error": "⚫",
}


def _cell(text: object) -> str:
    """A value for a Markdown table cell or list item: HTML, markup and terminal escapes made inert."""
    return markdown_text(text)


def _runs(result: SmokeResult) -> str:
    return "".join(ICONS.get(run.status, "") for run in result.history.runs)


def _since(result: SmokeResult) -> str:
    """Since when it is broken, and when it last passed, in words."""
    h = result.history
    parts = []
    if h.failing_since is not None:
        streak = f", {h.failing_runs} runs in a row" if h.failing_runs > 1 else ""
        parts.append(f"since run {markdown_code(h.failing_since.run_id)} ({_cell(h.failing_since.finished_at)}){streak}")
    if h.last_pass is not None:
        parts.append(f"last pass run {markdown_code(h.last_pass.run_id)} ({_cell(h.last_pass.finished_at)})")
    else:
        parts.append(f"never passed there ({h.total} run{'' if h.total == 1 else 's'})")
    return "; ".join(parts)


def _failure_line(cell: CellRow, r: SmokeResult, max_reason: int) -> str:
    reason = r.reason if len(r.reason) <= max_reason else r.reason[: max_reason - 1] + "…"
    fc = f" {markdown_code(r.failure_class)}" if r.failure_class else ""
    return (f"- {ICONS[r.status]} **{_cell(r.smoke)}** in {markdown_code(cell.id)} {_cell(cell.name)} on "
            f"{_cell(r.host_label)}:{fc} {_cell(reason)} — {_since(r)} {_runs(r)}").rstrip()


def render_markdown(report: Report, *, max_reason: int = 120) -> str:
    lines: list[str] = [f"# {_cell(report.title)}", ""]
    counts = report.counts
    summary = ", ".join(f"{counts[s]} {STATUS_LABELS[s]}" for s in ICONS if counts.get(s))
    lines.append(f"{len(report.cells)} cells in {len(report.stacks)} stacks: {summary or 'no cells'} "
                 f"(generated {report.generated_at}).")
    lines.append("")
    failures = report.failures
    if failures:
        broken_cells = len({c.id for c, _ in failures})
        lines += [f"## What broke: {len(failures)} result{'' if len(failures) == 1 else 's'} in {broken_cells} of "
                  f"{len(report.cells)} cells", ""]
        lines += [_failure_line(c, r, max_reason) for c, r in failures[:FAILURES_LISTED]]
        if len(failures) > FAILURES_LISTED:
            lines.append(f"- and {len(failures) - FAILURES_LISTED} more (index.html counts them all, report.json "
                         "lists them)")
        lines.append("")
    else:
        lines += ["Nothing broke: no smoke failed, degraded or passed unexpectedly in its latest run.", ""]
    for stack in report.stacks:
        lines.append(f"## {ICONS[stack.status]} {_cell(stack.name)}")
        lines.append("")
        if stack.description:
            lines.append(_cell(stack.description))
            lines.append("")
        if stack.fixed:
            lines.append("Same in every cell: " + ", ".join(markdown_code(f"{a} {v}") for a, v in stack.fixed.items()))
            lines.append("")
        header = ["status", "cell", *(_cell(a) for a in stack.axes), "smokes", "failure class"]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        for cell in stack.cells:
            per = cell.smoke_status
            smokes = " ".join(f"{ICONS[st]}&nbsp;{_cell(name)}" for name, st in per.items())
            row = [f"{ICONS[cell.status]} {cell.status_label}", f"{markdown_code(cell.id)} {_cell(cell.name)}",
                   *(_cell(cell.pins.get(a, "")) for a in stack.axes), smokes, _cell(cell.failure_class or "")]
            lines.append("| " + " | ".join(row) + " |")
        hosts = stack.hosts
        if hosts:
            lines += ["", "Cells × hosts:", ""]
            lines.append("| cell | " + " | ".join(_cell(h) for h in hosts) + " | by driver |")
            lines.append("|" + "---|" * (len(hosts) + 2))
            for cell in stack.cells:
                per = cell.host_status(hosts)
                by_driver = " ".join(f"{ICONS[st]}&nbsp;{_cell(d)}" for d, st in cell.driver_status.items())
                lines.append(f"| {markdown_code(cell.id)} | "
                             + " | ".join(f"{ICONS[per[h]]} {STATUS_LABELS[per[h]]}" for h in hosts)
                             + f" | {by_driver} |")
        lines.append("")
    if report.arch_scan:

        lines += arch_scan_markdown(report.arch_scan)
    return "\n".join(lines).rstrip() + "\n"
