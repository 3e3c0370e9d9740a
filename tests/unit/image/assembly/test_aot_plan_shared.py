"""A second cell sharing FlashInfer's inputs compiles nothing (issue 46): on the demo-sized path (test_assemble's
Project: a base written here, two small wheels from an index on 127.0.0.1), with a toolchain table that makes
``beta`` the cell's CUDA toolchain and ``flashinfer-decode`` a smoke with an AOT module, and the compile itself a
stand-in that records which cell it ran for (no nvcc, no chroot). The keys are aot_plan.plan's own.

- a cell that differs from the first only by vLLM's env-flag variant (h200-vllm's ``fp8-moe``) gets the first
  cell's AOT layer by its key: the same key, the same blob, no compile;
- a cell whose variables reach the compile (``NVCC_APPEND_FLAGS``) compiles its own;
- what the compile is handed (compile_env) holds none of the variables the key leaves out."""

from __future__ import annotations

import dataclasses

import pytest
from test_assemble import Project, index, project  # noqa: F401  (fixtures)

from conftest import make_cell
from pinmatrix.cell import Cell
from pinmatrix.image.assembly import aot_plan
from pinmatrix.project import toolchains
from pinmatrix.project.toolchains import AotSpec, CudaWheels, ToolchainDoc, ToolchainSpec

MODULE = "decode-f16-hd128"
DOC = ToolchainDoc(
    toolchain=(ToolchainSpec(name="flashinfer-jit", smokes=("flashinfer-decode",), source="test",
                             cuda={"13.0": CudaWheels(requirements=("beta==2.0",), home="nvidia/cu13",
                                                      cudart="libcudart.so.13")}),),
    aot=(AotSpec(smoke="flashinfer-decode", modules=(MODULE,)),))
FP8_MOE = {"VLLM_USE_FLASHINFER_MOE_FP4": "0", "VLLM_USE_FLASHINFER_MOE_FP8": "1"}  # matrix.toml's fp8-moe variant


def _cell(project: Project, env: dict[str, str] | None = None) -> Cell:  # noqa: F811
    cell = make_cell("rules", ("alpha==1.0", "beta==2.0"), pins={"alpha": "1.0"}, cuda="13.0", arch_flags=("9.0a",),
                     env=env)
    return dataclasses.replace(cell, indexes=project.cell.indexes, smokes=("flashinfer-decode",))


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, str]]]:
    """(cell id, the environment the compile was handed) of each compile; the toolchain table above."""
    monkeypatch.setattr(toolchains, "shipped", lambda: DOC)
    monkeypatch.setattr(aot_plan, "shipped", lambda: DOC)
    ran: list[tuple[str, dict[str, str]]] = []

    def build_modules(cell, aot, layers, link, work, log, *, on_step, beside):  # noqa: ANN001, ANN202
        ran.append((cell.id, aot_plan.compile_env(cell)))
        out = work / "out" / MODULE
        out.mkdir(parents=True)
        (out / f"{MODULE}.so").write_bytes(b"compiled for " + aot.arch_list.encode())
        return aot_plan.AotBuild({"built": [{"name": MODULE}]}, [(f"{MODULE}/{MODULE}.so", out / f"{MODULE}.so")], 0.0)

    monkeypatch.setattr(aot_plan, "build_modules", build_modules)
    return ran


def _aot_layer(image) -> tuple[str, str]:  # noqa: ANN001
    (layer,) = [p for p in image.layers if p.name == "flashinfer-aot"]
    return layer.key, layer.descriptor.digest


def test_a_second_cell_differing_only_by_vllms_variables_gets_the_first_cells_aot_layer_by_key(
        project: Project, compiles: list[tuple[str, dict[str, str]]]) -> None:  # noqa: F811
    first, second = _cell(project), _cell(project, FP8_MOE)
    assert first.id != second.id  # two cells, two images
    one = project.assemble(first, ref="localhost/rules:plain")
    assert [c for c, _ in compiles] == [first.id]
    steps: list[str] = []
    two = project.assemble(second, ref="localhost/rules:fp8-moe", steps=steps)
    assert _aot_layer(two) == _aot_layer(one)  # the same key, so the same blob
    assert [c for c, _ in compiles] == [first.id], "the second cell compiled again"
    assert not any(s.startswith("aot:") for s in steps)
    assert two.digest != one.digest  # its image is its own (its config holds its variables)
    flagged = _cell(project, {"NVCC_APPEND_FLAGS": "-lineinfo"})  # a variable the compile sees: compiled again
    three = project.assemble(flagged, ref="localhost/rules:lineinfo")
    assert _aot_layer(three)[0] != _aot_layer(one)[0] and [c for c, _ in compiles] == [first.id, flagged.id]


def test_the_compile_is_handed_none_of_what_the_key_leaves_out(project: Project,  # noqa: F811
                                                               compiles: list[tuple[str, dict[str, str]]]) -> None:
    cell = _cell(project, {**FP8_MOE, "NCCL_DEBUG": "INFO", "FLASHINFER_JIT_VERBOSE": "1", "SOME_NEW_FLAG": "x"})
    project.assemble(cell, ref="localhost/rules:env")
    ((_, env),) = compiles
    assert not [k for k in env if k.startswith(("VLLM_", "NCCL_")) or k == "PINMATRIX_CELL"]
    assert env["FLASHINFER_JIT_VERBOSE"] == "1" and env["SOME_NEW_FLAG"] == "x"  # kept: and so in the key
    assert env["FLASHINFER_CUDA_ARCH_LIST"] == "9.0a" and env["CUDA_HOME"].endswith("/nvidia/cu13")
    assert set(aot_plan.compile_variables(cell)) == {k for k in env if k in cell.variables()}
    seen = set(env) - {"PATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE", "CUDA_HOME", "CXX"}
    assert seen <= set(aot_plan.compile_variables(cell))  # every cell-dependent name the compile sees is keyed
