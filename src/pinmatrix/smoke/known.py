"""Known issues from the matrix: an expected failure becomes ``xfail`` (with the note), and an expected
failure that passes becomes ``xpass`` (the issue may be gone)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pinmatrix.project.catalogue import matches


@dataclass(frozen=True)
class KnownIssueOutcome:
    status: str
    failure_class: str | None
    reason: str
    known_issue: str | None


def _field(issue: Any, name: str) -> Any:
    return issue.get(name) if isinstance(issue, dict) else getattr(issue, name, None)


def issues_for(smoke: str, issues: Iterable[Any]) -> list[Any]:
    return [i for i in issues if any(matches(p, smoke) for p in (_field(i, "smokes") or ()))]


def apply_known_issues(smoke: str, status: str, failure_class: str | None, reason: str,
                       issues: Iterable[Any]) -> KnownIssueOutcome:
    for issue in issues_for(smoke, issues):
        iid, expect = _field(issue, "id"), _field(issue, "expect")
        want_class, note = _field(issue, "failure_class"), _field(issue, "note") or ""
        if status == expect and (want_class is None or failure_class in (None, want_class)
                                 or expect != "fail"):
            return KnownIssueOutcome("xfail", failure_class or want_class, f"known issue {iid}: {note} ({reason})".strip(),
                           iid)
        if status == "pass" and expect in ("fail", "degraded"):
            return KnownIssueOutcome("xpass", None, f"expected {expect} by known issue {iid}, but it passed: "
                           f"the issue may be gone ({note})", iid)
        if status == "fail" and expect == "fail" and want_class and failure_class != want_class:
            return KnownIssueOutcome(status, failure_class, f"{reason} [known issue {iid} expects {want_class}, "
                           f"this is {failure_class}]", None)
    return KnownIssueOutcome(status, failure_class, reason, None)
