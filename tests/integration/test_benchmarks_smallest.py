"""Every benchmark at its smallest size (``python -m benchmarks --smallest``), in one run, so that none breaks unseen:
each is registered, runs to its figures and writes them; the Debian base is made once for all of them
(``PINMATRIX_BENCH_BASE_CACHE``) instead of once per benchmark's empty machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.__main__ import BENCHMARKS
from benchmarks.plaincell import plain_cell
from conftest import REPO, require_binaries
from pinmatrix.image.assembly.rootfs import debian_base
from pinmatrix.oci.layout import OCILayout

pytestmark = [pytest.mark.slow, pytest.mark.registry, pytest.mark.network, pytest.mark.podman]
HELPERS = {"__init__", "__main__", "floor", "plaincell"}  # modules of benchmarks/ that measure nothing themselves


def test_every_module_of_benchmarks_is_registered() -> None:
    modules = {p.stem for p in (REPO / "benchmarks").glob("*.py")} - HELPERS
    assert modules == {m.rsplit(".", 1)[1] for m in BENCHMARKS.values()}


def test_every_benchmark_runs_at_its_smallest_size(build_cache: Path) -> None:
    require_binaries("podman", "buildah", "skopeo", "docker-registry", "pigz", "zstd")
    demo = plain_cell("demo")  # the stand-in checkout's: .pinmatrix/bench is this test's own
    debian_base(demo.cell.base, demo.cell.platform, OCILayout(build_cache / "oci").init(), build_cache,
                build_cache / "base.log")
    env = {**os.environ, "PINMATRIX_BENCH_BASE_CACHE": str(build_cache), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--smallest"], env=env, capture_output=True,
                          text=True, check=False, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for name in BENCHMARKS:
        figures = json.loads((Path(".pinmatrix/benchmarks") / f"{name}.json").read_text())
        assert figures["wall_s"] > 0, name
        assert figures.get("stack", "demo") == "demo", name
