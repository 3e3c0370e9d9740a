"""pinmatrix.archscan.verdict rule by rule: the GPU as written, the code the runtime picks from one kernel group
(the GPU's own capability first, then 'a' over 'f' over plain, then the newest minor; the newest PTX when no
SASS runs), a binary's verdict, counts, notes and one-line summary, a package's worst verdict, and whether a
binary honours a build flag."""

from __future__ import annotations

import pytest

from pinmatrix.archflag import ArchFlag, arch_rules
from pinmatrix.archscan.binary import BinaryTargets
from pinmatrix.archscan.verdict import (
    CANNOT,
    JIT,
    MISSING,
    NATIVE,
    NO_DEVICE_CODE,
    OTHER,
    PARTIAL,
    GroupVerdict,
    binary_verdict,
    group_verdict,
    honours,
    package_verdict,
    parse_gpu,
    worst_verdict,
)

NOTES = arch_rules()["notes"]
SM121 = (12, 1)


def _binary(*groups: tuple[str, ...], exact: bool = True, grouped: bool = True, notes: list[str] | None = None,
            ) -> BinaryTargets:
    return BinaryTargets(path="lib/x.so", size=10, groups=list(groups), tool="cuobjdump", exact=exact,
                         grouped=grouped, notes=list(notes or []))


@pytest.mark.parametrize(("gpu", "capability"), [
    ("sm_121", (12, 1)), ("12.1", (12, 1)), ("sm_90a", (9, 0)), (" 9.0 ", (9, 0)), ("compute_80", (8, 0)),
    ("100", (10, 0)), ("10.34", (10, 3)), ("12.1.0", (12, 1)),
])
def test_a_gpu_as_written(gpu: str, capability: tuple[int, int]) -> None:
    assert parse_gpu(gpu) == capability


@pytest.mark.parametrize(("targets", "verdict", "chosen"), [
    (("sm_120", "sm_121"), NATIVE, "sm_121"),  # the GPU's own capability first
    (("sm_121", "sm_121f", "sm_121a"), NATIVE, "sm_121a"),  # then 'a' over 'f' over plain
    (("sm_121", "sm_121f"), NATIVE, "sm_121f"),
    (("sm_120f", "sm_120"), NATIVE, "sm_120f"),
    (("sm_80", "sm_86", "sm_120"), NATIVE, "sm_120"),
    (("sm_120", "sm_120f", "sm_121"), NATIVE, "sm_121"),
    (("sm_100a", "compute_80", "compute_90", "compute_90a"), JIT, "compute_90"),  # the newest PTX that compiles
    (("compute_120", "compute_120f"), JIT, "compute_120f"),
    (("compute_120f", "compute_120"), JIT, "compute_120f"),
    (("sm_120a", "sm_100a"), CANNOT, None),  # the GPU's own major, for a sibling only
    (("sm_90a", "sm_100a"), OTHER, None),  # only other generations
    ((), OTHER, None),
])
def test_the_code_the_runtime_picks_from_a_group(targets: tuple[str, ...], verdict: str, chosen: str | None) -> None:
    assert group_verdict(targets, SM121) == GroupVerdict(verdict, chosen)


def test_the_newest_minor_wins_among_older_sass() -> None:
    assert group_verdict(("sm_80", "sm_86"), (8, 9)) == GroupVerdict(NATIVE, "sm_86")
    assert group_verdict(("sm_86", "sm_80"), (8, 9)) == GroupVerdict(NATIVE, "sm_86")


def test_a_binary_that_runs_natively_on_its_own_capability() -> None:
    v = binary_verdict(_binary(("sm_121a", "sm_90a"), ("sm_121a",)), SM121)
    assert (v.verdict, v.groups, v.counts, v.used, v.cannot, v.other) == (NATIVE, 2, {NATIVE: 2}, {"sm_121a": 2}, {}, {})
    assert (v.sass, v.ptx, v.exact, v.tool, v.path) == (["sm_90a", "sm_121a"], [], True, "cuobjdump", "lib/x.so")
    assert v.notes == [] and v.summary == "native: 2/2 native (sm_121a)"
    assert v.to_dict() == {"path": "lib/x.so", "verdict": NATIVE, "groups": 2, "counts": {NATIVE: 2},
                           "used": {"sm_121a": 2}, "cannot": {}, "other": {}, "sass": ["sm_90a", "sm_121a"],
                           "ptx": [], "exact": True, "tool": "cuobjdump", "notes": []}


