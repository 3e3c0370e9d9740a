"""What a bisect report says of the points it could not probe: each reason once, sorted, and a point the results
store recorded as skipped marked as such (one rule for the parameter and the version bisects)."""

from __future__ import annotations

from pinmatrix.bisect.probe import Probe
from pinmatrix.bisect.report import skip_reasons


def _probe(index: int, verdict: str, reason: str, *, recorded: bool) -> Probe:
    return Probe(index, index, f"cell-{index}", "skip" if verdict == "skip" else verdict, verdict,  # type: ignore[arg-type]
                 None, reason, 0.1, False, recorded=recorded)


def test_the_skipped_points_reasons_each_once_sorted_the_recorded_ones_marked() -> None:
    probes = [_probe(0, "skip", "no GPU", recorded=True), _probe(1, "skip", "lock failed", recorded=False),
              _probe(2, "skip", "no GPU", recorded=True), _probe(3, "fail", "segfault", recorded=True),
              _probe(4, "skip", "lock failed", recorded=False)]
    assert skip_reasons(probes) == ["lock failed", "skipped: no GPU"]
    assert skip_reasons([_probe(0, "pass", "", recorded=True)]) == []
