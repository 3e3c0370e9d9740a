"""A tiny Containerfile built by buildah through the engine's build (the Containerfile path's): the manifest in
podman's store carries every annotation handed over (skopeo inspect --raw), and so does the manifest the engine
pushes to a registry. When every step comes from buildah's
layer cache, the image keeps the annotations of the build that made it (docs/images.md says so: the Containerfile
path builds nothing for unchanged inputs either). The command line alone: tests/unit/image/containerfile/test_render_annotations.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import engine_for, require_binaries
from pinmatrix.image.annotations import CREATED, REVISION, SOURCE
from pinmatrix.registry.client import Registry

pytestmark = [pytest.mark.podman]


def _manifest_annotations(env: dict[str, str], ref: str) -> dict[str, str]:
    proc = subprocess.run(["skopeo", "inspect", "--raw", f"containers-storage:{ref}"], capture_output=True,
                          text=True, check=True, env=env, timeout=120)
    manifest = json.loads(proc.stdout)
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    return dict(manifest.get("annotations") or {})


def test_a_buildah_build_puts_the_annotations_on_the_manifest(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    require_binaries("skopeo")
    engine = engine_for("podman", request)
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "hello.txt").write_text("hello\n")
    (context / "Containerfile").write_text("FROM scratch\nCOPY hello.txt /hello.txt\n")
    ref = "localhost/pinmatrix-annotations:test"
    first = {SOURCE: "https://forge.invalid/team/stack", REVISION: "c" * 40, CREATED: "2026-01-01T00:00:00Z",
             "io.pinmatrix.pin.torch": "2.11.0"}
    built = engine.build(context, ref, source_date_epoch=0, annotations=first)
    got = _manifest_annotations(engine.env, ref)
    assert {key: got.get(key) for key in first} == first
    second = {**first, REVISION: "d" * 40}
    again = engine.build(context, ref, source_date_epoch=0, annotations=second)  # every step cached
    assert again.image_id == built.image_id  # the same config: the annotations are the manifest's only
    assert _manifest_annotations(engine.env, ref)[REVISION] == "c" * 40  # the limit docs/images.md states


@pytest.mark.registry
def test_the_engines_push_keeps_them(request: pytest.FixtureRequest, registry: Registry, tmp_path: Path) -> None:
    engine = engine_for("podman", request)
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "pushed.txt").write_text("pushed\n")
    (context / "Containerfile").write_text("FROM scratch\nCOPY pushed.txt /pushed.txt\n")
    ref = f"{registry.host}/annotations/pushed:1"
    given = {SOURCE: "https://forge.invalid/team/stack", REVISION: "e" * 40}
    engine.build(context, ref, source_date_epoch=0, annotations=given)
    digest = engine.push(ref, tls_verify=registry.tls_verify)  # as build_cell pushes
    manifest = registry.get_manifest("annotations/pushed", digest)
    assert manifest is not None
    assert {key: manifest.json.get("annotations", {}).get(key) for key in given} == given
