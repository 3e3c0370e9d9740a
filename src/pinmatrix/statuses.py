"""The statuses a report shows, worst last, and the formats it writes. No dependencies: the CLI builds its
parser from these without importing a renderer (jinja2)."""

from __future__ import annotations

# Worst last. "missing" = a smoke selected for the cell that has no result on any host; "error" = the
# infrastructure failed (the runtime could not start the smoke): no verdict on the cell, never counted
# against it (promotion ignores it), JUnit <error>.
SEVERITY: dict[str, int] = {
    "pass": 0, "skip": 1, "missing": 2, "error": 3, "xfail": 4, "xpass": 5, "degraded": 6, "fail": 7,
}
INFRA_STATUSES: tuple[str, ...] = ("error",)
# What a smoke run can record, in the results store's order.
STATUSES: tuple[str, ...] = ("pass", "fail", "skip", "xfail", "xpass", "degraded", "error")  # error: infrastructure
SEVERITY_ORDER: tuple[str, ...] = tuple(sorted(SEVERITY, key=SEVERITY.__getitem__))
STATUS_LABELS: dict[str, str] = {
    "pass": "pass", "skip": "skipped", "missing": "no result", "error": "infrastructure error",
    "xfail": "expected failure",
    "xpass": "unexpected pass", "degraded": "degraded", "fail": "FAIL",
}
# format -> the file it is written to
FORMATS: dict[str, str] = {"html": "index.html", "md": "summary.md", "junit": "junit.xml", "json": "report.json"}
