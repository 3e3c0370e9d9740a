"""Shared by tests/unit/image/assembly/test_patching.py and tests/integration/test_patching_real_wheel.py."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


XFORMERS_PATCH = ROOT / "patches" / "xformers-tiled-matmul-int64.patch"


KERNEL = "xformers/ops/_triton/tiled_matmul_kernels.py"
