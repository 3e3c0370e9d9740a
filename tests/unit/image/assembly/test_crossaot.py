"""A foreign cell's FlashInfer AOT modules cross-compiled on this builder (pinmatrix.image.assembly.crossaot): the
builder root is the closure of the generator's imports in the cell's own lock, the key holds the cross compiler
and the builder wheels, a builder without the cross compiler says so in one line, only the declared modules are
built. A tiny module through the same ninja path into an aarch64 ELF with sm_121a SASS, by the CUDA tool wheels
from the package index: tests/integration/test_crossaot_toolchain.py."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest
from crossaot_cells import CROSS, SHAS, SITE, cross_inputs, gb10_cell, locked_wheel

from pinmatrix.cell import Cell
from pinmatrix.image.assembly import aot_plan, crossaot
from pinmatrix.image.assembly.aot_plan import AotError
from pinmatrix.image.assembly.rootfs import BaseLayers
from pinmatrix.index.wheel_index import Target, WheelFile
from pinmatrix.project.lockfile import LockEntry

pytestmark = pytest.mark.skipif(aot_plan.host_machine() != "x86_64", reason="an x86_64 builder cross-compiling")


def test_only_the_declared_modules_are_cross_compiled_and_the_rest_is_left_to_run_time() -> None:
    cell = gb10_cell()
    first = aot_plan.plan(cell, SHAS, "base", epoch=1, level=1)
    assert first is not None and first.wants_cross and not first.builds
    planned = aot_plan.plan(cell, SHAS, "base", epoch=1, level=1, cross=cross_inputs())
    assert planned is not None and planned.builds and planned.key
    assert planned.modules == ("decode-f16-hd128", "fp4-quantize")
    assert planned.deferred == ("gemm", "fp4-gemm-cutlass")
    line = crossaot.describe(cell, planned)
    assert "\n" not in line and "cross-compiled for cell" in line and "g++ 12.2.0" in line
    assert "in the x86_64-manylinux_2_35 builder root (2 wheels" in line and "compiled at run time: gemm, fp4-gemm-cutlass" in line


def test_the_key_holds_the_cross_compiler_and_the_builder_wheels() -> None:
    cell = gb10_cell()
    keys = {}
    for what, cross in {"base": cross_inputs(), "compiler": cross_inputs(compiler="/usr/bin/g++ | g++ 12.3.0 | sha256:1"),
                        "binary": cross_inputs(compiler="/usr/bin/g++ | g++ 12.2.0 | sha256:2"),
                        "builder torch": cross_inputs(torch="f" * 64),
                        "builder base": dataclasses.replace(cross_inputs(), base_key="other"),
                        "format": dataclasses.replace(cross_inputs(), fmt=crossaot.CROSS_FORMAT + 1)}.items():
        planned = aot_plan.plan(cell, SHAS, "base", epoch=1, level=1, cross=cross)
        assert planned is not None and planned.builds
        keys[what] = planned.key
    assert len(set(keys.values())) == len(keys), keys
    again = aot_plan.plan(cell, SHAS, "base", epoch=1, level=1, cross=cross_inputs())
    assert again is not None and again.key == keys["base"]
    f120 = aot_plan.plan(gb10_cell("12.0f"), SHAS, "base", epoch=1, level=1, cross=cross_inputs())
    assert f120 is not None and f120.key != keys["base"]


def test_without_the_cross_compiler_the_cell_gets_no_layer_and_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    cell = gb10_cell()
    first = aot_plan.plan(cell, SHAS, "base", epoch=1, level=1)
    assert first is not None
    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if name == CROSS else real(name))

    def never(*_: object) -> object:
        raise AssertionError("nothing is fetched for a cell that cannot be cross-compiled")

    cross = crossaot.inputs(cell, first, [], never, never)  # type: ignore[arg-type]
    planned = aot_plan.plan(cell, SHAS, "base", epoch=1, level=1, cross=cross)
    assert planned is not None and not planned.builds and planned.link_key
    assert "\n" not in planned.skip
    assert f"with {CROSS}, which is not on PATH (apt-get install g++-aarch64-linux-gnu)" in planned.skip
    assert "compiled at run time" in planned.skip


def _entry(name: str, *via: str) -> LockEntry:
    return LockEntry(name=name, version="1", text=f"{name}==1 --hash=sha256:{'0' * 64}", via=via)


def test_the_builder_root_is_the_closure_of_the_generators_imports_in_the_cells_lock() -> None:
    entries = [_entry("torch", "vllm"), _entry("sympy", "torch"), _entry("mpmath", "sympy"),
               _entry("flashinfer-python", "vllm"), _entry("ninja", "flashinfer-python", "vllm"),
               _entry("vllm"), _entry("fastapi", "vllm"), _entry("nvidia-cuda-nvcc", "cuda-toolkit"),
               _entry("cuda-toolkit", "torch")]
    names = [e.name for e in crossaot.builder_entries(entries, ["torch", "flashinfer-python"])]
    assert names == ["torch", "sympy", "mpmath", "flashinfer-python", "ninja", "nvidia-cuda-nvcc", "cuda-toolkit"]

    cell = gb10_cell()
    first = aot_plan.plan(cell, SHAS, "base", epoch=1, level=1)
    assert first is not None
    asked: list[tuple[str, Target]] = []
    bases: list[str] = []

    def choose(entry: LockEntry, target: Target) -> WheelFile:
        asked.append((entry.name, target))
        return locked_wheel(entry.name, "1" * 64)

    def base_for(builder: Cell) -> BaseLayers:
        bases.append(builder.platform)
        return BaseLayers((), (), "debian", "amd64-key", "3.13")

    cross = crossaot.inputs(cell, first, entries, choose, base_for)
    assert not cross.skip and cross.platform == "x86_64-manylinux_2_35" and bases == ["x86_64-manylinux_2_35"]
    assert {n for n, _ in asked} == set(names) and {t.platform for _, t in asked} == {"x86_64-manylinux_2_35"}
    assert CROSS in cross.compiler and "sha256:" in cross.compiler and cross.base_key == "amd64-key"


def test_a_ninja_path_outside_the_builder_root_is_refused(tmp_path: Path) -> None:
    text = "cuda_home = /tmp/pinmatrix-aot/xcuda\ncommon_cflags = -isystem /usr/include/python3.13 -I/opt/venv/x\n"
    moved = crossaot.rewrite_ninja(text, tmp_path)
    assert f"cuda_home = {tmp_path}/tmp/pinmatrix-aot/xcuda" in moved
    assert f"-isystem {tmp_path}/usr/include/python3.13 -I{tmp_path}/opt/venv/x" in moved
    relative = Path(os.path.relpath(tmp_path))  # ninja -C changes folder: the moved paths are absolute
    assert f"cuda_home = {tmp_path.resolve()}/tmp/" in crossaot.rewrite_ninja(text, relative)
    with pytest.raises(AotError, match="outside the builder root: /usr/local/cuda/include"):
        crossaot.rewrite_ninja(text + "cflags = -isystem /usr/local/cuda/include\n", tmp_path)


def test_ninja_is_the_builder_roots_pinned_elf_else_the_hosts(tmp_path: Path) -> None:
    host = shutil.which("ninja")
    assert host, "ninja-build (.ci/apt-packages.txt)"
    venv_bin = tmp_path / "opt/venv/bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "ninja").write_text("#!/opt/venv/bin/python\nimport ninja\n")  # an entry-point script: not run here
    assert crossaot.ninja_program(tmp_path, "/" + SITE) == host
    shutil.copyfile(Path(host).resolve(), venv_bin / "ninja")
    assert crossaot.ninja_program(tmp_path, "/" + SITE) == str(venv_bin / "ninja")
