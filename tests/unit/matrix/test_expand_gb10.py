"""The gb10-nvfp4 stack: the seed's cells are kept and say at once what they need (compat.toml's facts: PyPI's
torch 2.9.1/2.10.0 aarch64 wheels are CPU builds; vllm 0.15.1's wheel pins torch==2.9.1 and
flashinfer-python==0.6.1), once per need in `validate`, `cells` and `lock` (which leaves them out); the PyPI cells
have no need and are locked."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO
from pinmatrix.cli import main
from pinmatrix.matrix.compat import CompatRules
from pinmatrix.matrix.selection import load
from pinmatrix.project.lockfile import lock_path, parse_lock

SEED = """[matrix]
python = "3.13"
platform = "aarch64-manylinux_2_35"
torch_index = "https://example.invalid/whl/cu{cuda_nodot}"
[stacks.b]
gpu_required = false
zip = [["torch", "triton"]]
include = [{ torch = "2.11.0", triton = "3.6.0", vllm = "0.20.0" }]
[stacks.b.axes]
cuda = ["13.0"]
torch = ["2.9.1", "2.10.0"]
triton = ["3.5.1", "3.6.0"]
flashinfer = ["0.6.8.post1"]
vllm = ["0.15.1", { version = "0.15.1", source_build = true }]
"""
INDEX_291 = "the PyTorch index: the default index's torch 2.9.1 aarch64 wheel is a CPU build, not CUDA 13.0"
INDEX_210 = "the PyTorch index: the default index's torch 2.10.0 aarch64 wheel is a CPU build, not CUDA 13.0"
PINS = ("a source build of vllm 0.15.1: its wheel pins torch==2.9.1 and flashinfer-python==0.6.1, not flashinfer "
        "0.6.8.post1")
SOURCE = ("a source build of vllm 0.15.1 (source_build = true): the lock leaves it out and the image build installs "
          "no source build")


def test_the_seeds_cells_are_kept_with_what_they_need(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text(SEED)
    expansion = load(path)[1]
    needs = {c.name: tuple(n.split(" (", 1)[0] if n.startswith("the PyTorch") else n.split(" (vLLM", 1)[0]
                           for n in c.needs) for c in expansion.cells}
    assert needs == {
        "b[torch=2.9.1,triton=3.5.1,vllm=0.15.1]": (INDEX_291, PINS),
        "b[torch=2.9.1,triton=3.5.1,vllm=0.15.1-src]": (INDEX_291, SOURCE),
        "b[torch=2.10.0,triton=3.6.0,vllm=0.15.1-src]": (INDEX_210, SOURCE),
        "b[torch=2.11.0,triton=3.6.0,vllm=0.20.0]": (),  # PyPI alone: torch 2.11.0's aarch64 wheel is CUDA 13.0
    }
    pypi = next(c for c in expansion.cells if c.pins["vllm"] == "0.20.0")
    assert [i.name for i in pypi.indexes] == [] and "torch==2.11.0" in pypi.requirements
    seed = next(c for c in expansion.cells if c.pins["torch"] == "2.9.1")
    assert [i.name for i in seed.indexes] == ["pytorch-cu130"]
    assert [p.name for p in expansion.pruned] == ["b[torch=2.10.0,triton=3.6.0,vllm=0.15.1]"]


def test_x86_64_keeps_the_default_indexs_cuda_and_aarch64_facts_only_change_aarch64() -> None:
    rules = CompatRules.default()
    assert rules.default_cuda("2.9.1") == "12.8" and rules.default_cuda("2.9.1", "aarch64-manylinux_2_35") == "cpu"
    assert rules.default_cuda("2.11.0", "aarch64-manylinux_2_28") == "13.0"
    assert rules.torch_pins("2.9.1", None, "12.8", "x86_64-manylinux_2_28").needs == ()


def test_validate_cells_and_lock_say_each_need_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "matrix.toml"
    path.write_text(SEED.replace('include = [{ torch = "2.11.0", triton = "3.6.0", vllm = "0.20.0" }]\n', ""))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("needs: ")]
    assert len(lines) == 4 and len(set(lines)) == 4
    assert f"needs: b: 2 cell(s) need {INDEX_291}" in out and f"needs: b: 1 cell(s) need {PINS}" in out
    assert main(["cells", str(path), "--pruned"]) == 0
    out = capsys.readouterr().out
    assert "3 cells need more than a lock from the default index:" in out and f"b: 2 cell(s) need {SOURCE}" in out
    # Every cell needs something: lock runs no resolver, says each need once, and fails nothing.
    assert main(["lock", str(path)]) == 0
    err = capsys.readouterr().err
    assert err.count("not locked: ") == 4 and "0 locked, 0 failed" in err and "FAILED" not in err
    assert not (tmp_path / "locks").exists() or not list((tmp_path / "locks").glob("*.txt"))


def test_the_shipped_gb10_pypi_cells_are_locked_from_pypi() -> None:
    _, expansion = load(REPO / "matrix.toml")
    cells = [c for c in expansion.cells if c.stack == "gb10-nvfp4" and not c.needs]
    assert len(cells) == 12 and {c.platform for c in cells} == {"aarch64-manylinux_2_35"}
    assert {c.arch_flags for c in cells} == {("12.0f",), ("12.1a",)}
    assert {c.pins["driver"] for c in cells} == {"580.142", "590.48.01", "595.58.03"}
    for cell in cells:
        pins = {e.name: e.version for e in parse_lock(lock_path(cell, REPO).read_text()).entries}
        assert (pins["vllm"], pins["torch"], pins["triton"]) == ("0.20.0", "2.11.0", "3.6.0"), cell.name
        assert pins["flashinfer-python"] == pins["flashinfer-cubin"] == "0.6.8.post1", cell.name
    seed = [c for c in expansion.cells if c.stack == "gb10-nvfp4" and c.needs]
    assert len(seed) == 36 and all(c.pins["vllm"] == "0.15.1" for c in seed)
