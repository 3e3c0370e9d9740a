"""Shared by tests/unit/image/assembly/test_crossaot.py and tests/integration/test_crossaot_toolchain.py."""

from __future__ import annotations

from pathlib import Path

from pinmatrix.cell import Cell
from pinmatrix.image.assembly import crossaot
from pinmatrix.image.assembly.aot_plan import CrossInputs
from pinmatrix.index.wheel_index import WheelFile
from pinmatrix.matrix.selection import load
from pinmatrix.project.toolchains import shipped

REPO = Path(__file__).resolve().parents[2]


SITE = "opt/venv/lib/python3.13/site-packages"


SHAS = {"torch": "a" * 64, "flashinfer-python": "b" * 64, "nvidia-cuda-nvcc": "c" * 64}


CROSS = "aarch64-linux-gnu-g++"


def gb10_cell(flag: str = "12.1a") -> Cell:
    _, expansion = load(REPO / "matrix.toml")
    cells = [c for c in expansion.cells if c.stack == "gb10-nvfp4" and c.platform.startswith("aarch64")
             and c.flashinfer_cuda_arch_list == flag and any(r.startswith("cuda-toolkit") for r in c.requirements)]
    assert cells, "no gb10 PyPI cell"
    return cells[0]


def locked_wheel(name: str, sha: str) -> WheelFile:
    return WheelFile(name=name, version="1", filename=f"{name}-1-py3-none-any.whl", url="u", sha256=sha)


def cross_inputs(compiler: str = "/usr/bin/g++ | g++ 12.2.0 | sha256:1", torch: str = "d" * 64) -> CrossInputs:
    spec = shipped().cross[0]
    return CrossInputs(spec, compiler=compiler, platform="x86_64-manylinux_2_35", base_key="amd64-base",
                       wheels={"torch": locked_wheel("torch", torch), "ninja": locked_wheel("ninja", "e" * 64)},
                       fmt=crossaot.CROSS_FORMAT)
