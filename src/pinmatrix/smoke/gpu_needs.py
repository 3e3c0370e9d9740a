"""A smoke's GPU needs as the runner judges them from its host probe, before any process starts.

The smoke judges the same needs again inside the cell (``shipped/_smokelib.unmet_need``: the in-cell runtime is
standard library only and imports nothing of pinmatrix, so the rule is written there as well);
tests/unit/smoke/test_gpu_needs.py holds both to the same answers over a grid of needs and GPUs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FP4_SINCE = (10, 0)  # FP4 tensor-core instructions: sm_100, sm_103, sm_110, sm_120(a), sm_121(a)


def capability_tuple(capability: str) -> tuple[int, int]:
    major, _, minor = capability.partition(".")
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def no_native_fp4(capability: str) -> str | None:
    """Why a GPU of ``capability`` ("9.0") has no FP4 tensor-core instructions, or None."""
    if capability_tuple(capability) >= FP4_SINCE:
        return None
    return (f"no native FP4 tensor-core instructions on sm_{capability.replace('.', '')} (needs sm_100/sm_103/"
            "sm_110 or sm_120a/sm_121a)")


def unmet_need(needs: Mapping[str, Any], gpu_count: int, capability: str,
               memory_gib: float | None = None) -> str | None:
    """The first GPU need of ``needs`` that ``gpu_count`` GPUs, GPU 0 of ``capability``, do not meet, or None."""
    if gpu_count == 0:
        return "no GPU"
    want = int(needs.get("gpus", 1))
    if gpu_count < want:
        return f"needs {want} GPUs, {gpu_count} visible"
    cap = capability_tuple(capability)
    if "min_capability" in needs and cap < capability_tuple(str(needs["min_capability"])):
        return f"needs compute capability >= {needs['min_capability']}, device is {capability}"
    if "max_capability" in needs and cap > capability_tuple(str(needs["max_capability"])):
        return f"needs compute capability <= {needs['max_capability']}, device is {capability}"
    if needs.get("native_fp4"):
        fp4 = no_native_fp4(capability)
        if fp4:
            return fp4
    if memory_gib is not None and "memory_gib" in needs and memory_gib < float(needs["memory_gib"]):
        return f"needs {needs['memory_gib']} GiB of GPU memory, device has {memory_gib}"
    return None
