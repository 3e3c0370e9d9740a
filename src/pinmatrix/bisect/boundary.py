"""Known issues that name a boundary (``boundary = { param = "M", expect_first_fail = 33289 }``): during a
search the issue applies only on its failing side, and the result confirms the boundary or flags it moved.

A boundary is about a quantity, not about the parameter alone: M=33289 is where the output's M*N elements
pass 2^31 for the smoke's N=64512. When the smoke declares its quantities (``project/smoke_params.py``), the boundary
is read as "this quantity passes this limit" (``in_quantity``: the one quantity that crosses a limit between
expect_first_fail - 1 and expect_first_fail at the smoke's own dimensions), so a probe whose quantity stays
below the limit is outside the issue (a plain pass, not XPASS), and with another fixed N the expected first
failure is the M where M*N passes 2^31 there (``expected_in``), not the declared 33289."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from packaging.version import InvalidVersion, Version

from pinmatrix.bisect.crossing import crossings
from pinmatrix.project.catalogue import matches
from pinmatrix.smoke.target import SmokeTarget


@dataclass(frozen=True)
class BoundarySpec:
    issue: str  # known issue id
    param: str
    expect_first_fail: int | float | str
    smoke: str | None
    failure_class: str | None  # the class the issue expects on its failing side
    quantity: str | None = None  # the declared quantity the boundary is about ("output elements M*N")
    limit: float | None = None  # the limit it passes there (2^31)
    limit_name: str | None = None
    inclusive: bool = False  # True: failing from quantity == limit on ("reach"); False: above it ("pass")
    declared_at: dict[str, Any] | None = None  # the dimensions expect_first_fail was declared for


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


def boundaries_for(matrix: Any, cell: SmokeTarget, smoke: str, param: str) -> list[BoundarySpec]:
    """The boundaries on ``param`` of the known issues that apply to ``cell`` and ``smoke``."""
    if matrix is None:
        return []
    applying = {ki.id for ki in cell.known_issues}
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
            return bool(Version(str(value)) < Version(str(limit)))
        except InvalidVersion:
            return False
    return bool(value < limit)


def in_quantity(b: BoundarySpec, decl: Any) -> BoundarySpec:
    """``b`` read in the quantity it is about, when ``decl`` (the smoke's SmokeParams) lets it be found: the
    one declared quantity of ``b.param`` that crosses a limit between expect_first_fail - 1 and
    expect_first_fail at the smoke's own dimensions. Otherwise ``b`` as it is (scoped by the parameter)."""
    want = b.expect_first_fail
    if decl is None or b.param not in getattr(decl, "params", {}) or isinstance(want, bool) \
            or not isinstance(want, int):
        return b
    base = decl.values({})
    at_fail, at_pass = {**base, b.param: want}, {**base, b.param: want - 1}
    found = crossings(decl, b.param, at_pass, at_fail)
    quantities = {c.quantity for c in found}
    if len(quantities) != 1:
        return b
    declared = [c for c in found if not c.limit.startswith("2^")]
    chosen = (declared or found)[0]
    return replace(b, quantity=chosen.quantity, limit=chosen.limit_value, limit_name=chosen.limit,
                   inclusive=chosen.verb == "reach", declared_at={k: v for k, v in base.items() if k != b.param})


def past(b: BoundarySpec, value: Any, dims: dict[str, Any] | None = None, decl: Any = None) -> bool:
    """Whether a probe at ``value`` (with every dimension in ``dims``) is on the boundary's failing side."""
    if b.quantity is not None and b.limit is not None and decl is not None and dims is not None:
        q = decl.quantity(b.quantity, {**dims, b.param: value})
        return bool(q >= b.limit if b.inclusive else q > b.limit)
    return not _before(value, b.expect_first_fail)


def expected_in(b: BoundarySpec, values: list[Any], dims: dict[str, Any] | None = None, decl: Any = None) -> Any:
    """The first of ``values`` (ascending) on the failing side; the declared value when none is, or when the
    boundary is not read in a quantity."""
    if b.quantity is None:
        return b.expect_first_fail
    lo, hi = 0, len(values)
    while lo < hi:  # a product of positive dimensions grows with the parameter
        mid = (lo + hi) // 2
        if past(b, values[mid], dims, decl):
            hi = mid
        else:
            lo = mid + 1
    return values[lo] if lo < len(values) else b.expect_first_fail


def cell_at(cell: SmokeTarget, value: Any, boundaries: list[BoundarySpec], dims: dict[str, Any] | None = None,
            decl: Any = None) -> SmokeTarget:
    """``cell`` as a probe at ``value`` sees it: a known issue whose boundary lies above ``value`` (in its
    quantity, given ``dims`` and ``decl``) does not apply there (a pass below the boundary is a plain pass, a
    failure there is unexpected)."""
    outside = {b.issue for b in boundaries if not past(b, value, dims, decl)}
    if not outside:
        return cell
    return cell.without_known_issues(frozenset(outside))


def _scope(b: BoundarySpec, want: Any) -> str:
    """How the expectation was made, when it is not the declared value as it stands."""
    if b.quantity is None or b.declared_at is None:
        return ""
    at = ", ".join(f"{k}={v}" for k, v in sorted(b.declared_at.items()) if not isinstance(v, str))
    return (f" ({b.quantity} {'reach' if b.inclusive else 'pass'} {b.limit_name}; the matrix declares "
            f"{b.param}={b.expect_first_fail} for {at})") if str(want) != str(b.expect_first_fail) else ""


def check(boundaries: list[BoundarySpec], first_fail: Any, failure_class: str | None, *, exact: bool,
          where: str, expected: dict[str, Any] | None = None) -> list[BoundaryCheck]:
    """Compare each expected boundary with what the search found (``first_fail`` None: nothing failed).
    ``expected``: issue id -> the first failure expected for this search's dimensions (``expected_in``)."""
    out = []
    for b in boundaries:
        want = (expected or {}).get(b.issue, b.expect_first_fail)
        if first_fail is None:
            status, msg = "not-found", f"known issue {b.issue}: expected the first failure at {b.param}={want}, " \
                                       f"but nothing failed {where}"
        elif not exact:
            status, msg = "unknown", f"known issue {b.issue}: the search did not narrow the boundary to one point"
        elif str(first_fail) == str(want):
            status, msg = "confirmed", (f"known issue {b.issue}: boundary confirmed, first failure at "
                                        f"{b.param}={want}{_scope(b, want)}")
        else:
            status, msg = "moved", (f"known issue {b.issue}: boundary moved: first failure at {b.param}={first_fail}, "
                                    f"the matrix expects {want}{_scope(b, want)}")
        if status == "confirmed" and b.failure_class and failure_class and failure_class != b.failure_class:
            msg += f" (but the class is {failure_class}, the issue expects {b.failure_class})"
        out.append(BoundaryCheck(b.issue, b.param, want, first_fail, status, msg, b.failure_class, failure_class))
    return out