def test_a_partial_binary_names_what_cannot_run_and_the_notes_of_what_does() -> None:
    groups = [("sm_120a", "sm_100a")] * 3 + [("sm_100a", "sm_121a")] + [("sm_120",)] * 2 + [("sm_120f",)] \
        + [("compute_80",)] + [("sm_90a",)] + [("sm_120a",)]
    v = binary_verdict(_binary(*groups, notes=["from the reader"]), SM121)
    assert v.verdict == PARTIAL and v.groups == 10
    assert v.counts == {CANNOT: 4, NATIVE: 4, JIT: 1, OTHER: 1}
    assert v.cannot == {"sm_100a sm_120a": 3, "sm_120a": 1} and v.other == {"sm_90a": 1}
    assert v.used == {"sm_121a": 1, "sm_120": 2, "sm_120f": 1, "compute_80": 1}
    assert v.notes == ["from the reader", NOTES["jit"], NOTES["older_minor"], NOTES["family"], NOTES["other_gpus"]]
    assert v.summary == ("partial: 4/10 kernel groups cannot run (they hold only 3x sm_100a sm_120a; 1x sm_120a); "
                         "1/10 via PTX JIT; 4/10 native (sm_120 sm_120f sm_121a); 1/10 only for other GPUs")


def test_a_group_that_cannot_run_is_named_by_its_targets_in_capability_order() -> None:
    v = binary_verdict(_binary(("sm_120a", "sm_90a", "sm_120a"), ("compute_100a", "sm_100a")), SM121)
    assert v.cannot == {"sm_90a sm_120a": 1} and v.other == {"sm_100a compute_100a": 1}


def test_the_summary_names_at_most_four_kinds_of_group_that_cannot_run() -> None:
    groups = [("sm_120a",)] * 5 + [("sm_120a", "sm_100a")] * 4 + [("sm_122a",)] * 3 + [("sm_123a",)] * 2 \
        + [("sm_124a",)]
    v = binary_verdict(_binary(*groups), SM121)
    assert v.verdict == CANNOT and v.notes == []
    assert v.summary == ("cannot-run: 15/15 kernel groups cannot run (they hold only 5x sm_120a; 4x sm_100a sm_120a; "
                         "3x sm_122a; 2x sm_123a)")


@pytest.mark.parametrize(("groups", "verdict"), [
    ([("sm_90a",), ("sm_100a",)], OTHER),
    ([("compute_80",), ("sm_121",)], JIT),
    ([("sm_121",)], NATIVE),
    ([("compute_80",), ("sm_120a",)], PARTIAL),
    ([], OTHER),
])
def test_a_binarys_verdict(groups: list[tuple[str, ...]], verdict: str) -> None:
    assert binary_verdict(_binary(*groups), SM121).verdict == verdict


def test_an_ungrouped_binary_says_so_and_notes_are_not_repeated() -> None:
    v = binary_verdict(_binary(("compute_80",), ("compute_90",), grouped=False, notes=[NOTES["jit"]]), SM121)
    assert v.notes == [NOTES["jit"], "kernel groups unknown: the verdict is for the union of the binary's targets"]
    assert v.summary == "ptx-jit: 2/2 via PTX JIT"


def test_the_same_minor_sass_gives_no_older_minor_note() -> None:
    assert binary_verdict(_binary(("sm_121",)), SM121).notes == []
    assert binary_verdict(_binary(("sm_120",)), SM121).notes == [NOTES["older_minor"]]
    assert binary_verdict(_binary(("sm_120f",)), SM121).notes == [NOTES["family"]]
    assert binary_verdict(_binary(("sm_121f",)), SM121).notes == [NOTES["family"]]


def test_the_worst_verdict_and_a_packages_verdict() -> None:
    assert worst_verdict([]) == NO_DEVICE_CODE
    assert worst_verdict([NATIVE, OTHER, NO_DEVICE_CODE]) == NATIVE
    assert worst_verdict([JIT, NATIVE]) == JIT and worst_verdict([MISSING, CANNOT]) == MISSING
    binaries = {v: binary_verdict(_binary(*g), SM121) for v, g in (
        (NATIVE, [("sm_121",)]), (CANNOT, [("sm_120a",)]), (OTHER, [("sm_90a",)]), (JIT, [("compute_80",)]),
        (PARTIAL, [("sm_121",), ("sm_120a",)]))}
    assert package_verdict([]) == NO_DEVICE_CODE
    assert package_verdict([binaries[NATIVE], binaries[CANNOT]]) == PARTIAL
    assert package_verdict([binaries[JIT], binaries[CANNOT]]) == PARTIAL
    assert package_verdict([binaries[PARTIAL], binaries[CANNOT]]) == PARTIAL
    assert package_verdict([binaries[OTHER], binaries[CANNOT]]) == CANNOT
    assert package_verdict([binaries[OTHER], binaries[NATIVE]]) == NATIVE
    assert package_verdict([binaries[OTHER]]) == OTHER


def test_whether_a_binary_honours_a_flag() -> None:
    flag = ArchFlag.parse("12.1a")
    assert honours(_binary(("sm_121a",)), flag) is True
    assert honours(_binary(("sm_121f", "sm_120a")), flag) is False
    assert honours(_binary(("sm_121",), exact=False), flag) is None  # suffixes unknown, the number matches
    assert honours(_binary(("sm_120",), exact=False), flag) is False
    assert honours(_binary(("sm_121",)), ArchFlag.parse("12.1")) is True
