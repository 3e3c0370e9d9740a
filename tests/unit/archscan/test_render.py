"""arch-scan's summaries without a compiler: which package honours an arch flag, and the build's wheel cache
reused. On tiny CUDA binaries compiled by the CUDA tool wheels from the package index (bare family cubins,
binaries for other GPUs, the 120f issue, folded rows, the image's AOT layer): tests/integration/
test_render_toolchain_binaries.py."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from archscan_render_wheels import wheel_of

from conftest import make_cell
from pinmatrix.archscan.fetch import CellPins, Pin, fetch_wheels
from pinmatrix.archscan.scan import own_packages


def test_own_packages_leave_out_torch_and_triton() -> None:
    cell = make_cell("s", ("torch==2.11.0",), pins={"torch": "2.11.0", "triton": "3.6.0", "vllm": "0.20.0",
                                                     "flashinfer": "0.6.8.post1"})
    own = own_packages(cell)
    assert "torch" not in own and "triton" not in own
    assert own[:2] == ["vllm", "flashinfer-python"] and "flashinfer-aot" in own and "flashinfer-cubin" in own


def test_the_builds_wheel_cache_is_read_not_downloaded_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build_cache = tmp_path / "build-cache"
    staging = tmp_path / "staging"
    staging.mkdir()
    arm = wheel_of(staging, "vllm", {"vllm/__init__.py": b""})
    x86 = wheel_of(staging, "vllm", {"vllm/__init__.py": b"#"}, tag="py3-none-manylinux_2_28_x86_64")
    stored = {}
    for wheel in (arm, x86):
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        folder = build_cache / "wheels" / digest[:2] / digest
        folder.mkdir(parents=True)
        stored[wheel.name] = (folder / wheel.name, digest)
        (folder / wheel.name).write_bytes(wheel.read_bytes())
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # a download could not succeed
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    pin = Pin("vllm", "1.0", (stored[x86.name][1], stored[arm.name][1]))
    pins = CellPins("lock", "aarch64-manylinux_2_28", "3.12", [pin])
    (got,) = fetch_wheels(pins, tmp_path / "scan-cache", build_cache=build_cache)
    assert got.path == stored[arm.name][0] and got.sha256 == stored[arm.name][1]  # the aarch64 one, in place
    assert not list((tmp_path / "scan-cache" / "wheels").rglob("*.whl"))
    (missing,) = fetch_wheels(CellPins("lock", "aarch64-manylinux_2_28", "3.12", [Pin("vllm", "1.0", (stored[x86.name][1],))]),
                              tmp_path / "scan-cache", build_cache=build_cache)
    assert missing.path is None  # the x86_64 wheel of the same pin is not taken for an aarch64 cell


