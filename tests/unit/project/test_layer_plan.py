"""images/layers.toml (project/layer_plan.py): the shipped plan loads through the model; a malformed one is one
line naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from data_files import edited, line_of, one_line, without_line

from pinmatrix.project.layer_plan import LayerPlanError, LayerSpec, load_layer_specs

REPO = Path(__file__).resolve().parents[3]
LAYERS_TEXT = (REPO / "images" / "layers.toml").read_text(encoding="utf-8")


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
    assert without_line(one_line(err), str(path)) == f"{path}: {where}"


def test_a_layer_plan_problem_names_the_line_of_its_key(tmp_path: Path) -> None:
    path = tmp_path / "layers.toml"
    text = edited(LAYERS_TEXT, 'roots = ["vllm"]', "roots = [3]")
    path.write_text(text, encoding="utf-8")
    with pytest.raises(LayerPlanError) as err:
        load_layer_specs(path)
    assert one_line(err) == f"{path}:{line_of(text, 'roots = [3]')}: layer[4].roots[0]: Input should be a valid string"
    path.unlink()
    with pytest.raises(LayerPlanError) as err:
        load_layer_specs(path)
    assert one_line(err) == f"{path}: no such file"


def test_a_layer_plan_without_layers(tmp_path: Path) -> None:
    path = tmp_path / "layers.toml"
    path.write_text("# nothing\n")
    with pytest.raises(LayerPlanError) as err:
        load_layer_specs(path)
    assert one_line(err) == f"{path}:1: layer: required key is missing"
    path.write_text("layer = []\n")
    with pytest.raises(LayerPlanError) as err:
        load_layer_specs(path)
    assert one_line(err) == f"{path}:1: layer: needs at least one [[layer]] table"
