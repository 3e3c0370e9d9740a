"""Shared by tests/unit/ci/test_k8s.py and tests/integration/test_k8s_digests.py."""

from __future__ import annotations

from pathlib import Path

from promotion import _matrix_for, push_image  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]


SMOKE_DIR = ROOT / "smoke"


POOLS_TOML = """
[[pool]]
name = "h200"
gpu_product = "NVIDIA-H200"
driver = "580.159.04"
capability = "9.0"

[[pool]]
name = "spark-580"
gpu_product = "NVIDIA-GB10"
driver = "580.142"
capability = "12.1"

[[pool]]
name = "spark-595"
gpu_product = "NVIDIA-GB10"
driver = "595.58.03"
capability = "12.1"
gpus = 1
node_selector = { "cloud.example.com/pool" = "spark" }
"""
