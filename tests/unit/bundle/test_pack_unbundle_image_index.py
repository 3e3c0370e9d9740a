"""The host unpacker (``pinmatrix/shipped/unbundle.py``) in process, image side: the layout's ``index.json`` it
writes (exact bytes, what it keeps and what it replaces), a DEST index it cannot read, and the image closure's
refusals as their exact lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_pack import images  # noqa: F401

from pinmatrix.bundle.image import ImageRequest, bundle_image
from pinmatrix.shipped import unbundle as host

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"


def test_a_new_layouts_index_is_canonical(images: Any, tmp_path: Path) -> None:  # noqa: F811
    layout, made = images
    plain, _ = made["plain"]
    bundle_image(ImageRequest(layout.root, plain, frozenset(), 5000, tmp_path / "b"), lambda _line: None)
    image = host.read_manifest(tmp_path / "b")["image"]
    assert host.main([str(tmp_path / "b"), "--out", str(tmp_path / "host"), "-q"]) == 0
    expected = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                "manifests": [{"mediaType": image["media_type"], "digest": plain, "size": image["size"],
                               "annotations": {host.REF_NAME: image["ref"]}}]}
    assert (tmp_path / "host" / "index.json").read_bytes() == json.dumps(
        expected, sort_keys=True, separators=(",", ":")).encode()
    other = {"mediaType": MANIFEST_TYPE, "digest": "sha256:" + "c" * 64, "size": 1}
    same_ref = {**other, "digest": "sha256:" + "d" * 64, "annotations": {host.REF_NAME: image["ref"]}}
    same_digest = {**other, "digest": plain, "annotations": {host.REF_NAME: "other:ref"}}
    odd = {**other, "digest": "sha256:" + "e" * 64, "annotations": "x"}
    (tmp_path / "host" / "index.json").write_text(json.dumps(
        {"schemaVersion": 2, "manifests": [other, same_ref, same_digest, odd, "x"], "extra": 1}))
    assert host.main([str(tmp_path / "b"), "--out", str(tmp_path / "host"), "-q"]) == 0
    written = json.loads((tmp_path / "host" / "index.json").read_text())
    assert written == {"schemaVersion": 2, "extra": 1, "manifests": [other, odd, "x", expected["manifests"][0]]}


def test_index_with_an_image_without_a_ref() -> None:
    image = {"media_type": MANIFEST_TYPE, "digest": "sha256:" + "a" * 64, "size": 3, "ref": None}
    kept = {"digest": "sha256:" + "b" * 64, "annotations": {host.REF_NAME: None}}
    assert host._index_with({"manifests": [kept]}, image) == {"manifests": [
        kept, {"mediaType": MANIFEST_TYPE, "digest": image["digest"], "size": 3}]}


@pytest.mark.parametrize(("text", "line"), [
    ("[]", "not an OCI image index"), ('{"manifests": {}}', "not an OCI image index"),
    ("{", "not a readable OCI index: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
])
def test_a_dest_index_that_cannot_be_read_is_refused(tmp_path: Path, text: str, line: str) -> None:
    (tmp_path / "index.json").write_text(text)
    with pytest.raises(host.Refused) as refused:
        host._read_index(tmp_path)
    assert str(refused.value) == f"{tmp_path / 'index.json'}: {line}"


def test_the_dest_index_bound_at_and_one_past(tmp_path: Path) -> None:
    path = tmp_path / "index.json"
    text = '{"manifests": []}'
    path.write_text(text + " " * (host.MAX_MANIFEST_BYTES - len(text)))
    assert host._read_index(tmp_path) == {"manifests": []}
    path.write_text(text + " " * (host.MAX_MANIFEST_BYTES + 1 - len(text)))
    with pytest.raises(host.Refused) as refused:
        host._read_index(tmp_path)
    assert str(refused.value) == (f"{path}: {host.MAX_MANIFEST_BYTES + 1} bytes, larger than "
                                  f"{host.MAX_MANIFEST_BYTES} bytes: more than an OCI index may have")
    path.unlink()
    assert host._read_index(tmp_path) == {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                                          "manifests": []}


def _closure(blobs: dict[str, tuple[str, int]], docs: dict[str, bytes], image: str, size: int) -> str:
    manifest = {"blobs": [{"digest": d, "media_type": t, "size": s} for d, (t, s) in blobs.items()],
                "image": {"digest": image, "size": size}}
    with pytest.raises(host.Refused) as refused:
        host.check_image_closure(manifest, lambda digest: docs[digest])
    return str(refused.value)


def test_the_image_closure_refusals() -> None:
    top, layer, config = ("sha256:" + c * 64 for c in "abc")
    doc = json.dumps({"config": {"digest": config, "size": 2}, "layers": [{"digest": layer, "size": 5}]}).encode()
    blobs = {top: (MANIFEST_TYPE, len(doc)), config: ("application/json", 2), layer: ("x/layer", 5)}
    assert _closure(blobs, {top: doc}, top, len(doc) + 1) == f"manifest.json: image {top} is not among the blobs"
    assert _closure(blobs, {top: b"{"}, top, len(doc)) == f"blob {top}: a {MANIFEST_TYPE} that is not JSON"
    assert _closure({**blobs, layer: ("x/layer", 6)}, {top: doc}, top, len(doc)) == (
        f"blob {top}: refers to {layer} (5 bytes), which the bundle does not list")
    assert _closure({top: (MANIFEST_TYPE, 2)}, {top: b"[]"}, top, 2) == f"blob {top}: not a JSON object"
    bad = json.dumps({"layers": [{"digest": layer}]}).encode()
    assert _closure({top: (MANIFEST_TYPE, len(bad))}, {top: bad}, top, len(bad)) == (
        f"blob {top}: a descriptor without a sha256 digest and size")
    extra1, extra2 = "sha256:" + "e" * 64, "sha256:" + "f" * 64
    assert _closure({**blobs, extra2: ("x", 1), extra1: ("x", 1)}, {top: doc}, top, len(doc)) == (
        f"manifest.json: blob {extra1} is not part of image {top}")
    twice = json.dumps({"layers": [{"digest": layer, "size": 5}, {"digest": layer, "size": 5}],
                        "config": {"digest": config, "size": 2}}).encode()
    host.check_image_closure({"blobs": [{"digest": top, "media_type": MANIFEST_TYPE, "size": len(twice)},
                                        {"digest": config, "media_type": "application/json", "size": 2},
                                        {"digest": layer, "media_type": "x/layer", "size": 5}],
                              "image": {"digest": top, "size": len(twice)}}, lambda digest: {top: twice}[digest])
