"""Expanding and validating a 10,000-cell matrix, on one core. Target: under 1 s.

The matrix is generated: one GPU stack with driver x cuda x gpu x arch x torch/triton (zipped) x xformers
(with a patch) x env x two package axes: 13,440 combinations, of which the driver rule prunes 3,360
(575.51.03 is too old for CUDA 13.0 on a non-datacenter GPU) and 10,080 cells remain. Timing covers load (TOML parse, schema) + validation
(patch files and sha256, versions) + expansion with every rule, best of 5."""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from pathlib import Path

from pinmatrix.matrix.selection import expand_matrix
from pinmatrix.project.matrix_toml import load_matrix

TARGET_S = 1.0
TARGET_CELLS = 10_000
SMALLEST = os.environ.get("PINMATRIX_BENCH_SMALLEST") == "1"  # 2 x 1 package versions: 480 cells


def write_matrix(root: Path) -> Path:
    patch = root / "patches" / "p.patch"
    patch.parent.mkdir(parents=True)
    patch.write_text("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    sha = hashlib.sha256(patch.read_bytes()).hexdigest()
    alpha = ", ".join(f'"1.{i}"' for i in range(2 if SMALLEST else 42))
    bravo = ", ".join(f'"2.{i}"' for i in range(1 if SMALLEST else 10))
    text = f"""
[matrix]
python = "3.13"
[patches.p]
package = "xformers"
applies_to = ">=0.0.28,<=0.0.35"
upstream = "https://example.invalid/pr/1"
source = "patches/p.patch"
sha256 = "{sha}"
[[known_issues]]
id = "k"
when = {{ xformers = ">=0.0.28,<=0.0.35", driver = "590.48.01" }}
without_patches = ["p"]
smokes = ["host-probe"]
note = "n"
[stacks.big]
zip = [["torch", "triton"]]
[stacks.big.axes]
driver = ["580.159.04", "590.48.01", "595.58.03", "575.51.03"]
cuda = ["13.0"]
gpu = ["sm_121"]
arch = ["12.1a"]
torch = ["2.10.0", "2.11.0"]
triton = ["3.6.0", "3.6.0"]
xformers = ["0.0.35", {{ version = "0.0.35", patches = ["p"], label = "int64" }}]
env = [{{}}, {{ A = "1" }}]
[stacks.big.packages]
alpha = [{alpha}]
bravo = [{bravo}]
"""
    path = root / "matrix.toml"
    path.write_text(text)
    return path


def run() -> dict[str, float | int | str]:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    with tempfile.TemporaryDirectory() as tmp:
        path = write_matrix(Path(tmp))
        times = []
        for _ in range(5):
            start = time.perf_counter()
            expansion = expand_matrix(load_matrix(path))
            times.append(time.perf_counter() - start)
    best = min(times)
    return {
        "cells": len(expansion.cells),
        "pruned": len(expansion.pruned),
        "best_s": round(best, 3),
        "median_s": round(sorted(times)[2], 3),
        "target": f"{TARGET_CELLS} cells expanded and validated in < {TARGET_S} s on one core",
        "target_met": len(expansion.cells) >= TARGET_CELLS and best < TARGET_S,
    }
