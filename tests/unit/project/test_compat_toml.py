"""One typed model per data file, each checked one way: compat.toml (project/compat_toml.py), the smoke log
signatures (smoke/signatures.toml) and the image layer plan (images/layers.toml). A malformed file gives one
line that names the file and the key, as a PinmatrixError; the shipped files load."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from pinmatrix.errors import PinmatrixError
from pinmatrix.image.containerfile.layerplan import LayerPlanError, LayerSpec, load_layer_specs
from pinmatrix.matrix.compat import CompatError, CompatRules
from pinmatrix.project.compat_toml import CompatDoc, TorchSeries, VllmRule
from pinmatrix.smoke.classify import SIGNATURES_PATH, Signature, SignatureError, load_signatures

REPO = Path(__file__).resolve().parents[3]
COMPAT_TEXT = resources.files("pinmatrix").joinpath("data/compat.toml").read_text(encoding="utf-8")
SIGNATURES_TEXT = SIGNATURES_PATH.read_text(encoding="utf-8")
LAYERS_TEXT = (REPO / "images" / "layers.toml").read_text(encoding="utf-8")


def edited(text: str, old: str, new: str) -> str:
    """``text`` with the last ``old`` (the comments above the tables quote some keys) replaced by ``new``."""
    assert old in text, old
    i = text.rindex(old)
    return text[:i] + new + text[i + len(old):]


def one_line(err: pytest.ExceptionInfo[PinmatrixError]) -> str:
    text = str(err.value)
    assert "\n" not in text and err.value.exit_code == 2
    return text


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
    assert isinstance(rule, VllmRule) and (rule.torch, rule.flashinfer) == ("==2.13.0", "==0.7.0.post1")
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
    assert one_line(err) == line


def test_compat_missing_table_and_source_and_syntax() -> None:
    cut = COMPAT_TEXT.index("[xformers]")
    without = COMPAT_TEXT[:cut] + COMPAT_TEXT[COMPAT_TEXT.index("[vllm]"):]
    with pytest.raises(CompatError) as err:
        CompatRules.from_toml(without)
    assert one_line(err) == "compat.toml: xformers: required key is missing"
    with pytest.raises(CompatError) as err:
        CompatRules.from_toml(edited(COMPAT_TEXT, 'source = "PyTorch RELEASE.md', 'sources = "PyTorch RELEASE.md'))
    assert one_line(err) == "compat.toml: torch.sources: unknown key (did you mean 'source'?)"
    with pytest.raises(CompatError) as err:
        CompatRules.from_toml("[torch\n", name="mine.toml")
    assert one_line(err).startswith("mine.toml: syntax error: ")
    with pytest.raises(CompatError) as err:  # the file's own name in a model error too
        CompatRules.from_toml(without, name="mine.toml")
    assert one_line(err) == "mine.toml: xformers: required key is missing"


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


# ---------------------------------------------------------------------------------------- signatures.toml


def test_the_shipped_signatures_load_through_the_model() -> None:
    table = load_signatures()
    assert table and all(isinstance(s, Signature) for s in table)
    tactics = next(s for s in table if s.failure_class == "unsupported-tactics")
    assert (tactics.status, tactics.metric, tactics.case) == ("degraded", "autotuner_skipped_tactics", True)
    assert not tactics.pattern.flags & re.IGNORECASE  # case = true: case-sensitive
    illegal = next(s for s in table if s.failure_class == "illegal-memory-access")
    assert illegal.pattern.search("AN ILLEGAL MEMORY ACCESS WAS ENCOUNTERED")  # default: case-insensitive


@pytest.mark.parametrize(("old", "new", "where"), [
    ('metric = "autotuner_skipped_tactics"', 'metrik = "autotuner_skipped_tactics"',
     "signature #8: 'metrik': unknown key (did you mean 'metric'?)"),
    ("[[signature]]\nclass = \"crash\"", "[[signatures]]\nclass = \"crash\"",
     "signatures: unknown key (did you mean 'signature'?)"),
    ('case = true\nsource = "faulthandler', 'case = "yes"\nsource = "faulthandler',
     "signature #10: 'case': Input should be a valid boolean"),
    ('class = "crash"', "class = 3", "signature #10: 'class': Input should be a valid string"),
    ('status = "degraded"', 'status = "degrade"', "signature #8: 'status': Input should be 'degraded'"),
    ('class = "nccl-error"\n', "", "signature #5: 'class': required key is missing"),
    ('pattern = "CUDA out of memory|', 'patern = "CUDA out of memory|',
     "signature #6: 'patern': unknown key (did you mean 'pattern'?)"),
    ('[[signature]]\nclass = "crash"', '[[signature]]\n[signature.x]\n[[signature]]\nclass = "crash"',
     "signature #10: 'x': unknown key (expected one of: case, class, metric, pattern, source, status)"),
    ('pattern = "cuTensorMapEncodeTiled"', 'pattern = "(cuTensorMapEncodeTiled"',
     "signature #1: missing ), unterminated subpattern at position 0 in pattern '(cuTensorMapEncodeTiled'"),
    ('pattern = "cuTensorMapEncodeTiled"', 'pattern = "cuTensorMap[EncodeTiled"',
     "signature #1: unterminated character set at position 11 in pattern 'cuTensorMap[EncodeTiled'"),
])
def test_a_malformed_signature_file_is_one_line_naming_the_row_and_key(
        tmp_path: Path, old: str, new: str, where: str) -> None:
    path = tmp_path / "signatures.toml"
    path.write_text(edited(SIGNATURES_TEXT, old, new), encoding="utf-8")
    with pytest.raises(SignatureError) as err:
        load_signatures(path)
    assert one_line(err) == f"{path}: {where}"


# ------------------------------------------------------------------------------------------- layers.toml


def test_the_shipped_layer_plan_loads_through_the_model() -> None:
    specs = load_layer_specs(REPO / "images" / "layers.toml")
    assert all(isinstance(s, LayerSpec) for s in specs)
    assert [(s.name, s.roots) for s in specs] == [
        ("torch", ("torch",)), ("triton", ("triton", "pytorch-triton")), ("xformers", ("xformers",)),
        ("flashinfer", ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache")), ("vllm", ("vllm",)),
        ("extras", ("*",))]


@pytest.mark.parametrize(("old", "new", "where"), [
    ('roots = ["vllm"]', 'root = ["vllm"]', "layer[4].root: unknown key (did you mean 'roots'?)"),
    ('roots = ["vllm"]', "roots = [3]", "layer[4].roots[0]: Input should be a valid string"),
    ('roots = ["vllm"]', 'roots = "vllm"', 'layer[4].roots: must be a non-empty list of distribution names, or ["*"]'),
    ('name = "vllm"', "name = 5", "layer[4].name: Input should be a valid string"),
    ('name = "vllm"\n', "", "layer[4].name: required key is missing"),
    ('name = "triton"', 'name = "Triton"',
     "layer[1].name: 'Triton' must be a lowercase name (a-z, 0-9 and '-', not starting with '-')"),
    ('name = "triton"', 'name = "torch"', "layer[1].name: 'torch' is already the name of layer[0]"),
    ('roots = ["vllm"]', 'roots = ["vl lm"]',
     "layer[4].roots: 'vl lm' is not a PEP 508 package name (letters, digits, '.', '_', '-', starting and ending "
     "with a letter or digit)"),
    ('roots = ["*"]', 'roots = ["rest"]', 'one layer must have roots = ["*"] to take what no other layer claims'),
])
def test_a_malformed_layer_plan_is_one_line_naming_the_key(tmp_path: Path, old: str, new: str, where: str) -> None:
    path = tmp_path / "layers.toml"
    path.write_text(edited(LAYERS_TEXT, old, new), encoding="utf-8")
    with pytest.raises(LayerPlanError) as err:
        load_layer_specs(path)
    assert one_line(err) == f"{path}: {where}"


def test_a_layer_plan_without_layers(tmp_path: Path) -> None:
    path = tmp_path / "layers.toml"
    path.write_text("# nothing\n")
    with pytest.raises(LayerPlanError) as err:
        load_layer_specs(path)
    assert one_line(err) == f"{path}: layer: required key is missing"
    path.write_text("layer = []\n")
    with pytest.raises(LayerPlanError) as err:
        load_layer_specs(path)
    assert one_line(err) == f"{path}: layer: needs at least one [[layer]] table"


def test_a_signature_row_that_is_not_a_table_is_named_by_its_number(tmp_path: Path) -> None:
    path = tmp_path / "signatures.toml"
    path.write_text('signature = [{class = "crash", pattern = "Segfault"}, "not a table"]\n', encoding="utf-8")
    with pytest.raises(SignatureError) as err:
        load_signatures(path)
    assert one_line(err).startswith(f"{path}: signature #2: Input should be a valid dictionary")


def test_compat_lookups_name_what_they_do_not_know() -> None:
    from pinmatrix.matrix.compat import gpu_capability

    assert gpu_capability("sm_121") == (12, 1)
    with pytest.raises(ValueError, match=r"^gpu 'h100' names no compute capability$"):
        gpu_capability("h100")
    series = CompatRules.from_toml(COMPAT_TEXT).torch_series("2.9.0")
    assert series["triton"] == series.triton
    with pytest.raises(KeyError, match="tritn"):
        series["tritn"]
