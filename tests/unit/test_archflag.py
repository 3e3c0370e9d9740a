"""pinmatrix.archflag rule by rule: flags and targets parsed (and refused), their names, the a/f/plain rules of
data/arch_rules.toml applied at their edges (the same major's older and newer minors, the next major), which
SASS target carries which build, the flag lists of TORCH_CUDA_ARCH_LIST, and compute capabilities as written."""

from __future__ import annotations

import pytest
from helpers import rule_source

from pinmatrix import archflag
from pinmatrix.archflag import ArchFlag, parse_capability, parse_flags, split_flags


@pytest.mark.parametrize(("text", "flag"), [
    ("12.1a", ArchFlag(12, 1, "a", False)),
    ("12.0f", ArchFlag(12, 0, "f", False)),
    ("9.0a+PTX", ArchFlag(9, 0, "a", True)),
    ("8.0", ArchFlag(8, 0, "", False)),
    ("10.3+PTX", ArchFlag(10, 3, "", True)),
])
def test_a_build_flag_is_parsed(text: str, flag: ArchFlag) -> None:
    assert ArchFlag.parse(text) == flag and flag.sass


@pytest.mark.parametrize("text", ["12.10", "sm_90", "9", "9.0b", "9.0+ptx", " 9.0", "9.0a+PTXX", "x9.0"])
def test_what_is_no_build_flag_is_refused(text: str) -> None:
    with pytest.raises(ValueError) as err:
        ArchFlag.parse(text)
    assert str(err.value) == f"bad arch flag {text!r}"


@pytest.mark.parametrize(("text", "flag"), [
    ("sm_121a", ArchFlag(12, 1, "a", ptx=False, sass=True)),
    ("compute_120f", ArchFlag(12, 0, "f", ptx=True, sass=False)),
    (" sm_90\n", ArchFlag(9, 0, "", ptx=False, sass=True)),
    ("compute_100", ArchFlag(10, 0, "", ptx=True, sass=False)),
])
def test_a_binary_target_is_parsed(text: str, flag: ArchFlag) -> None:
    assert ArchFlag.parse_target(text) == flag


@pytest.mark.parametrize("text", ["sm_9", "lto_90", "sm_90b", "compute90", "12.0f", "sm_90a+PTX"])
def test_what_is_no_binary_target_is_refused(text: str) -> None:
    with pytest.raises(ValueError) as err:
        ArchFlag.parse_target(text)
    assert str(err.value) == f"bad GPU target {text!r}"


def test_the_names_of_a_flag() -> None:
    both = ArchFlag.parse("9.0a+PTX")
    assert (both.base, both.label, both.capability) == ("9.0", "9.0a+PTX", (9, 0))
    assert (both.sass_name, both.ptx_name, both.names) == ("sm_90a", "compute_90a", ("sm_90a", "compute_90a"))
    sass = ArchFlag.parse("12.1a")
    assert (sass.label, sass.names) == ("12.1a", ("sm_121a",))
    ptx = ArchFlag.parse_target("compute_120f")
    assert (ptx.label, ptx.names) == ("12.0f", ("compute_120f",))


@pytest.mark.parametrize(("target", "gpu", "runs"), [
    # plain SASS: the same major, an equal or newer minor
    ("sm_80", (8, 0), "native"), ("sm_80", (8, 6), "native"), ("sm_86", (8, 0), None), ("sm_80", (9, 0), None),
    ("sm_90", (8, 9), None),
    # arch-specific SASS: that capability only
    ("sm_90a", (9, 0), "native"), ("sm_120a", (12, 1), None), ("sm_121a", (12, 0), None),
    # family SASS: the family's equal or newer minors
    ("sm_120f", (12, 0), "native"), ("sm_120f", (12, 1), "native"), ("sm_121f", (12, 0), None),
    ("sm_100f", (12, 0), None), ("sm_120f", (11, 9), None),
    # plain PTX: any equal or newer capability, through the JIT
    ("compute_80", (8, 0), "jit"), ("compute_80", (12, 1), "jit"), ("compute_90", (8, 9), None),
    # arch-specific PTX: that capability only; family PTX: the family's equal or newer minors
    ("compute_90a", (9, 0), "jit"), ("compute_90a", (10, 0), None),
    ("compute_120f", (12, 1), "jit"), ("compute_121f", (12, 0), None), ("compute_120f", (13, 0), None),
])
def test_how_a_target_runs_at_the_edges_of_its_rule(target: str, gpu: tuple[int, int], runs: str | None) -> None:
    flag = ArchFlag.parse_target(target)
    assert flag.how_runs(*gpu) == runs
    assert flag.runs_on(*gpu) is (runs is not None)


