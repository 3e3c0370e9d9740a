"""Loading into podman copies only the layers its store lacks (skopeo to ``containers-storage:``): a second
image that shares a layer with one already loaded loads even when the shared layer's blob is no longer in the
layout, which a whole-image archive (``podman load``) could not do."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from conftest import engine_for
from pinmatrix.image.load_push import load_cause, load_into_engine
from pinmatrix.oci.compression import MEDIA_TYPES
from pinmatrix.oci.layout import MEDIA_TYPE_CONFIG, MEDIA_TYPE_MANIFEST, OCILayout, StoredImage, canonical_json

pytestmark = [pytest.mark.podman]


def _layer(layout: OCILayout, name: str, data: bytes) -> tuple[str, str, int]:
    """A gzip layer of one file; its blob digest, diff_id and size."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    blob = gzip.compress(raw.getvalue(), mtime=0)
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    (layout.blobs / digest.removeprefix("sha256:")).write_bytes(blob)
    return digest, "sha256:" + hashlib.sha256(raw.getvalue()).hexdigest(), len(blob)


def _image(layout: OCILayout, ref: str, layers: list[tuple[str, str, int]]) -> StoredImage:
    config = canonical_json({"architecture": "amd64", "os": "linux", "config": {},
                             "rootfs": {"type": "layers", "diff_ids": [diff_id for _, diff_id, _ in layers]}})
    manifest = {"schemaVersion": 2, "mediaType": MEDIA_TYPE_MANIFEST,
                "config": {"mediaType": MEDIA_TYPE_CONFIG, "digest": layout.put_blob(config), "size": len(config)},
                "layers": [{"mediaType": MEDIA_TYPES["gzip"], "digest": digest, "size": size}
                           for digest, _, size in layers]}
    layout.put_image(ref, manifest)
    stored = layout.image(ref)
    assert stored is not None
    return stored


def test_a_second_image_copies_only_the_layer_the_store_lacks(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    engine = engine_for("podman", request)
    layout = OCILayout(tmp_path / "oci").init()
    shared = _layer(layout, "opt/shared.bin", b"s" * 100_000)
    first = _image(layout, "localhost/pinmatrix/reuse:plain", [shared, _layer(layout, "opt/a", b"a")])
    second = _image(layout, "localhost/pinmatrix/reuse:int64", [shared, _layer(layout, "opt/b", b"b")])
    assert load_into_engine(layout, first, engine) == first.config_digest
    (layout.blobs / shared[0].removeprefix("sha256:")).unlink()  # only the store has it now
    assert load_into_engine(layout, second, engine) == second.config_digest
    loaded = engine.inspect(second.ref)
    assert loaded is not None and loaded.id == second.config_digest
    created = engine.call(["create", second.ref, "/opt/b"]).stdout.decode().strip()
    try:
        exported = engine.call(["export", created]).stdout
    finally:
        engine.call(["rm", created], check=False)
    with tarfile.open(fileobj=io.BytesIO(exported)) as tar:
        files = {m.name.removeprefix("./"): tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]
    assert files == {"opt/shared.bin": b"s" * 100_000, "opt/b": b"b"}


def test_a_name_that_held_another_image_names_the_loaded_one_afterwards(tmp_path: Path,
                                                                       request: pytest.FixtureRequest) -> None:
    engine = engine_for("podman", request)
    layout = OCILayout(tmp_path / "oci").init()
    ref = "localhost/pinmatrix/reuse:moved"
    before = _image(layout, ref, [_layer(layout, "opt/before", b"1")])
    assert load_into_engine(layout, before, engine) == before.config_digest
    after = _image(layout, ref, [_layer(layout, "opt/after", b"2")])  # the layout's ref now names another image
    assert after.config_digest != before.config_digest
    assert load_into_engine(layout, after, engine) == after.config_digest  # no tag step: skopeo moved the name
    loaded = engine.inspect(ref)
    assert loaded is not None and loaded.id == after.config_digest


def test_skopeos_fatal_line_is_its_message() -> None:
    line = 'time="2026-12-02T11:40:00Z" level=fatal msg="writing blob: adding layer: \\"opt\\": duplicates"'
    assert load_cause(f"Copying blob sha256:abc\n{line}\n") == 'writing blob: adding layer: "opt": duplicates'
    assert load_cause("level=fatal but no message\n") == "level=fatal but no message"
