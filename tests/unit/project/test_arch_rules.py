"""data/arch_rules.toml (project/arch_rules.py): the shipped rules load through the model, which holds what the
standard-library readers (archflag, archscan/verdict) take from the same file; a malformed file is one located
line."""

from __future__ import annotations

from importlib import resources

import pytest
from data_files import edited, line_of, one_line

from pinmatrix import archflag
from pinmatrix.project.arch_rules import ArchRulesError, parse_arch_rules, shipped_arch_rules

TEXT = resources.files("pinmatrix").joinpath("data/arch_rules.toml").read_text(encoding="utf-8")


def test_the_shipped_rules_are_what_the_standard_library_readers_see() -> None:
    doc, raw = shipped_arch_rules(), archflag.arch_rules()
    for form in ("sass", "ptx"):
        for suffix in ("plain", "a", "f"):
            rule = getattr(getattr(doc, form), suffix)
            assert (rule.on, rule.runs, rule.source) == tuple(raw[form][suffix][k] for k in ("on", "runs", "source"))
    assert doc.notes.model_dump() == raw["notes"]
    (evidence,) = doc.evidence
    assert evidence.gpu == "sm_121" and "sm_120f" in evidence.fp4_targets and evidence.aot_fp4_modules
    assert set(doc.own_packages.not_own) == {"torch", "triton"} and "triton" in doc.jit_packages


def test_an_evidence_rule_without_aot_modules_reads_every_aot_module() -> None:
    start = TEXT.index("aot_fp4_modules = ")
    text = TEXT[:start] + TEXT[TEXT.index("\n", start) + 1:]
    assert parse_arch_rules(text).evidence[0].aot_fp4_modules is None


@pytest.mark.parametrize(("old", "new", "at", "words"), [
    ('on = "exact"\nruns = "jit"', 'on = "older"\nruns = "jit"', 'on = "older"',
     "ptx.a.on: Input should be 'same-major-newer-minor', 'exact' or 'newer'"),
    ('runs = "jit"\nsource = "CUDA 12.9', 'runs = "emulated"\nsource = "CUDA 12.9', 'runs = "emulated"',
     "ptx.f.runs: Input should be 'native' or 'jit'"),
    ('native_target = "sm_121a"', 'native_target = "121a"', 'native_target = "121a"',
     "evidence.0.native_target: String should match pattern"),
    ('not_own = ["torch", "triton"]', 'not_owned = ["torch", "triton"]', "not_owned",
     "own_packages.not_owned: unknown key (did you mean 'not_own'?)"),
    ("[notes]\n", "[note]\n", "[note]", "note: unknown key (did you mean 'notes'?)"),
])
def test_a_malformed_rules_file_is_one_located_line(old: str, new: str, at: str, words: str) -> None:
    text = edited(TEXT, old, new)
    with pytest.raises(ArchRulesError) as err:
        parse_arch_rules(text)
    assert one_line(err).startswith(f"data/arch_rules.toml:{line_of(text, at)}: {words}")
