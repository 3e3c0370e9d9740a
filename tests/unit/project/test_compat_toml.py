"""compat.toml (project/compat_toml.py): a malformed file gives one line that names the file and the key, as a
PinmatrixError; the shipped file loads. The same shape of test covers signatures (test_signatures.py) and the layer
plan (test_layer_plan.py); `edited` and `one_line` are in tests/support/data_files.py."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
from data_files import edited, line_of, one_line, without_line

from pinmatrix.matrix.compat import CompatError, CompatRules
from pinmatrix.project.compat_toml import CompatDoc, TorchSeries, VllmRule

REPO = Path(__file__).resolve().parents[3]
COMPAT_TEXT = resources.files("pinmatrix").joinpath("data/compat.toml").read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------------- compat.toml


def test_the_shipped_compat_rules_load_through_the_model() -> None:
    rules = CompatRules.from_toml(COMPAT_TEXT)
    assert isinstance(rules.doc, CompatDoc) and isinstance(CompatRules.default().doc, CompatDoc)
    assert rules.source("cuda_min_driver").startswith("NVIDIA CUDA Toolkit release notes")
    assert rules.source("vllm").startswith("vLLM requirements/cuda.txt")
    assert rules.forward_compat_gpus == frozenset({"sm_80", "sm_90", "sm_100", "sm_103"})
    series = rules.torch_series("2.9.1")
    assert isinstance(series, TorchSeries) and (series.triton, series["default_cuda"]) == ("3.5.1", "12.8")
    rule = rules.vllm_rule("0.33.0")
    assert isinstance(rule, VllmRule) and (rule.torch, rule.flashinfer) == ("==2.14.0", "==0.7.2.post1")
    assert rules.vllm_rule("0.10.1").flashinfer is None
    assert rules.doc.arch.family_min_cuda == "12.9" and rules.doc.xformers.torch["0.0.35"] == ">=2.10"
    with pytest.raises(KeyError):
        series["no_such_key"]


@pytest.mark.parametrize(("old", "new", "line"), [
    # unknown key (a misspelt key is reported as unknown, not as the missing one)
    ('family_min_cuda = "12.9"', 'family_min_cud = "12.9"',
     "compat.toml: arch.family_min_cud: unknown key (did you mean 'family_min_cuda'?)"),
    ("[xformers]\n", "[xformer]\n", "compat.toml: xformer: unknown key (did you mean 'xformers'?)"),
    ('[arch]\nsource = "NVIDIA', '[arch]\nnote = "NVIDIA',
     "compat.toml: arch.note: unknown key (expected one of: family_min_cuda, min_cuda, source)"),
    # wrong type
    ('"13.0" = "580.65.06"', '"13.0" = 580',
     "compat.toml: cuda_min_driver.versions.13.0: Input should be a valid string"),
    ('cuda = ["11.8", "12.4", "12.6"]', 'cuda = "12.4"',
     "compat.toml: torch.series.2.6.cuda: Input should be a valid list"),
    # missing required key
    ('triton = "3.2.0"\n', "", "compat.toml: torch.series.2.6.triton: required key is missing"),
    ('[arch]\nsource = "NVIDIA', '[arch]\n# source = "NVIDIA', "compat.toml: arch.source: required key is missing"),
    ('versions = "==0.9.1"\n', "", "compat.toml: vllm.rules.0.versions: required key is missing"),
    # values that are no version, specifier, GPU or arch
    ('"13.0" = "580.65.06"', '"13.0" = "580.x"',
     "compat.toml: cuda_min_driver.versions.13.0: '580.x' is not a valid version"),
    ('"13.3" = "610.43.02"', '"13.x" = "610.43.02"',
     "compat.toml: cuda_min_driver.versions.13.x: '13.x' is not a valid version"),
    ('torch = "==2.7.0"', 'torch = "=>2.7.0"',
     "compat.toml: vllm.rules.0.torch: '=>2.7.0' is not a valid version specifier (e.g. '==2.7.0' or '>=2.11,<2.12')"),
    ('"sm_103"]', '"103"]',
     "compat.toml: cuda_min_driver.forward_compat_gpus.3: gpu '103' must look like sm_90, sm_100 or sm_121"),
    ('"9.0a" = "12.0"', '"9.0b" = "12.0"', "compat.toml: arch.min_cuda.9.0b: arch '9.0b' must look like 9.0 or 9.0a"),
    ('default_cuda = "12.4"', 'default_cuda = "12.8"',
     "compat.toml: torch.series.2.6.default_cuda: '12.8' is not one of the series' CUDA variants (11.8, 12.4, 12.6)"),
])
def test_a_malformed_compat_file_is_one_line_naming_the_key(old: str, new: str, line: str) -> None:
    with pytest.raises(CompatError) as err:
        CompatRules.from_toml(edited(COMPAT_TEXT, old, new))
    assert without_line(one_line(err), "compat.toml") == line


def test_a_compat_problem_names_the_line_of_its_key() -> None:
    text = edited(COMPAT_TEXT, 'family_min_cuda = "12.9"', 'family_min_cud = "12.9"')
    with pytest.raises(CompatError) as err:
        CompatRules.from_toml(text)
    assert one_line(err).startswith(f"compat.toml:{line_of(text, 'family_min_cud = ')}: arch.family_min_cud: ")
    text = edited(COMPAT_TEXT, 'triton = "3.2.0"\n', "")  # a missing key: the line of its table
    with pytest.raises(CompatError) as err:
        CompatRules.from_toml(text)
    header = line_of(text, '[torch.series."2.6"]')
    assert one_line(err).startswith(f"compat.toml:{header}: torch.series.2.6.triton: required key is missing")


def test_compat_missing_table_and_source_and_syntax() -> None:
    cut = COMPAT_TEXT.index("[xformers]")
    without = COMPAT_TEXT[:cut] + COMPAT_TEXT[COMPAT_TEXT.index("[vllm]"):]
    with pytest.raises(CompatError) as err:
        CompatRules.from_toml(without)
    assert one_line(err) == "compat.toml:1: xformers: required key is missing"  # a missing table: the file's top
    with pytest.raises(CompatError) as err:
        CompatRules.from_toml(edited(COMPAT_TEXT, 'source = "PyTorch RELEASE.md', 'sources = "PyTorch RELEASE.md'))
    assert without_line(one_line(err), "compat.toml") == (
        "compat.toml: torch.sources: unknown key (did you mean 'source'?)")
    with pytest.raises(CompatError) as err:
        CompatRules.from_toml("[torch\n", name="mine.toml")
    assert one_line(err).startswith("mine.toml:1: syntax error: ")
    with pytest.raises(CompatError) as err:  # the file's own name in a model error too
        CompatRules.from_toml(without, name="mine.toml")
    assert one_line(err) == "mine.toml:1: xformers: required key is missing"
    with pytest.raises(CompatError) as err:  # bounded: a compatibility table is a few kB
        CompatRules.from_toml(COMPAT_TEXT + "#" * (1 << 20) + "\n", name="big.toml")
    assert one_line(err) == (f"big.toml: {len(COMPAT_TEXT.encode()) + (1 << 20) + 1} bytes is more than a "
                             "compatibility table may have (1048576 bytes)")


def test_compat_rules_built_in_memory_go_through_the_same_model() -> None:
    """Tables and sources may be left out in memory (a table left out knows no version); what is given is
    checked exactly as in the file."""
    rules = CompatRules({"torch": {"series": {"2.9": {"triton": "3.5.0", "cuda": ["12.8"], "default_cuda": "12.8"}}}})
    assert rules.source("torch") == "" and rules.torch_series("2.9.0").triton == "3.5.0"
    with pytest.raises(CompatError) as err:
        CompatRules({"torch": {"series": {"2.9": {"triton": "3.5.0", "cuda": ["12.8"]}}}})
    assert one_line(err) == "compat.toml: torch.series.2.9.default_cuda: required key is missing"
    with pytest.raises(CompatError) as err:
        CompatRules({"toch": {}})
    assert one_line(err).startswith("compat.toml: toch: unknown key (did you mean 'torch'?)")
    with pytest.raises(CompatError) as err:  # a table that is not a table: the model says so, no TypeError
        CompatRules({"arch": 5})
    assert one_line(err).startswith("compat.toml: arch: Input should be a valid dictionary")
    typed = CompatRules.from_toml(COMPAT_TEXT).doc
    assert CompatRules(typed).doc is typed  # a typed document is used as it is, not checked again


def test_element_type_is_the_member_of_a_container_only() -> None:
    from pinmatrix.datamodel import _element_type

    assert _element_type(list[int]) is int and _element_type(dict[str, float]) is float
    assert _element_type(tuple[str, ...]) is str
    assert _element_type(int | str) is None and _element_type(int) is None


def test_compat_lookups_name_what_they_do_not_know() -> None:
    from pinmatrix.matrix.compat import gpu_capability

    assert gpu_capability("sm_121") == (12, 1)
    with pytest.raises(ValueError, match=r"^gpu 'h100' names no compute capability$"):
        gpu_capability("h100")
    series = CompatRules.from_toml(COMPAT_TEXT).torch_series("2.9.0")
    assert series["triton"] == series.triton
    with pytest.raises(KeyError, match="tritn"):
        series["tritn"]
