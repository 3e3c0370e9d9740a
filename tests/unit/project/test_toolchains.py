"""The CUDA toolchain of images whose smokes JIT FlashInfer (data/toolchains.toml): the nvcc wheels in the
cell's requirements (so in its lock), CUDA_HOME, nvcc on PATH and CXX in its image, g++ checked in its base."""

from __future__ import annotations

from pathlib import Path

import pytest

from pinmatrix.cell import Cell
from pinmatrix.errors import MatrixError
from pinmatrix.image.cellconfig import cell_env
from pinmatrix.matrix.selection import load, validate_matrix
from pinmatrix.project import toolchains as toolchain

REPO = Path(__file__).resolve().parents[3]
NVCC_REQ = "cuda-toolkit[cccl,crt,cudart,nvcc,nvvm]==13.0.2"
HOME = "/opt/venv/lib/python3.13/site-packages/nvidia/cu13"


def _matrix(tmp_path: Path, *, smokes: str, cuda: str = "13.0", packages: str = '["python3", "g++"]') -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text(f"""
[matrix]
name = "t"
[matrix.base]
packages = {packages}
[stacks.fi]
smokes = {smokes}
[stacks.fi.axes]
cuda = ["{cuda}"]
flashinfer = ["0.6.8.post1"]
[stacks.other]
smokes = ["host-probe"]
extra = ["six==1.17.0"]
[stacks.other.axes]
cuda = ["{cuda}"]
flashinfer = ["0.6.8.post1"]
""")
    return path


def _cells(path: Path) -> dict[str, Cell]:
    _, expansion = load(path)
    return {c.stack: c for c in expansion.cells}


def test_a_stack_whose_smokes_jit_flashinfer_gets_the_nvcc_wheels_of_its_cuda_and_cuda_home(tmp_path: Path) -> None:
    cells = _cells(_matrix(tmp_path, smokes='["host-probe", "flashinfer-decode"]'))
    fi, other = cells["fi"], cells["other"]
    assert NVCC_REQ in fi.requirements and NVCC_REQ not in other.requirements
    env = cell_env(fi)
    assert env["CUDA_HOME"] == HOME and env["CXX"] == "g++"
    assert env["PATH"].split(":")[:2] == ["/opt/venv/bin", f"{HOME}/bin"]
    plain = cell_env(other)
    assert "CUDA_HOME" not in plain and "CXX" not in plain and HOME not in plain["PATH"]


def test_a_prefix_selector_selects_the_jit_smokes_too(tmp_path: Path) -> None:
    cells = _cells(_matrix(tmp_path, smokes='["flashinfer-*"]'))
    assert NVCC_REQ in cells["fi"].requirements


def test_a_cuda_without_declared_wheels_gets_no_toolchain_and_a_note(tmp_path: Path) -> None:
    cells = _cells(_matrix(tmp_path, smokes='["flashinfer-decode"]', cuda="12.9"))
    fi = cells["fi"]
    assert not any(r.startswith("cuda-toolkit") for r in fi.requirements)
    assert any("declares no wheels for CUDA 12.9" in n and "no nvcc" in n for n in fi.notes)
    assert "CUDA_HOME" not in cell_env(fi)


def test_cuda_13_2_gets_its_toolchain_with_curand_headers(tmp_path: Path) -> None:
    """torch 2.15.0's wheel is built for CUDA 13.2; FlashInfer 0.7.4's `gemm` module includes curand_kernel.h
    (through CUTLASS's tensor_fill.h), so that toolchain carries the curand extra as well."""
    fi = _cells(_matrix(tmp_path, smokes='["flashinfer-fp8-gemm"]', cuda="13.2"))["fi"]
    assert "cuda-toolkit[cccl,crt,cudart,curand,nvcc,nvvm]==13.2.2" in fi.requirements
    assert cell_env(fi)["CUDA_HOME"] == HOME


