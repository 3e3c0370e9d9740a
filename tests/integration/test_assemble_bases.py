"""Assembly with services: an aarch64 cell assembled here (wheels from the package index), and a base pinned by
digest fetched from a registry and its layers used as they are."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from assembly_cells import demo_cells

from conftest import REPO, make_cell
from pinmatrix.cell import BaseSpec
from pinmatrix.image.assembly.assemble import Assembler, AssemblySettings
from pinmatrix.image.build import build_all
from pinmatrix.image.settings import BuildSettings
from pinmatrix.imageref import image_ref
from pinmatrix.lock.resolve import lock_cell
from pinmatrix.oci.layer import LayerWriter
from pinmatrix.project.lockfile import lock_path


@pytest.mark.slow
@pytest.mark.network
def test_an_aarch64_cell_is_assembled_here_with_the_arm64_platform(build_cache: Path, tmp_path: Path) -> None:
    base = BaseSpec(kind="mmdebstrap", suite="trixie", source_date_epoch=1735689600, packages=("python3",),
                    variant="extract")
    cell = make_cell("arm-demo", ("six==1.17.0",), pins={"six": "1.17.0"}, python="3.13", base=base)
    cell = type(cell)(**{**cell.__dict__, "platform": "aarch64-manylinux_2_28"})
    (tmp_path / "locks").mkdir()
    result = lock_cell(cell, tmp_path, None)
    assert result.ok, result.reason
    settings = BuildSettings(root=tmp_path, cache_dir=build_cache, logs_dir=tmp_path / "logs", registry="test")
    (built,) = build_all([cell], None, settings, None, jobs=1)
    assert built.status == "built", built.reason
    assembler = Assembler(AssemblySettings(root=tmp_path, cache_dir=build_cache, layout_dir=settings.layout))
    stored = assembler.layout.image(image_ref(cell, "test"))
    config = assembler.layout.config(stored)
    assert (config["architecture"], config["variant"], config["os"]) == ("arm64", "v8", "linux")
    with tarfile.open(assembler.layout.blob_path(stored.manifest["layers"][0]["digest"]), "r|gz") as tar:
        names = {m.name for m in tar}
    assert "usr/lib/aarch64-linux-gnu/libc.so.6" in names and "usr/bin/python3.13" in names
    assert "etc/hostname" not in names and "etc/resolv.conf" not in names
    with tarfile.open(assembler.layout.blob_path(stored.manifest["layers"][2]["digest"]), "r|gz") as tar:
        assert "opt/venv/lib/python3.13/site-packages/six.py" in {m.name for m in tar}


@pytest.mark.slow
@pytest.mark.registry
def test_a_base_pinned_by_digest_is_fetched_and_its_layers_used_as_they_are(docker_registry, tmp_path: Path) -> None:
    from dataclasses import replace

    from pinmatrix.image.load_push import push
    from pinmatrix.oci.layout import MEDIA_TYPE_CONFIG, MEDIA_TYPE_MANIFEST, OCILayout, canonical_json

    # a base image made here: one layer with /usr/bin/python3 -> python3.13 and an os-release, pushed by digest
    src = OCILayout(tmp_path / "src").init()
    writer = LayerWriter(src.blobs, epoch=0)
    writer.add_bytes("etc/os-release", b"ID=pinned-test\n")
    writer.add_symlink("usr/bin/python3", "python3.13")
    layer = writer.close()
    config = canonical_json({"architecture": "amd64", "os": "linux", "config": {"Env": ["PATH=/usr/bin:/bin", "LANG=C.UTF-8"]},
                             "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]}})
    manifest = {"schemaVersion": 2, "mediaType": MEDIA_TYPE_MANIFEST,
                "config": {"mediaType": MEDIA_TYPE_CONFIG, "digest": src.put_blob(config), "size": len(config)},
                "layers": [layer.as_oci()]}
    src.put_image("base", manifest)
    ref = f"{docker_registry.address}/bases/python:3.13"
    digest = push(src, src.image("base"), ref, tls_verify=False)
    cell = demo_cells()[0]
    pinned = replace(cell, base=BaseSpec(kind="image", image=f"{docker_registry.address}/bases/python@{digest}"))
    settings = BuildSettings(root=REPO, cache_dir=tmp_path / "cache", logs_dir=tmp_path / "logs", registry="pinned",
                             layout_dir=tmp_path / "oci")
    lock = lock_path(cell, REPO).read_text().replace(cell.id, pinned.id, 1)
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / f"{pinned.id}.txt").write_text(lock)
    (built,) = build_all([pinned], None, replace(settings, root=tmp_path, smoke_dir=REPO / "smoke"), None, jobs=1)
    assert built.status == "built", built.reason
    layout = OCILayout(tmp_path / "oci")
    stored = layout.image(built.ref)
    assert stored.manifest["layers"][0]["digest"] == layer.digest  # the pinned base's layer, as it is
    env = layout.config(stored)["config"]["Env"]
    assert "LANG=C.UTF-8" in env and any(e.startswith("PATH=/opt/venv/bin:") for e in env)
    assert layout.config(stored)["config"]["Labels"]["org.opencontainers.image.base.name"].endswith(digest)
