"""Installed-tree patches inside images: the shipped xformers patch applies to the installed xformers 0.0.35
(installed from an explicit test-only lock with the real wheel's hash, --no-deps, so no torch); a patch
whose sha256 differs is refused; a broken patch fails only its own cell in the same build run; a patch
contained upstream is skipped with a note."""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path

import pytest
from rich.console import Console

from conftest import engine_for, host_ca_certificates, make_cell, project_copy
from pinmatrix.cell import CellPatch
from pinmatrix.image.build import build_all
from pinmatrix.image.settings import BuildSettings
from pinmatrix.oci.layout import OCILayout

pytestmark = [pytest.mark.slow, pytest.mark.podman, pytest.mark.network]

XFORMERS_LOCK = """\
# test-only lock: xformers 0.0.35's wheel (py39-none, manylinux_2_28_x86_64) and nothing else
xformers==0.0.35 \\
    --hash=sha256:ccc73c7db9890224ab05f5fb60e2034f9e6c8672a10be0cf00e95cbbae3eda7c
    # via -r requirements.in
"""
PATCH = "patches/xformers-tiled-matmul-int64.patch"
KERNEL = "xformers/ops/_triton/tiled_matmul_kernels.py"
BROKEN = f"""\
--- a/{KERNEL}
+++ b/{KERNEL}
@@ -1,3 +1,3 @@
-this line is not in xformers 0.0.35
+nor is this one
 and the context does not match either
 so GNU patch must reject hunk 1
"""


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def xformers_patch(root: Path, *, source: str = PATCH, sha256: str | None = None, pid: str = "xformers-tiled-matmul-int64") -> CellPatch:
    return CellPatch(
        id=pid, package="xformers", version="0.0.35", kind="installed-tree", status="apply",
        upstream="https://github.com/facebookresearch/xformers/pull/1346",
        sha256=sha256 or sha(root / source), source=source,
    )


@pytest.mark.skipif(__import__("platform").machine() != "x86_64", reason="the test lock pins the x86_64 wheel")
def test_xformers_patch_in_image_broken_patch_fails_only_its_cell(request, build_cache, tmp_path) -> None:  # noqa: ANN001
    engine = engine_for("podman", request)
    root = project_copy(tmp_path)
    (root / "patches" / "broken.patch").write_text(BROKEN)
    upstream = CellPatch(
        id="flashinfer-pr2520", package="flashinfer-python", version="0.6.8.post1", kind="installed-tree",
        status="already-upstream", upstream="https://github.com/flashinfer-ai/flashinfer/pull/2520",
        sha256=None, source=None, contained_in="0.6.7", note="merged upstream",
    )
    good = make_cell("xformers-patch-test", ("xformers==0.0.35",), pins={"xformers": "0.0.35-int64"},
                     patches=(xformers_patch(root), upstream), cuda="13.0", min_driver="580.65.06",
                     arch_flags=("9.0a",))
    broken = make_cell("xformers-patch-test", ("xformers==0.0.35",), pins={"xformers": "0.0.35-broken"},
                       patches=(xformers_patch(root, source="patches/broken.patch", pid="broken"),))
    mismatch = make_cell("xformers-patch-test", ("xformers==0.0.35",), pins={"xformers": "0.0.35-badsha"},
                         patches=(xformers_patch(root, sha256="0" * 64),))
    for cell in (good, broken, mismatch):
        (root / "locks").mkdir(exist_ok=True)
        (root / "locks" / f"{cell.id}.txt").write_text(XFORMERS_LOCK)
    settings = BuildSettings(root=root, cache_dir=build_cache, logs_dir=tmp_path / "logs", registry=None,
                             ca_certificates=host_ca_certificates())
    results = build_all([good, broken, mismatch], engine, settings, None, jobs=2, console=Console(stderr=True))
    by_cell = {r.cell.id: r for r in results}

    ok = by_cell[good.id]
    assert ok.status == "built", ok.reason
    log = ok.log.read_text()
    assert "layer patch:xformers-tiled-matmul-int64: built" in log
    assert "patch flashinfer-pr2520 skipped: contained upstream in 0.6.7" in log
    assert ok.layers[-1] == "patch:xformers-tiled-matmul-int64"  # this project copy has no smoke/
    site = "/opt/venv/lib/python3.11/site-packages"
    proc = engine.run(ok.ref, ["grep", "-c", "INT64_OFFSETS", f"{site}/{KERNEL}"])
    assert int(proc.stdout.decode().strip()) > 0
    info = engine.inspect(ok.ref)
    assert info is not None
    assert info.labels["io.pinmatrix.patch.xformers-tiled-matmul-int64"].startswith(f"sha256:{sha(root / PATCH)}")
    assert info.labels["io.pinmatrix.patch.flashinfer-pr2520"] == "already-upstream (contained in 0.6.7)"
    assert "NVIDIA_REQUIRE_CUDA=cuda>=13.0 driver>=580.65.06" in info.env
    assert info.labels["io.pinmatrix.arch.flags"] == "9.0a"
    # the patch layer holds exactly the patched file
    layout = OCILayout(settings.layout)
    stored = layout.image(ok.ref)
    assert stored is not None
    with tarfile.open(layout.blob_path(stored.manifest["layers"][-1]["digest"]), "r|gz") as tar:
        files = [m.name for m in tar if m.isreg()]
    assert files == [f"opt/venv/lib/python3.11/site-packages/{KERNEL}"]

    bad = by_cell[broken.id]
    assert bad.status == "failed"
    assert "patch broken does not apply to xformers 0.0.35" in bad.reason
    assert f"{KERNEL}: hunk #1" in bad.reason
    assert not engine.exists(bad.ref)

    refused = by_cell[mismatch.id]
    assert refused.status == "failed"
    assert "refused" in refused.reason and "0" * 64 in refused.reason
    assert "layer" not in refused.log.read_text()  # refused before any layer was written


