"""Known issues that name a boundary (``boundary = { param = "M", expect_first_fail = 33289 }``): during a
search the issue applies only on its failing side, and the result confirms the boundary or flags it moved."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from packaging.version import InvalidVersion, Version

from pinmatrix.smoke.catalogue import matches


@dataclass(frozen=True)
class BoundarySpec:
    issue: str  # known issue id
    param: str
    expect_first_fail: int | float | str
    smoke: str | None
    failure_class: str | None  # the class the issue expects on its failing side


@dataclass
class BoundaryCheck:
    issue: str
    param: str
    expected_first_fail: int | float | str
    found_first_fail: int | float | str | None
    status: str  # confirmed | moved | not-found | unknown
    message: str
    class_expected: str | None = None
    class_found: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def boundaries_for(matrix: Any, cell: Any, smoke: str, param: str) -> list[BoundarySpec]:
    """The boundaries on ``param`` of the known issues that apply to ``cell`` and ``smoke``."""
    if matrix is None:
        return []
    applying = {ki.id for ki in getattr(cell, "known_issues", ()) or ()}
    out = []
    for issue in matrix.known_issues:
        b = issue.boundary
        if b is None or issue.id not in applying or b.param != param:
            continue
        if not any(matches(sel, smoke) for sel in issue.smokes):
            continue
        if b.smoke is not None and not matches(b.smoke, smoke):
            continue
        out.append(BoundarySpec(issue.id, b.param, b.expect_first_fail, b.smoke, issue.failure_class))
    return out


def _before(value: Any, limit: Any) -> bool:
    if isinstance(limit, str) or isinstance(value, str):
        try:
            return Version(str(value)) < Version(str(limit))
        except InvalidVersion:
            return False
    return value < limit


def cell_at(cell: Any, value: Any, boundaries: list[BoundarySpec]) -> Any:
    """``cell`` as a probe at ``value`` sees it: a known issue whose boundary lies above ``value`` does not
    apply there (a pass below the boundary is a plain pass, a failure there is unexpected)."""
    outside = {b.issue for b in boundaries if _before(value, b.expect_first_fail)}
    if not outside:
        return cell
    return replace(cell, known_issues=tuple(ki for ki in cell.known_issues if ki.id not in outside))


def check(boundaries: list[BoundarySpec], first_fail: Any, failure_class: str | None, *, exact: bool,
          where: str) -> list[BoundaryCheck]:
    """Compare each expected boundary with what the search found (``first_fail`` None: nothing failed)."""
    out = []
    for b in boundaries:
        want = b.expect_first_fail
        if first_fail is None:
            status, msg = "not-found", f"known issue {b.issue}: expected the first failure at {b.param}={want}, " \
                                       f"but nothing failed {where}"
        elif not exact:
            status, msg = "unknown", f"known issue {b.issue}: the search did not narrow the boundary to one point"
        elif str(first_fail) == str(want):
            status, msg = "confirmed", f"known issue {b.issue}: boundary confirmed, first failure at {b.param}={want}"
        else:
            status, msg = "moved", (f"known issue {b.issue}: boundary moved: first failure at {b.param}={first_fail}, "
                                    f"the matrix expects {want}")
        if status == "confirmed" and b.failure_class and failure_class and failure_class != b.failure_class:
            msg += f" (but the class is {failure_class}, the issue expects {b.failure_class})"
        out.append(BoundaryCheck(b.issue, b.param, want, first_fail, status, msg, b.failure_class, failure_class))
    return out
