"""A release the hand table has never seen is a cell like any other once its wheel's own metadata is cached: the
expansion reads the cache (no index is asked), prunes with the wheel's pin as the reason, prefers the wheel to a
hand rule that says otherwise, and ``hand_rule_disagreements`` names such a rule."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from pinmatrix.index.wheel_metadata import MetadataCache, WheelMetadata
from pinmatrix.matrix.compat import METADATA_DIR, CompatRules, hand_rule_disagreements, rules_for
from pinmatrix.matrix.overrides import OverrideError, with_overrides
from pinmatrix.project.matrix_toml import Matrix, load_matrix

NOW = datetime(2026, 12, 4, tzinfo=UTC)
MATRIX = """
[matrix]
name = "t"
python = "3.13"
platform = "x86_64-manylinux_2_35"
[matrix.base]
kind = "mmdebstrap"
suite = "trixie"
[stacks.v]
smokes = ["host-probe"]
[stacks.v.axes]
driver = ["580.159.04"]
cuda = ["13.0"]
gpu = ["sm_90"]
arch = ["9.0a"]
torch = ["2.11.0"]
triton = ["3.6.0"]
flashinfer = ["0.6.8.post1"]
vllm = ["0.20.0"]
"""
WHEELS = {
    ("vllm", "0.34.0"): ["torch==2.14.0", "flashinfer-python==0.7.3", "flashinfer-cubin==0.7.3"],
    ("vllm", "0.33.0"): ["torch==2.14.0", "flashinfer-python==0.7.2.post1"],
    ("torch", "2.14.0"): ["triton~=3.8.0; platform_system == 'Linux'", "cuda-toolkit[cublas]==13.0.3"],
    ("torch", "2.15.0"): ["triton~=3.9.0; platform_system == 'Linux'", "cuda-toolkit[cublas]==13.2.2"],
}


def _matrix(tmp_path: Path, cached: bool = True) -> Matrix:
    if cached:
        cache = MetadataCache(tmp_path / METADATA_DIR)
        for (name, version), requires in WHEELS.items():
            tag = "cp38-abi3" if name == "vllm" else "cp313-cp313"
            cache.put(name, version, WheelMetadata(filename=f"{name}-{version}-{tag}-manylinux_2_28_x86_64.whl",
                                                   via="range", fetched_at=NOW, requires_dist=requires))
    (tmp_path / "matrix.toml").write_text(MATRIX, encoding="utf-8")
    return load_matrix(tmp_path / "matrix.toml")


def test_without_the_wheels_metadata_a_new_vllm_is_unknown(tmp_path: Path) -> None:
    with pytest.raises(OverrideError, match="unknown vllm version '0.34.0'.*no metadata of its wheel is cached"):
        with_overrides(_matrix(tmp_path, cached=False), "v", ["vllm=0.34.0", "torch=2.14.0", "triton=3.8.0"])


def test_a_release_the_table_never_saw_is_a_cell_from_its_wheels_metadata(tmp_path: Path) -> None:
    _, expansion = with_overrides(_matrix(tmp_path), "v", ["vllm=0.34.0", "torch=2.14.0", "flashinfer=0.7.3",
                                                            "triton=3.8.0"])
    [cell] = [c for c in expansion.cells if c.stack == "v"]
    assert cell.pins["vllm"] == "0.34.0" and "torch==2.14.0" in cell.requirements
    assert not cell.needs  # the default index serves torch 2.14.0 for CUDA 13.0 (its cuda-toolkit pin)


def test_the_vllm_wheels_own_pin_prunes_with_its_source(tmp_path: Path) -> None:
    with pytest.raises(OverrideError) as err:
        with_overrides(_matrix(tmp_path), "v", ["torch=2.15.0", "triton=3.9.0", "vllm=0.34.0"])
    assert "vllm 0.34.0 pins torch==2.14.0, not 2.15.0 (vllm 0.34.0's own Requires-Dist of vllm-0.34.0" in str(err.value)


def test_torchs_own_triton_pin_prunes(tmp_path: Path) -> None:
    with pytest.raises(OverrideError, match=r"torch 2.14.0 pins triton~=3.8.0, not 3.6.0 \(torch 2.14.0's own"):
        with_overrides(_matrix(tmp_path), "v", ["vllm=0.34.0", "torch=2.14.0", "flashinfer=0.7.3"])


def test_the_wheel_wins_over_a_hand_rule_that_disagrees_and_the_rule_is_named(tmp_path: Path) -> None:
    matrix = _matrix(tmp_path)
    _, expansion = with_overrides(matrix, "v", ["vllm=0.33.0", "torch=2.14.0", "flashinfer=0.7.2.post1",
                                                "triton=3.8.0"])  # the shipped hand rule now says the wheel's pins
    assert [c.pins["vllm"] for c in expansion.cells if c.stack == "v"] == ["0.33.0"]
    hand = CompatRules({"vllm": {"source": "hand", "rules": [
        {"versions": "==0.33.0", "torch": "==2.13.0", "flashinfer": "==0.7.0.post1"}]}})
    rules = hand.with_metadata(MetadataCache(tmp_path / METADATA_DIR), "3.13")
    assert hand.vllm_pins("0.33.0", "2.14.0", "0.7.2.post1", False).prune  # the rule alone prunes the wheel's pins
    wins = rules.vllm_pins("0.33.0", "2.14.0", "0.7.2.post1", False)
    assert (wins.prune, wins.needs) == ((), ())  # with the wheel's metadata cached, its pins win
    lines = hand_rule_disagreements(rules)
    assert len(lines) == 2
    assert "says vllm 0.33.0 pins torch==2.13.0, its wheel requires torch==2.14.0" in lines[0]
    assert "says vllm 0.33.0 pins flashinfer==0.7.0.post1, its wheel requires flashinfer-python==0.7.2.post1" in lines[1]


def test_hand_rules_that_agree_are_not_named(tmp_path: Path) -> None:
    _matrix(tmp_path)
    rules = CompatRules({"vllm": {"source": "hand", "rules": [
        {"versions": ">=0.33,<0.35", "torch": "==2.14.0"}]}}).with_metadata(MetadataCache(tmp_path / METADATA_DIR), "3.13")
    assert hand_rule_disagreements(rules) == []
    assert hand_rule_disagreements(CompatRules.default()) == []  # no cache: nothing to compare
    assert rules_for(tmp_path, "3.13").metadata is not None


def test_torch_from_its_wheel_keeps_the_tables_cuda_variants_where_the_table_has_the_series(tmp_path: Path) -> None:
    _matrix(tmp_path)
    rules = CompatRules.default().with_metadata(MetadataCache(tmp_path / METADATA_DIR), "3.13")
    assert rules.torch_pins("2.14.0", "3.8.0", "13.0").prune == ()
    assert "has no CUDA 12.4 build" in rules.torch_pins("2.14.0", "3.8.0", "12.4").prune[0]  # the table's variants
    assert rules.torch_pins("2.14.0", "3.8.0", "12.6").needs[0].startswith("the PyTorch index")
    # a series the table has never seen: the wheel's CUDA is the default index's; another is the PyTorch index's
    assert rules.default_cuda("2.15.0") == "13.2" and rules.torch_series("2.15.0") is None
    assert rules.torch_pins("2.15.0", "3.9.1", "13.0").needs[0].startswith("the PyTorch index")