def test_sass_is_preferred_to_ptx_and_ptx_is_the_fallback() -> None:
    both = ArchFlag.parse("8.0+PTX")
    assert both.how_runs(8, 6) == "native" and both.how_runs(9, 0) == "jit" and both.how_runs(7, 5) is None
    assert ArchFlag(8, 0, "", ptx=False, sass=False).how_runs(8, 0) is None


def test_a_rule_file_that_is_wrong_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = archflag.arch_rules()
    bad_on = {**rules, "sass": {**rules["sass"], "plain": {**rules["sass"]["plain"], "on": "older"}}}
    monkeypatch.setattr(archflag, "arch_rules", lambda: bad_on)
    with pytest.raises(ValueError) as err:
        ArchFlag.parse("8.0").how_runs(8, 0)
    assert str(err.value) == "data/arch_rules.toml: unknown rule 'older'"
    bad_runs = {**rules, "ptx": {**rules["ptx"], "f": {**rules["ptx"]["f"], "runs": "maybe"}}}
    monkeypatch.setattr(archflag, "arch_rules", lambda: bad_runs)
    with pytest.raises(ValueError) as err:
        ArchFlag.parse_target("compute_120f").how_runs(12, 0)
    assert str(err.value) == "data/arch_rules.toml: ptx.f.runs must be 'native' or 'jit'"


@pytest.mark.parametrize(("target", "build", "carried"), [
    ("sm_121a", "12.1a", True), ("sm_121a", "12.1f", True), ("sm_121a", "12.1", True),
    ("sm_121f", "12.1a", False), ("sm_121f", "12.1f", True), ("sm_121f", "12.1", True),
    ("sm_121", "12.1a", False), ("sm_121", "12.1f", False), ("sm_121", "12.1", True),
    ("sm_120a", "12.1a", False), ("sm_121a", "12.0a", False),
])
def test_which_sass_target_carries_which_build(target: str, build: str, carried: bool) -> None:
    assert ArchFlag.parse_target(target).carries(ArchFlag.parse(build)) is carried


def test_ptx_carries_no_build() -> None:
    assert not ArchFlag.parse_target("compute_121a").carries(ArchFlag.parse("12.1a"))


def test_each_rule_cites_its_source() -> None:
    assert rule_source("sass", "").startswith("CUDA C++ Programming Guide, 'Binary Compatibility'")
    assert rule_source("ptx", "a").startswith("CUDA C++ Programming Guide, 'Feature Availability': PTX")
    assert rule_source("sass", "f").startswith("CUDA 12.9 release notes and NVIDIA technical blog")


@pytest.mark.parametrize(("value", "flags"), [
    ("9.0a 12.1a", ["9.0a", "12.1a"]),
    ("9.0a;12.1a,8.0", ["9.0a", "12.1a", "8.0"]),
    ("  8.0 +PTX  9.0 ", ["8.0+PTX", "9.0"]),
    ("8.0 +ptx", ["8.0+PTX"]),
    ("+PTX 8.0", ["+PTX", "8.0"]),
    ("", []),
    (";;", []),
    (";8.0, ;9.0a", ["8.0", "9.0a"]),  # a separator first: an empty token, skipped
])
def test_flag_lists_split_as_torch_writes_them(value: str, flags: list[str]) -> None:
    assert split_flags(value) == flags


def test_a_cells_flags_are_parsed_with_a_lone_ptx_attached() -> None:
    assert parse_flags(("9.0a", "+PTX", "12.1a")) == [ArchFlag(9, 0, "a", True), ArchFlag(12, 1, "a", False)]
    assert parse_flags(["8.0 +PTX"]) == [ArchFlag(8, 0, "", True)]
    with pytest.raises(ValueError, match=r"bad arch flag '\+PTX'"):
        parse_flags(("+PTX",))


@pytest.mark.parametrize(("text", "capability"), [
    ("9.0", (9, 0)), ("12.1", (12, 1)), ("sm_121", (12, 1)), ("sm_90a", (9, 0)), ("90", (9, 0)),
    ("compute_120f", (12, 0)), ("SM_100", (10, 0)), (" 8.6 ", (8, 6)), ("10.10", (10, 10)),
    ("", None), (None, None), ("gpu", None), ("9.0.1", None), ("sm_9", None),
])
def test_a_capability_as_hosts_and_cells_write_it(text: str | None, capability: tuple[int, int] | None) -> None:
    assert parse_capability(text) == capability
