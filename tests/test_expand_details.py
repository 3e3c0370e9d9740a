"""Expansion details the shipped matrix does not reach: declared indexes and the PyTorch index per CUDA
variant, stacks with only some of the axes the compatibility rules join, and a patch on the exact release
that contains it upstream."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pinmatrix.cell import IndexSpec
from pinmatrix.matrix.expand import expand_matrix
from pinmatrix.matrix.schema import load_matrix

MIRROR = IndexSpec(name="mirror", url="https://mirror.example.org/simple", default=True)
EXTRA = IndexSpec(name="extra", url="https://extra.example.org/simple", explicit=True, packages=("six",))


def expand(tmp_path: Path, text: str):
    (tmp_path / "m.toml").write_text(text)
    return expand_matrix(load_matrix(tmp_path / "m.toml"))


def test_declared_indexes_reach_every_cell_and_a_non_default_cuda_adds_the_pytorch_index(tmp_path: Path) -> None:
    result = expand(tmp_path, """[matrix]
python = "3.13"
torch_index = "https://example.org/whl/cu{cuda_nodot}"
[[matrix.indexes]]
name = "mirror"
url = "https://mirror.example.org/simple"
default = true
[[matrix.indexes]]
name = "extra"
url = "https://extra.example.org/simple"
explicit = true
packages = ["six"]
[stacks.cpu]
gpu_required = false
[stacks.cpu.axes]
torch = ["2.9.0"]
[stacks.cu]
gpu_required = false
[stacks.cu.axes]
cuda = ["12.8", "13.0"]
torch = ["2.9.0"]
[stacks.nocuda]
gpu_required = false
[stacks.nocuda.axes]
cuda = ["12.8"]
[stacks.nocuda.packages]
six = ["1.17.0"]
""")
    indexes = {cell.name: cell.indexes for cell in result.cells}
    pytorch = IndexSpec(name="pytorch-cu130", url="https://example.org/whl/cu130", explicit=True, packages=("torch",))
    assert indexes == {
        "cpu": (MIRROR, EXTRA),  # torch without a CUDA axis: the default index's build
        "cu[cuda=12.8]": (MIRROR, EXTRA),  # 12.8 is what the default index serves for torch 2.9
        "cu[cuda=13.0]": (MIRROR, EXTRA, pytorch),
        "nocuda": (MIRROR, EXTRA),  # CUDA without torch: nothing to fetch from the PyTorch index
    }
    notes = {cell.name: cell.notes for cell in result.cells}
    assert notes["cu[cuda=13.0]"] == (
        "torch 2.9.0 for CUDA 13.0 comes from the PyTorch index (the default index serves CUDA 12.8)",)
    assert notes["cpu"] == notes["cu[cuda=12.8]"] == notes["nocuda"] == ()


def test_a_patch_is_already_upstream_from_the_release_that_contains_it(tmp_path: Path) -> None:
    (tmp_path / "p.patch").write_text("x")
    sha = hashlib.sha256(b"x").hexdigest()
    result = expand(tmp_path, f"""[matrix]
python = "3.13"
[patches.up]
package = "flashinfer-python"
applies_to = ">=0.6.0"
upstream = "https://github.com/flashinfer-ai/flashinfer/pull/2520"
contained_in = "0.6.7"
note = "merged"
kind = "installed-tree"
source = "p.patch"
sha256 = "{sha}"
[stacks.s]
gpu_required = false
[stacks.s.axes]
flashinfer = [{{ version = "0.6.6", patches = ["up"] }}, {{ version = "0.6.7", patches = ["up"] }},
              {{ version = "0.6.8", patches = ["up"] }}]
""")
    patches = {cell.pins["flashinfer"]: cell.patches for cell in result.cells}
    assert [(p.status, p.note) for p in patches["0.6.6"]] == [("apply", "merged")]
    for version in ("0.6.7", "0.6.8"):
        (patch,) = patches[version]
        assert (patch.status, patch.note, patch.version) == (
            "already-upstream", f"already upstream: flashinfer-python 0.6.7 contains it; not applied to {version}",
            version)
        assert (patch.sha256, patch.source, patch.contained_in, patch.kind) == (sha, "p.patch", "0.6.7",
                                                                                "installed-tree")


CUDA_SRC = "NVIDIA CUDA Toolkit release notes, 'CUDA Toolkit and Minimum Required Driver Version'"
ARCH_SRC = ("NVIDIA CUDA Toolkit release notes and nvcc --list-gpu-arch: first toolkit that can build each target; "
            "family ('f') targets since CUDA 12.9")


def test_driver_cuda_gpu_arch_and_vllm_rules_prune_through_expansion(tmp_path: Path) -> None:
    """Each rule gets the cell's own values: the GPU decides between forward compatibility and pruning, a GPU
    without an arch axis builds for its own capability, the arch axis is checked against the CUDA and the GPU,
    and vLLM's flashinfer pin against the flashinfer axis."""
    result = expand(tmp_path, """[matrix]
python = "3.13"
[stacks.g.axes]
driver = ["560.35.03"]
cuda = ["12.4", "12.8"]
gpu = ["sm_90", "sm_121"]
[stacks.a.axes]
cuda = ["12.9"]
gpu = ["sm_90", "sm_121"]
arch = ["12.1a"]
[stacks.v]
gpu_required = false
[stacks.v.axes]
vllm = ["0.33.0"]
torch = ["2.13.0"]
flashinfer = ["0.7.0.post1", "0.6.8"]
""")
    old_driver = "driver 560.35.03 is older than CUDA 12.8's minimum 570.26"
    assert {c.name: (c.notes, c.arch_flags) for c in result.cells} == {
        "g[cuda=12.4,gpu=sm_90]": ((), ("9.0",)),
        "g[cuda=12.8,gpu=sm_90]": ((f"{old_driver}: needs the cuda-compat forward-compatibility package (sm_90 is a "
                                    "datacenter GPU)",), ("9.0",)),
        "a[gpu=sm_121]": ((), ("12.1a",)),
        "v[flashinfer=0.7.0.post1]": ((), ()),
    }
    assert {p.name: p.reasons for p in result.pruned} == {
        "g[cuda=12.4,gpu=sm_121]": (f"arch 12.1 needs CUDA >= 12.9, the cell has CUDA 12.4 ({ARCH_SRC})",),
        "g[cuda=12.8,gpu=sm_121]": (f"{old_driver} ({CUDA_SRC})",
                                    f"arch 12.1 needs CUDA >= 12.9, the cell has CUDA 12.8 ({ARCH_SRC})"),
        "a[gpu=sm_90]": ("arch flags 12.1a build no code that runs on sm_90 (capability 9.0)",),
        "v[flashinfer=0.6.8]": ("vllm 0.33.0 pins flashinfer-python==0.7.0.post1, not 0.6.8 (vLLM requirements/cuda.txt "
                                "per release (the PyPI wheel's torch pin))",),
    }
