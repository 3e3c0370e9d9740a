"""The canary's comparison of a candidate with its baseline, as a pure function: a smoke that newly fails (xfail
counts: a known issue explains a failure, it is still one), passes again or still fails; a skip ("no GPU"), an
infrastructure error and a missing result kept apart from failures and from each other; expectations that flip;
arch targets gained and lost; size and build-time deltas or "not recorded"; the bisect command only where exactly
one axis moved."""

from __future__ import annotations

import shlex

from pinmatrix.upgrade.canary import CanarySide, RecordedSmoke, compare, diff_lines

H = "box (cpu-only)"
BASE_PINS = {"torch": "2.11.0", "triton": "3.6.0", "env": "default"}


def _side(pins: dict[str, str], results: dict[str, str], **kw: object) -> CanarySide:
    return CanarySide("c" * 12 if pins != BASE_PINS else "b" * 12, "name", pins,
                      {(smoke, H): RecordedSmoke(status, f"why {smoke}") for smoke, status in results.items()},
                      **kw)  # type: ignore[arg-type]


def _changes(before: dict[str, str], after: dict[str, str], pins: dict[str, str] | None = None) -> dict[str, str]:
    diff = compare("s", _side(pins or {**BASE_PINS, "torch": "2.14.0"}, after), _side(BASE_PINS, before), "known-good")
    return {s.smoke: s.change for s in diff.smokes}


def test_a_smoke_that_passed_and_now_fails_is_newly_failing_and_the_reverse_newly_passing() -> None:
    got = _changes({"a": "pass", "b": "fail", "c": "fail", "d": "pass", "e": "xpass", "f": "pass"},
                   {"a": "fail", "b": "pass", "c": "degraded", "d": "xfail", "e": "fail", "f": "pass"})
    assert got == {"a": "newly failing", "b": "newly passing", "c": "still failing", "d": "newly failing",
                   "e": "newly failing"}  # f passes on both: not a change


def test_skipped_infrastructure_error_and_not_run_are_kept_apart_and_never_failures() -> None:
    got = _changes({"gpu": "pass", "infra": "pass", "gone": "pass", "both": "skip", "mixed": "skip"},
                   {"gpu": "skip", "infra": "error", "new": "fail", "both": "skip", "mixed": "error"})
    assert got == {"gpu": "skipped", "infra": "infrastructure error", "gone": "not run", "new": "not run",
                   "both": "skipped", "mixed": "infrastructure error"}


def test_the_same_smoke_on_another_host_is_not_run_there_not_a_change_of_verdict() -> None:
    cand = _side({**BASE_PINS, "torch": "2.14.0"}, {})
    cand.results[("a", "1x NVIDIA H200 sm_90 driver 580")] = RecordedSmoke("fail")
    diff = compare("s", cand, _side(BASE_PINS, {"a": "pass"}), "known-good")
    assert sorted((s.host, s.change) for s in diff.smokes) == [("1x NVIDIA H200 sm_90 driver 580", "not run"),
                                                                (H, "not run")]


def test_one_moved_axis_gives_the_exact_bisect_and_two_give_none() -> None:
    one = compare("h200", _side({**BASE_PINS, "torch": "2.14.0"}, {"a": "fail"}), _side(BASE_PINS, {"a": "pass"}),
                  "known-good")
    [change] = one.smokes
    assert shlex.join(change.bisect) == ("pinmatrix bisect version a --stack h200 --axis torch --range "
                                         "'>=2.11.0,<=2.14.0' --fix triton=3.6.0 --fix env=default")
    assert "        the release where it changes: pinmatrix bisect version a" in "\n".join(diff_lines(one))
    two = compare("h200", _side({**BASE_PINS, "torch": "2.14.0", "triton": "3.8.0"}, {"a": "fail"}),
                  _side(BASE_PINS, {"a": "pass"}), "known-good")
    assert two.moved == {"torch": ("2.11.0", "2.14.0"), "triton": ("3.6.0", "3.8.0")}
    assert [s.change for s in two.smokes] == ["newly failing"] and two.smokes[0].bisect == ()


def test_a_variant_label_is_bisected_over_the_two_values() -> None:
    base = {"xformers": "0.0.34-int64"}
    diff = compare("h200", _side({"xformers": "0.0.35-int64"}, {"a": "fail"}), _side(base, {"a": "pass"}), "kg")
    assert diff.smokes[0].bisect[-2:] == ("--values", "0.0.34-int64,0.0.35-int64")


def test_expectations_that_flip_and_an_expected_failure_that_now_passes() -> None:
    cand = _side({**BASE_PINS, "torch": "2.14.0"}, {"bound": "xpass"}, expectations={"bound": "xf-1347: fail",
                                                                                     "nvfp4": "drv-595: fail"})
    base = _side(BASE_PINS, {"bound": "xfail"}, expectations={"bound": "xf-1347: fail", "leak": "drv-590: degraded"})
    base.results[("bound", H)] = RecordedSmoke("xfail", "", "xf-1347")
    lines = compare("s", cand, base, "kg").expectations
    assert lines == ["leak: expected drv-590: degraded -> expected to pass",
                     "nvfp4: expected to pass -> expected drv-595: fail",
                     f"bound on {H}: failed as known issue xf-1347 expects, now xpass: the issue may be fixed in the "
                     "candidate"]
    unknown = compare("s", _side({"torch": "2.14.0"}, {}), base, "kg").expectations
    assert unknown == ["expectations: not known for the candidate (no cell of the matrix has its id)"]


def test_arch_coverage_gained_and_lost_or_not_scanned() -> None:
    cand = _side(BASE_PINS | {"torch": "2.14.0"}, {}, arch=frozenset({"sm_90a", "sm_120f", "compute_120"}))
    base = _side(BASE_PINS, {}, arch=frozenset({"sm_90a", "sm_80"}))
    assert compare("s", cand, base, "kg").arch == "arch coverage: gained compute_120 sm_120f; lost sm_80"
    assert compare("s", cand, _side(BASE_PINS, {}), "kg").arch.startswith("arch coverage: not scanned (baseline;")


def test_image_size_and_build_time_deltas_or_not_recorded() -> None:
    cand = _side(BASE_PINS | {"torch": "2.14.0"}, {}, image_bytes=3_500_000_000, build_seconds=90.0)
    base = _side(BASE_PINS, {}, image_bytes=3_000_000_000, build_seconds=120.0)
    diff = compare("s", cand, base, "kg")
    assert diff.size == "image size: 3000.0 -> 3500.0 MB, +500.0 MB (+16.7%)"
    assert diff.build_time == "build time: 120.0 -> 90.0 s, -30.0 s (-25.0%)"
    assert compare("s", cand, _side(BASE_PINS, {}, image_bytes=1), "kg").build_time == \
        "build time: not recorded (baseline)"
    assert compare("s", _side(BASE_PINS | {"torch": "2.14.0"}, {}), base, "kg").size == \
        "image size: not recorded (candidate)"


def test_axes_one_side_does_not_name_are_not_moved_pins() -> None:
    diff = compare("s", _side({"torch": "2.14.0"}, {}), _side(BASE_PINS, {}), "kg")
    assert diff.moved == {"torch": ("2.11.0", "2.14.0")}
    assert diff.unmatched == ["triton (baseline only)", "env (baseline only)"]