def test_the_env_follows_the_lock_not_the_smokes_alone(tmp_path: Path) -> None:
    """A cell made without the toolchain requirement (an older expansion) gets no CUDA_HOME that would name a
    folder its image does not have."""
    import dataclasses

    fi = _cells(_matrix(tmp_path, smokes='["flashinfer-decode"]'))["fi"]
    without = dataclasses.replace(fi, requirements=tuple(r for r in fi.requirements if r != NVCC_REQ))
    assert "CUDA_HOME" not in cell_env(without)


def test_the_shipped_h200_cells_lock_the_nvcc_wheels() -> None:
    _, expansion = load(REPO / "matrix.toml")
    h200 = [c for c in expansion.cells if c.stack == "h200"]
    assert h200
    for cell in h200:
        assert NVCC_REQ in cell.requirements
        lock = (REPO / "locks" / f"{cell.id}.txt").read_text()
        for pin in ("nvidia-cuda-nvcc==13.0.88", "nvidia-nvvm==13.0.88", "nvidia-cuda-crt==13.0.88",
                    "nvidia-cuda-cccl==13.0.85", "nvidia-cuda-runtime==13.0.96"):
            assert f"\n{pin} " in lock, (cell.id, pin)


def _lock(path: Path, stack: str, *names: str) -> str:
    _, expansion = load(path)
    (cell,) = [c for c in expansion.cells if c.stack == stack]
    (path.parent / "locks").mkdir(exist_ok=True)
    body = "".join(f"{n}==1.0 \\\n    --hash=sha256:{'a' * 64}\n    # via -r requirements.in\n" for n in names)
    (path.parent / "locks" / f"{cell.id}.txt").write_text(f"# pinmatrix lock for cell {cell.id}: x\n{body}")
    return cell.id


def test_a_locked_nvcc_without_g_plus_plus_in_the_base_is_one_located_line(tmp_path: Path) -> None:
    path = _matrix(tmp_path, smokes='["flashinfer-decode"]', packages='["python3"]')
    cell_id = _lock(path, "fi", "nvidia-cuda-nvcc", "flashinfer-python")
    with pytest.raises(MatrixError) as err:
        validate_matrix(path)
    (line,) = err.value.lines()
    assert f"cell {cell_id}" in line and "locks nvidia-cuda-nvcc" in line and "add g++" in line
    path = _matrix(tmp_path, smokes='["flashinfer-decode"]', packages='["python3", "g++"]')
    _lock(path, "fi", "nvidia-cuda-nvcc", "flashinfer-python")
    validate_matrix(path)


@pytest.mark.parametrize(("bad", "words"), [
    ('home = "../etc"', "relative folder under site-packages"),
    ('home = "/abs"', "relative folder under site-packages"),
    ('cudart = "lib/x.so"', "libcudart.so.13"),
    ('requirements = []', "at least one requirement"),
    ('requirements = ["not a req ("]', "requirement"),
])
def test_a_bad_toolchain_file_is_one_line_naming_the_key(bad: str, words: str) -> None:
    fields = {"requirements": '["cuda-toolkit[nvcc]==13.0.2"]', "home": '"nvidia/cu13"', "cudart": '"libcudart.so.13"'}
    key = bad.split(" = ", 1)[0]
    fields[key] = bad.split(" = ", 1)[1]
    body = "\n".join(f"{k} = {v}" for k, v in fields.items())
    text = f'[[toolchain]]\nname = "x"\nsmokes = ["a"]\nsource = "s"\n[toolchain.cuda."13.0"]\n{body}\n'
    with pytest.raises(toolchain.ToolchainError) as err:
        toolchain.parse(text, "t.toml")
    message = str(err.value)
    line = text[:text.index(f"{key} = ")].count("\n") + 1  # the line of the bad key, in its [[toolchain]] table
    assert message.startswith(f"t.toml:{line}: toolchain.0.cuda.13.0.{key}: ") and "\n" not in message
    assert words in message


def test_the_shipped_file_parses_and_names_its_source() -> None:
    doc = toolchain.shipped()
    (spec,) = doc.toolchain
    assert "flashinfer-decode" in spec.smokes and "cpp_ext.py" in spec.source
    assert spec.cuda["13.0"].home == "nvidia/cu13"
