"""Known issues against a host and a cell: the host decides the driver and the GPU (whatever driver the cell was
expanded for), the cell decides its arch, env, packages and patches; a driver range matches as a range."""

from __future__ import annotations

from pathlib import Path

import pytest

from pinmatrix.doctor.known_issues import CONDITIONAL, HITS, host_issues, installed_packages, match_issue, version_in
from pinmatrix.hostprobe import DriverVersion, Gpu, GpuProbe
from pinmatrix.matrix.selection import load
from pinmatrix.project.matrix_toml import KnownIssueSpec

ROOT = Path(__file__).resolve().parents[3]


def gb10(driver: str) -> GpuProbe:
    return GpuProbe((Gpu("NVIDIA GB10", DriverVersion.parse(driver), "12.1", None, None, True),), "13.0", "/x")


@pytest.fixture(scope="module")
def shipped() -> tuple:
    matrix, expansion = load(ROOT / "matrix.toml")
    return matrix, {c.name: c for c in expansion.cells}


def _cell(shipped: tuple, stack: str, **pins: str):  # noqa: ANN202
    _, cells = shipped
    return next(c for c in cells.values() if c.stack == stack and all(c.pins.get(k) == v for k, v in pins.items()))


def test_the_host_driver_not_the_cells_decides(shipped: tuple) -> None:
    matrix, _ = shipped
    cell = _cell(shipped, "gb10-nvfp4", driver="580.142", arch="12.0f", vllm="0.15.1")
    on_595 = {i.id: i.verdict for i in host_issues(matrix.known_issues, gb10("595.58.03"), {}, cell)}
    assert on_595 == {"driver-595.58.03-nvfp4-cutensormap": HITS, "nvfp4-built-for-120f-on-sm121": HITS}
    on_580 = {i.id for i in host_issues(matrix.known_issues, gb10("580.142"), {}, cell)}
    assert on_580 == {"nvfp4-built-for-120f-on-sm121"}
    native = _cell(shipped, "gb10-nvfp4", driver="595.58.03", arch="12.1a", vllm="0.15.1")
    assert {i.id for i in host_issues(matrix.known_issues, gb10("580.142"), {}, native)} == set()


def test_a_patched_cell_is_spared_and_an_unpatched_one_hit(shipped: tuple) -> None:
    matrix, _ = shipped
    h200 = GpuProbe((Gpu("NVIDIA H200", DriverVersion.parse("580.159.04"), "9.0", "Disabled", 143771),), "13.0", "/x")
    cells = [c for c in shipped[1].values() if c.stack == "h200"]
    patched = next(c for c in cells if any(p.status == "apply" for p in c.patches))
    plain = next(c for c in cells if not c.patches)
    assert "xformers-tiled-matmul-int32-offsets" in {i.id for i in host_issues(matrix.known_issues, h200, {}, plain)}
    assert "xformers-tiled-matmul-int32-offsets" not in {
        i.id for i in host_issues(matrix.known_issues, h200, {}, patched)}


def test_a_driver_range_and_an_installed_package() -> None:
    spec = KnownIssueSpec.model_validate({"id": "tma-under-128k", "when": {"driver": ">=595,<596", "torch": ">=2.11"},
                                          "smokes": ["torch-gemm"], "note": "n", "source": "595.71.05 release notes"})
    assert match_issue(spec, gb10("590.48.01"), {"torch": "2.11.0"}) is None
    hit = match_issue(spec, gb10("595.71.05"), {"torch": "2.11.0"})
    assert hit is not None and hit.verdict == HITS and hit.source == "595.71.05 release notes"
    assert hit.matched == ("driver 595.71.05 is >=595,<596", "installed torch 2.11.0 is >=2.11")
    left = match_issue(spec, gb10("595.71.05"), {})
    assert left is not None and left.verdict == CONDITIONAL and left.unless == ("torch >=2.11",)
    assert match_issue(spec, gb10("595.71.05"), {"torch": "2.10.0"}) is None


def test_no_gpu_rules_out_gpu_and_driver_conditions() -> None:
    spec = KnownIssueSpec.model_validate({"id": "x", "when": {"gpu": "sm_121"}, "smokes": ["s"], "note": "n"})
    assert match_issue(spec, GpuProbe((), None, None), {}) is None
    bad = KnownIssueSpec.model_validate({"id": "y", "when": {"driver": "latest"}, "smokes": ["s"], "note": "n"})
    assert match_issue(bad, gb10("580.142"), {}) is None  # no driver version: it matches nothing


def test_versions_and_this_pythons_packages() -> None:
    assert version_in("0.0.35", ">=0.0.28,<=0.0.35") and not version_in("0.0.36", ">=0.0.28,<=0.0.35")
    assert version_in("0.0.35-int64", "0.0.35-int64") and not version_in("nonsense", ">=1")
    assert version_in("2.11.0+cu130", "2.11.0") and not version_in("2.11.1", "2.11.0")  # a local build is its version
    assert not version_in("0.0.35", "0.0.35-int64")
    assert installed_packages()["pytest"]  # the test runner's own Python holds pytest