SIX_LOCK = """\
# test-only lock: six 1.16.0, its wheel and its sdist
six==1.16.0 \\
    --hash=sha256:1e61c37477a1626458e36f7b1d82aa5c9b094fa4802892072e49de9c60c4c926 \\
    --hash=sha256:8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254
    # via -r requirements.in
"""
SIX_SOURCE_PATCH = """\
--- a/six.py
+++ b/six.py
@@ -30,6 +30,7 @@

 __author__ = "Benjamin Peterson <benjamin@python.org>"
 __version__ = "1.16.0"
+PINMATRIX_SOURCE_PATCHED = True


 # Useful for very coarse version differentiation.
"""


def test_source_patch_is_built_into_a_wheel_from_the_locked_sdist(request, build_cache, tmp_path) -> None:  # noqa: ANN001
    engine = engine_for("podman", request)
    root = project_copy(tmp_path)
    (root / "patches" / "six-marker.patch").write_text(SIX_SOURCE_PATCH)
    patch = CellPatch(id="six-marker", package="six", version="1.16.0", kind="source", status="apply",
                      upstream="test", sha256=sha(root / "patches" / "six-marker.patch"), source="patches/six-marker.patch")
    cell = make_cell("source-patch-test", ("six==1.16.0",), pins={"six": "1.16.0-marker"}, patches=(patch,),
                     arch_flags=("9.0a",))
    (root / "locks").mkdir()
    (root / "locks" / f"{cell.id}.txt").write_text(SIX_LOCK)
    settings = BuildSettings(root=root, cache_dir=build_cache, logs_dir=tmp_path / "logs", registry=None,
                             ca_certificates=host_ca_certificates())
    (result,) = build_all([cell], engine, settings, None, jobs=1, console=Console(stderr=True))
    assert result.status == "built", result.reason
    log = result.log.read_text()
    assert "pinmatrix: patch six-marker applied to six 1.16.0" in log
    assert "pinmatrix: patch six-marker: built six-1.16.0-py2.py3-none-any.whl from the patched sdist (TORCH_CUDA_ARCH_LIST=9.0a)" in log
    proc = engine.run(result.ref, ["python", "-c", "import six; print(six.PINMATRIX_SOURCE_PATCHED, six.__file__)"])
    assert proc.stdout.decode().split()[0] == "True"
