"""An image of more than 100 wheels (the shape of a gb10 cell: 189 pins) assembles with its small wheels merged
into one layer that holds each path once, and loads into podman (vfs storage); a load that podman refuses
shows podman's cause, not only its last line."""

from __future__ import annotations

import base64
import dataclasses
import gzip
import hashlib
import io
import json
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pep691 import serve_pages

from conftest import engine_for, make_cell
from pinmatrix.cell import BaseSpec, IndexSpec
from pinmatrix.image.assembly.assemble import Assembler, AssemblySettings
from pinmatrix.image.load_push import PublishError, load_cause, load_into_engine
from pinmatrix.oci.compression import MEDIA_TYPES
from pinmatrix.oci.layer import open_layer
from pinmatrix.oci.layout import MEDIA_TYPE_CONFIG, MEDIA_TYPE_MANIFEST, OCILayout, canonical_json

TRIXIE = BaseSpec(kind="mmdebstrap", suite="trixie", source_date_epoch=1735689600, packages=("python3",))
WHEELS = 110


def _wheel(name: str) -> bytes:
    """A pure wheel whose module lives in a folder every other wheel shares (as nvidia/* wheels do)."""
    files = {f"shared/deeper/{name}.py": f"NAME = {name!r}\n".encode(),
             f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
             f"{name}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for path, data in files.items()) + f"{name}-1.0.dist-info/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
        zf.writestr(f"{name}-1.0.dist-info/RECORD", record)
    return buf.getvalue()


@pytest.fixture
def many_wheels() -> Iterator[tuple[str, dict[str, str]]]:
    """A PEP 691 index on 127.0.0.1 serving WHEELS tiny wheels; yields its URL and name -> sha256."""
    pages: dict[str, bytes] = {}
    hashes: dict[str, str] = {}
    for i in range(WHEELS):
        name = f"t{i:03d}"
        data = _wheel(name)
        hashes[name] = hashlib.sha256(data).hexdigest()
        pages[f"/simple/{name}/"] = json.dumps({"files": [{
            "filename": f"{name}-1.0-py3-none-any.whl", "url": f"/files/{name}.whl",
            "hashes": {"sha256": hashes[name]}, "size": len(data)}]}).encode()
        pages[f"/files/{name}.whl"] = data
    with serve_pages(pages) as base:
        yield f"{base}/simple", hashes


@pytest.mark.slow
@pytest.mark.network  # the Debian base (mmdebstrap, once per session)
def test_an_image_of_more_than_100_wheels_loads_into_podman(build_cache: Path, tmp_path: Path,
                                                             many_wheels: tuple[str, dict[str, str]],
                                                             request: pytest.FixtureRequest) -> None:
    engine = engine_for("podman", request)
    url, hashes = many_wheels
    requirements = tuple(f"{name}==1.0" for name in hashes)
    cell = make_cell("many", requirements, pins={}, python="3.13", base=TRIXIE)
    cell = dataclasses.replace(cell, indexes=(IndexSpec(name="local", url=url, default=True),))
    lock = (f"# pinmatrix lock for cell {cell.id}: {cell.name}\n# python 3.13 on {cell.platform}; x\n"
            + "".join(f"{name}==1.0 \\\n    --hash=sha256:{sha}\n" for name, sha in hashes.items()))
    assembler = Assembler(AssemblySettings(root=tmp_path, cache_dir=build_cache, layout_dir=tmp_path / "oci",
                                           jobs=2))
    image = assembler.assemble(cell, lock, f"localhost/pinmatrix/many:{cell.id}", tmp_path / "log")
    assert len(image.layers) <= 100
    (merged,) = [p for p in image.layers if p.name.startswith("wheels:")]
    assert merged.descriptor is not None
    with open_layer(assembler.layout.blob_path(merged.descriptor.digest), merged.descriptor.media_type) as tar:
        names = [m.name for m in tar]
    assert len(names) == len(set(names)), "the merged layer repeats a path"
    assert "opt/venv/lib/python3.13/site-packages/shared/deeper" in names
    stored = assembler.layout.image(image.ref)
    assert stored is not None
    image_id = load_into_engine(assembler.layout, stored, engine)
    loaded = engine.inspect(image.ref)
    assert loaded is not None and loaded.id == image_id


def _layer_repeating_a_folder(blobs: Path) -> tuple[str, str, int]:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for _ in range(2):
            info = tarfile.TarInfo("opt")
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        data = b"x"
        info = tarfile.TarInfo("opt/x")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    diff_id = "sha256:" + hashlib.sha256(raw.getvalue()).hexdigest()
    blob = gzip.compress(raw.getvalue(), mtime=0)
    digest = hashlib.sha256(blob).hexdigest()
    (blobs / digest).write_bytes(blob)
    return "sha256:" + digest, diff_id, len(blob)


def test_a_refused_load_shows_podmans_cause(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A layer that repeats a folder (what the merged layer did before it held each path once): podman refuses
    it, and the error carries podman's reason, not only its last line."""
    engine = engine_for("podman", request)
    layout = OCILayout(tmp_path / "oci").init()
    digest, diff_id, size = _layer_repeating_a_folder(layout.blobs)
    config = canonical_json({"architecture": "amd64", "os": "linux", "config": {},
                             "rootfs": {"type": "layers", "diff_ids": [diff_id]}})
    config_digest = layout.put_blob(config)
    manifest = {"schemaVersion": 2, "mediaType": MEDIA_TYPE_MANIFEST,
                "config": {"mediaType": MEDIA_TYPE_CONFIG, "digest": config_digest, "size": len(config)},
                "layers": [{"mediaType": MEDIA_TYPES["gzip"], "digest": digest, "size": size}]}
    layout.put_image("localhost/pinmatrix/repeats:1", manifest)
    stored = layout.image("localhost/pinmatrix/repeats:1")
    assert stored is not None
    try:
        load_into_engine(layout, stored, engine)
    except PublishError as err:
        message = str(err)
    else:
        pytest.skip("this podman accepts a layer that repeats a folder")
    assert "loading localhost/pinmatrix/repeats:1 failed" in message
    # skopeo into containers-storage: "writing blob: adding layer with blob ...: ... duplicates of file paths not
    # supported" (podman load: "...; oci-archive: writing blob: ..."), not the log line around it
    assert "duplicates of file paths not supported" in message and "level=fatal" not in message, message


def test_the_cause_of_a_load_failure_is_the_engines_error_for_the_archive_format() -> None:
    text = """Getting image source signatures
Copying blob sha256:abc
Error: payload does not match any of the supported image formats:
 * oci: initializing source oci:/dev/stdin: open /dev/stdin/index.json: not a directory
 * oci-archive: writing blob: adding layer with blob "sha256:abc": processing tar file(): duplicates of file paths not supported
 * docker-archive: loading tar component "manifest.json": file does not exist
 * dir: open /dev/stdin/manifest.json: not a directory
"""
    cause = load_cause(text)
    assert cause == ('payload does not match any of the supported image formats; oci-archive: writing blob: adding '
                     'layer with blob "sha256:abc": processing tar file(): duplicates of file paths not supported')
    assert load_cause("Error: no space left on device\n") == "no space left on device"
    assert load_cause("a\nlast words\n") == "last words"
    assert load_cause("") == "no output"
