"""The Markdown summary: short enough for a CI job summary ($GITHUB_STEP_SUMMARY), one table per stack."""

from __future__ import annotations

from pinmatrix.report.model import STATUS_LABELS, Report
from pinmatrix.sanitize import markdown_code, markdown_text

ICONS: dict[str, str] = {
    "pass": "🟢", "skip": "⚪", "missing": "◻️", "xfail": "🟡", "xpass": "🟣", "degraded": "🟠", "fail": "🔴",
}


def _cell(text: object) -> str:
    """A value for a Markdown table cell or list item: HTML, markup and terminal escapes made inert."""
    return markdown_text(text)


def render_markdown(report: Report, *, max_reason: int = 120) -> str:
    lines: list[str] = [f"# {_cell(report.title)}", ""]
    counts = report.counts
    summary = ", ".join(f"{counts[s]} {STATUS_LABELS[s]}" for s in ICONS if counts.get(s))
    lines.append(f"{len(report.cells)} cells in {len(report.stacks)} stacks: {summary or 'no cells'} "
                 f"(generated {report.generated_at}).")
    lines.append("")
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
        problems = [(c, r) for c in stack.cells for r in c.results if r.status in ("fail", "degraded", "xpass")]
        if problems:
            lines.append("")
            lines.append("<details><summary>Failures and surprises</summary>")
            lines.append("")
            for cell, r in problems:
                reason = r.reason if len(r.reason) <= max_reason else r.reason[: max_reason - 1] + "…"
                fc = f" {markdown_code(r.failure_class)}" if r.failure_class else ""
                lines.append(f"- {ICONS[r.status]} {markdown_code(cell.id)} {_cell(cell.name)} / **{_cell(r.smoke)}** on "
                             f"{_cell(r.host_label)}:{fc} {_cell(reason)}")
            lines.append("")
            lines.append("</details>")
        lines.append("")
    if report.arch_scan:
        from pinmatrix.report.archscan import arch_scan_markdown

        lines += arch_scan_markdown(report.arch_scan)
    return "\n".join(lines).rstrip() + "\n"
