"""The FlashInfer AOT layer's key (pinmatrix.image.assembly.aot_plan.plan), input by input: the layer is found in a
cache folder or a registry build cache by this key alone, so every input its compiled bytes depend on must change
it: each locked wheel's sha256 (the toolchain's and FlashInfer's), the base, the arch list, the compile flags the
cell's variables hand nvcc, the Python, the generator's source, the format version, the epoch and the compression.
Cells that differ in none of these share it (test_aot_plan.py: the plain and int64 h200 cells)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from pinmatrix.cell import Cell
from pinmatrix.image.assembly import aot_plan
from pinmatrix.matrix.selection import load

REPO = Path(__file__).resolve().parents[4]
SHAS = {"torch": "a" * 64, "flashinfer-python": "b" * 64, "nvidia-cuda-nvcc": "c" * 64}


def _plain() -> Cell:
    _, expansion = load(REPO / "matrix.toml")
    return next(c for c in expansion.cells if c.stack == "h200")


def _key(cell: Cell, shas: dict[str, str] = SHAS, base: str = "base", epoch: int = 1, level: str = "gzip") -> str:
    planned = aot_plan.plan(cell, shas, base, epoch=epoch, level=level)
    assert planned is not None and planned.builds, planned
    return planned.key


CHANGES: dict[str, Callable[[Cell], str]] = {
    "the toolchain's wheel (nvcc)": lambda c: _key(c, {**SHAS, "nvidia-cuda-nvcc": "d" * 64}),
    "FlashInfer's wheel": lambda c: _key(c, {**SHAS, "flashinfer-python": "e" * 64}),
    "a wheel added to the lock": lambda c: _key(c, {**SHAS, "numpy": "f" * 64}),
    "the base (its key names its digest)": lambda c: _key(c, base="another-base"),
    "the arch list": lambda c: _key(dataclasses.replace(c, flashinfer_cuda_arch_list="10.0a")),
    "the compile flags (NVCC_APPEND_FLAGS)": lambda c: _key(dataclasses.replace(c, env={"NVCC_APPEND_FLAGS": "-O0"})),
    "a FlashInfer variable": lambda c: _key(dataclasses.replace(c, env={"FLASHINFER_JIT_VERBOSE": "1"})),
    "a variable no list foresees": lambda c: _key(dataclasses.replace(c, env={"SOME_NEW_FLAG": "1"})),
    "the Python": lambda c: _key(dataclasses.replace(c, python="3.12")),
    "the epoch": lambda c: _key(c, epoch=2),
    "the compression": lambda c: _key(c, level="zstd:3"),
}


@pytest.mark.parametrize("what", sorted(CHANGES))
def test_the_aot_key_changes_with_each_input(what: str) -> None:
    plain = _plain()
    assert CHANGES[what](plain) != _key(plain)


def test_the_aot_key_changes_with_the_format_version_and_the_generators_source(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = _plain()
    before = _key(plain)
    monkeypatch.setattr(aot_plan, "AOT_FORMAT", aot_plan.AOT_FORMAT + 1)
    bumped = _key(plain)
    monkeypatch.setattr(aot_plan, "builder_source", lambda: b"# another generator\n")
    assert len({before, bumped, _key(plain)}) == 3


def test_the_aot_key_is_the_same_for_the_same_inputs() -> None:
    assert _key(_plain()) == _key(_plain())  # a key that changes every run would hit nothing


def test_the_aot_key_leaves_out_only_what_the_compile_is_not_handed() -> None:
    """vLLM's env-flag variant (h200-vllm's fp8-moe), NCCL's and the cell's id never reach the compile
    (aot_plan.compile_env drops them): cells differing only there share the layer (test_aot_plan_shared.py)."""
    plain = _plain()
    fp8_moe = {"VLLM_USE_FLASHINFER_MOE_FP4": "0", "VLLM_USE_FLASHINFER_MOE_FP8": "1", "NCCL_DEBUG": "INFO"}
    variant = dataclasses.replace(plain, id="another-id", env={**plain.env, **fp8_moe})
    assert _key(variant) == _key(plain)
    handed = aot_plan.compile_env(variant)
    assert not set(fp8_moe) & set(handed) and "PINMATRIX_CELL" not in handed
