"""pinmatrix.bisect.search rule by rule, each search with its probes in order: both ends first (the high end first
for a parameter search), then the point nearest the middle of the bracket; an end that cannot be probed moves
inward while the skip budget lasts, and says which end; the change, or the skipped points it may be at; the
budget of skips counted exactly; a probe budget that stops the search cleanly, naming the points left between."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pinmatrix.bisect.search import ProbeLimit, SearchResult, _next_point, bisect


def verdicts(n: int, boundary: int | None, skip: set[int] = frozenset()) -> Callable[[int], str]:  # type: ignore[assignment]
    """pass below ``boundary``, fail from it on (never when None), skip at ``skip``."""

    def verdict(i: int) -> str:
        assert 0 <= i < n, i
        if i in skip:
            return "skip"
        return "fail" if boundary is not None and i >= boundary else "pass"

    return verdict


def search(n: int, verdict: Callable[[int], str], **kw: object) -> tuple[SearchResult, list[int]]:
    probed: list[int] = []

    def probe(i: int) -> str:
        probed.append(i)
        return verdict(i)

    return bisect(n, probe, **kw), probed  # type: ignore[arg-type]


def test_a_search_needs_two_points() -> None:
    for n in (0, 1):
        with pytest.raises(ValueError, match="^a search needs at least two points$"):
            bisect(n, verdicts(2, None))
    result, probed = search(2, verdicts(2, 1))
    assert probed == [0, 1]
    assert result == SearchResult("change", first=0, last=1, before=0, after=1, reference="pass")


def test_both_ends_then_halving_to_the_adjacent_pair() -> None:
    result, probed = search(8, verdicts(8, 5))
    assert probed == [0, 7, 3, 5, 4]
    assert result == SearchResult("change", first=0, last=7, before=4, after=5, reference="pass", untested=[],
                                  note="")


def test_a_parameter_search_probes_the_high_end_first() -> None:
    result, probed = search(8, verdicts(8, 5), high_first=True)
    assert probed == [7, 0, 3, 5, 4]
    assert (result.outcome, result.before, result.after) == ("change", 4, 5)


def test_the_reference_is_the_low_ends_verdict_whichever_it_is() -> None:
    result, probed = search(8, lambda i: "pass" if i >= 2 else "fail")
    assert probed == [0, 7, 3, 1, 2]
    assert result == SearchResult("change", first=0, last=7, before=1, after=2, reference="fail")


def test_ends_that_agree_are_no_change_after_two_probes() -> None:
    result, probed = search(8, verdicts(8, None))
    assert probed == [0, 7]
    assert result == SearchResult("no-change", first=0, last=7, reference="pass")
    result, probed = search(8, verdicts(8, 0))
    assert result == SearchResult("no-change", first=0, last=7, reference="fail")


def test_neither_end_probe_able_is_said_so_after_two_probes() -> None:
    result, probed = search(8, verdicts(8, 4, {0, 7}))
    assert probed == [0, 7]
    assert result == SearchResult("cannot-probe", note="neither end of the range can be probed")


def test_a_low_end_that_cannot_be_probed_moves_inward() -> None:
    result, probed = search(8, verdicts(8, 5, {0, 1}))
    assert probed == [0, 7, 1, 2, 4, 5]
    assert result == SearchResult("change", first=2, last=7, before=4, after=5, reference="pass")


def test_a_high_end_that_cannot_be_probed_moves_inward() -> None:
    result, probed = search(8, verdicts(8, 3, {6, 7}))
    assert probed == [0, 7, 6, 5, 2, 3]
    assert result == SearchResult("change", first=0, last=5, before=2, after=3, reference="pass")


def test_the_skip_budget_at_the_low_end_is_counted_exactly() -> None:
    result, probed = search(8, verdicts(8, 5, {0, 1}), max_skips=2)  # two skipped: within the budget
    assert result.outcome == "change" and result.first == 2
    result, probed = search(8, verdicts(8, 5, {0, 1}), max_skips=1)
    assert probed == [0, 7, 1]
    assert result == SearchResult("cannot-probe", note="no probe-able point at the low end (2 skipped)")


def test_the_skip_budget_at_the_high_end_is_counted_exactly() -> None:
    result, _ = search(8, verdicts(8, 3, {6, 7}), max_skips=2)
    assert result.outcome == "change" and result.last == 5
    result, probed = search(8, verdicts(8, 3, {6, 7}), max_skips=1)
    assert probed == [0, 7, 6]
    assert result == SearchResult("cannot-probe", note="no probe-able point at the high end (2 skipped)")


def test_a_low_end_that_runs_into_the_high_end_stops() -> None:
    result, probed = search(3, verdicts(3, None, {0, 1}))
    assert probed == [0, 2, 1]
    assert result == SearchResult("cannot-probe", note="no probe-able point at the low end (2 skipped)")
    result, probed = search(4, verdicts(4, None, {0, 1, 2}), max_skips=10)
    assert probed == [0, 3, 1, 2]
    assert result.note == "no probe-able point at the low end (3 skipped)"


def test_a_high_end_that_runs_into_the_low_end_stops() -> None:
    result, probed = search(3, verdicts(3, None, {1, 2}))
    assert probed == [0, 2, 1]
    assert result == SearchResult("cannot-probe", note="no probe-able point at the high end (2 skipped)")
    result, probed = search(4, verdicts(4, None, {1, 2, 3}), max_skips=10)
    assert probed == [0, 3, 2, 1]
    assert result.note == "no probe-able point at the high end (3 skipped)"


def test_a_change_next_to_skipped_points_names_them() -> None:
    result, probed = search(8, verdicts(8, 5, {4}))
    assert probed == [0, 7, 3, 5, 4]
    assert result == SearchResult("ambiguous", first=0, last=7, before=3, after=5, reference="pass", untested=[4])


def test_skips_outside_the_bracket_are_not_named() -> None:
    result, probed = search(10, verdicts(10, 3, {4, 5}))
    assert probed == [0, 9, 4, 5, 3, 1, 2]  # the middle skipped: the next nearest, upward first
    assert result == SearchResult("change", first=0, last=9, before=2, after=3, reference="pass", untested=[])


def test_more_skips_than_the_budget_in_the_middle_stop_the_search() -> None:
    result, probed = search(20, verdicts(20, 10, set(range(5, 15))), max_skips=3)
    assert probed == [0, 19, 9, 10, 8, 11]
    assert result == SearchResult("cannot-probe", first=0, last=19, before=0, after=19, reference="pass",
                                  untested=[8, 9, 10, 11], note="more than 3 points could not be probed")
    within, _ = search(20, verdicts(20, 10, set(range(5, 15))), max_skips=10)
    assert within.outcome == "ambiguous" and within.untested == list(range(5, 15))


def test_a_probe_budget_stops_the_search_cleanly_naming_what_is_left_between() -> None:
    skip = {5}
    calls: list[int] = []

    def probe(i: int) -> str:
        calls.append(i)
        if len(calls) > 4:
            raise ProbeLimit("3 probes at most")
        return verdicts(8, 6, skip)(i)

    result = bisect(8, probe)  # type: ignore[arg-type]
    assert calls == [0, 7, 3, 5, 6]
    assert result == SearchResult("stopped", first=0, last=7, before=3, after=7, reference="pass", untested=[5],
                                  note="3 probes at most")


def test_a_probe_budget_without_words_says_it_was_spent() -> None:
    def probe(i: int) -> str:
        raise ProbeLimit()

    assert bisect(5, probe) == SearchResult("stopped", note="probe budget spent")  # type: ignore[arg-type]


@pytest.mark.parametrize(("before", "after", "skipped", "nxt"), [
    (0, 1, set(), None),  # adjacent: nothing between
    (3, 4, {9}, None),
    (0, 2, set(), 1),
    (0, 10, set(), 5),
    (0, 10, {5}, 6),  # above the middle first
    (0, 10, {5, 6}, 4),
    (0, 10, {4, 5, 6}, 7),
    (0, 10, {3, 4, 5, 6, 7}, 8),
    (0, 4, {1, 2, 3}, None),  # every point between skipped
    (2, 5, {3}, 4),
    (2, 5, {4}, 3),
    (0, 6, {1, 2, 3, 4, 5, 50, 60}, None),
])
def test_the_next_point_is_the_nearest_the_middle_not_skipped(before: int, after: int, skipped: set[int],
                                                             nxt: int | None) -> None:
    assert _next_point(before, after, skipped) == nxt


def test_the_default_skip_budget_is_five_points() -> None:
    result, probed = search(12, verdicts(12, 9, set(range(5))))
    assert result.outcome == "change" and result.first == 5  # five skipped: within the budget
    result, probed = search(12, verdicts(12, 9, set(range(6))))
    assert probed == [0, 11, 1, 2, 3, 4, 5]
    assert result == SearchResult("cannot-probe", note="no probe-able point at the low end (6 skipped)")
