"""The xformers patch applied to the real wheel from the package index, like GNU patch."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from xformers_patch import KERNEL, ROOT, XFORMERS_PATCH

from conftest import skip_or_fail
from pinmatrix.image.assembly.patching import apply_patch


@pytest.fixture(scope="module")
def xformers_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kernel file from the real xformers 0.0.35 wheel (downloaded once)."""
    dl = tmp_path_factory.mktemp("wheel")
    # nox's uv-made session venv has no pip: fall back to the repository's .venv or the system python.
    pythons = [sys.executable, str(ROOT / ".venv" / "bin" / "python"), shutil.which("python3") or "python3"]
    python = next((p for p in pythons if Path(p).exists() and subprocess.run(
        [p, "-m", "pip", "--version"], capture_output=True).returncode == 0), None)
    if python is None:
        skip_or_fail("no interpreter with pip to download the xformers wheel")
    proc = subprocess.run(
        [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
         "--platform", "manylinux_2_28_x86_64", "-d", str(dl), "xformers==0.0.35"],
        capture_output=True, text=True, timeout=300,
    )
    wheels = list(dl.glob("xformers-0.0.35-*.whl"))
    if proc.returncode != 0 or not wheels:
        skip_or_fail(f"xformers 0.0.35 wheel not downloadable here: {proc.stderr.strip()[-200:]}")
    site = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheels[0]) as zf:
        zf.extract(KERNEL, site)
    return site


@pytest.mark.network
def test_xformers_patch_applies_to_the_real_wheel_like_gnu_patch(xformers_site: Path, tmp_path: Path) -> None:
    ours = tmp_path / "ours"
    shutil.copytree(xformers_site, ours)
    sha = hashlib.sha256(XFORMERS_PATCH.read_bytes()).hexdigest()
    assert apply_patch(XFORMERS_PATCH, ours, expected_sha256=sha).outcome == "applied"
    patched = (ours / KERNEL).read_text()
    assert "INT64_OFFSETS: tl.constexpr = False" in patched and "def _needs_int64_offsets" in patched
    compile(patched, KERNEL, "exec")
    assert apply_patch(XFORMERS_PATCH, ours).outcome == "already-applied"
    gnu = shutil.which("patch")
    if gnu is None:
        skip_or_fail("GNU patch not installed")
    theirs = tmp_path / "theirs"
    shutil.copytree(xformers_site, theirs)
    subprocess.run([gnu, "-p1", "--forward", "-i", str(XFORMERS_PATCH)], cwd=theirs, check=True,
                   capture_output=True)
    assert (theirs / KERNEL).read_text() == patched
    # GNU patch, like us, refuses a second application (--forward): the build's path and ours agree.
    again = subprocess.run([gnu, "-p1", "--forward", "-i", str(XFORMERS_PATCH)], cwd=theirs, capture_output=True)
    assert again.returncode != 0
