"""The search itself: bisection over an ordered sequence of points for the first point whose verdict differs
from the first point's, with points that cannot be probed skipped as ``git bisect skip`` does.

Pure logic: the caller's ``probe(index)`` runs (or looks up) one point and returns "pass", "fail" or "skip".
Both ends are probed first; if they agree there is no change to find. Otherwise the bracket (last point with
the first verdict, first point with the other) halves until its ends are adjacent, or until only skipped
points lie between them (then the change is at one of those, and the result says so).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

ProbeOutcome = Literal["pass", "fail", "skip"]
Outcome = Literal["change", "no-change", "ambiguous", "cannot-probe", "stopped"]


class ProbeLimit(Exception):
    """Raised by a probe callback when the caller's probe budget is spent; the search stops cleanly."""


@dataclass
class SearchResult:
    outcome: Outcome
    first: int | None = None  # index of the first (lowest) probed point with the reference verdict
    last: int | None = None  # index of the last (highest) probed point
    before: int | None = None  # the bracket: last index with the reference verdict ...
    after: int | None = None  # ... and the first index found with the other verdict
    reference: ProbeOutcome | None = None  # the verdict at the low end
    untested: list[int] = field(default_factory=list)  # skipped points between before and after
    note: str = ""


def bisect(
    n: int,
    probe: Callable[[int], ProbeOutcome],
    *,
    high_first: bool = False,
    max_skips: int = 5,
) -> SearchResult:
    """Search indexes 0..n-1. ``high_first`` probes the high end before the low end (a parameter search:
    the high end alone tells whether anything fails). At most ``max_skips`` points may be skipped."""
    if n < 2:
        raise ValueError("a search needs at least two points")
    tested: dict[int, ProbeOutcome] = {}
    skipped: set[int] = set()
    state = SearchResult("stopped")

    def run(i: int) -> ProbeOutcome:
        v = probe(i)
        tested[i] = v
        if v == "skip":
            skipped.add(i)
        return v

    def between() -> list[int]:
        lo_, hi_ = state.before, state.after
        return sorted(i for i in skipped if lo_ is not None and hi_ is not None and lo_ < i < hi_)

    try:
        lo, hi = 0, n - 1
        for i in ((hi, lo) if high_first else (lo, hi)):
            run(i)
        if tested[lo] == "skip" and tested[hi] == "skip":
            state.outcome, state.note = "cannot-probe", "neither end of the range can be probed"
            return state
        # An end that cannot be probed moves inward, one point at a time, while the skip budget lasts.
        while tested[lo] == "skip":
            if len(skipped) > max_skips or lo + 1 >= hi:
                state.outcome, state.note = "cannot-probe", f"no probe-able point at the low end ({len(skipped)} skipped)"
                return state
            lo += 1
            run(lo)
        while tested[hi] == "skip":
            if len(skipped) > max_skips or hi - 1 <= lo:
                state.outcome, state.note = "cannot-probe", f"no probe-able point at the high end ({len(skipped)} skipped)"
                return state
            hi -= 1
            run(hi)
        state.first, state.last, state.reference = lo, hi, tested[lo]
        if tested[hi] == state.reference:
            state.outcome = "no-change"
            return state
        state.before, state.after = lo, hi
        while True:
            nxt = _next_point(state.before, state.after, skipped)
            if nxt is None:
                state.untested = between()
                state.outcome = "ambiguous" if state.untested else "change"
                return state
            if len(skipped) > max_skips:
                state.untested = between()
                state.outcome, state.note = "cannot-probe", f"more than {max_skips} points could not be probed"
                return state
            v = run(nxt)
            if v == "skip":
                continue
            if v == state.reference:
                state.before = nxt
            else:
                state.after = nxt
    except ProbeLimit as stop:
        state.outcome, state.note = "stopped", str(stop) or "probe budget spent"
        state.untested = between()
        return state


def _next_point(before: int, after: int, skipped: set[int]) -> int | None:
    """The untested point nearest the middle of (before, after) that has not been skipped, or None."""
    if after - before <= 1:
        return None
    mid = (before + after) // 2
    for offset in range(0, len(skipped) + 2):
        for cand in (mid + offset, mid - offset):
            if before < cand < after and cand not in skipped:
                return cand
    # every point between is skipped (only reachable when the bracket is small)
    return None

