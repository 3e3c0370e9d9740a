"""pinmatrix.oci.layout as the one reader and manifest writer of a layout: documents read bounded and checked
against their digest before they are parsed, blobs never through a symlink, index entries found by name or
digest, and the image manifest a build writes (its bytes pinned)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from pinmatrix.oci import layout as oci_layout
from pinmatrix.oci.layer import LayerDescriptor
from pinmatrix.oci.layout import (
    MEDIA_TYPE_CONFIG,
    MEDIA_TYPE_MANIFEST,
    REF_NAME,
    LayoutError,
    OCILayout,
    canonical_json,
    checked_digest,
)


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(name: bytes) -> LayerDescriptor:
    return LayerDescriptor(digest=_digest(name), size=len(name), diff_id=_digest(name + b"-tar"),
                           media_type="application/vnd.oci.image.layer.v1.tar+zstd")


def test_a_document_is_parsed_only_when_it_matches_its_digest(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    digest = layout.put_blob(b'{"a": 1}')
    assert layout.read_document(digest, "manifest") == {"a": 1}
    layout.blob_path(digest).write_bytes(b'{"a": 2}')
    with pytest.raises(LayoutError) as err:
        layout.read_document(digest, "manifest")
    assert str(err.value) == f"{layout.root}: manifest {digest} does not match its digest (tampered or damaged)"


@pytest.mark.parametrize(("body", "line"), [
    (b"{not json", "is not JSON"),
    (b"\xff\xfe", "is not JSON"),
    (b"[1, 2]", "is not a JSON object"),
])
def test_a_document_that_is_no_json_object_is_one_line(tmp_path: Path, body: bytes, line: str) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    digest = layout.put_blob(body)
    with pytest.raises(LayoutError) as err:
        layout.read_document(digest, "config")
    assert str(err.value).startswith(f"{layout.root}: config {digest} {line}") and "\n" not in str(err.value)


def test_a_document_is_read_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    digest = layout.put_blob(canonical_json({"pad": "x" * 100}))
    monkeypatch.setattr(oci_layout, "MAX_DOCUMENT", 50)
    with pytest.raises(LayoutError, match=r"manifest sha256:[0-9a-f]{64} is larger than 50 bytes$"):
        layout.read_document(digest, "manifest")


def test_a_blob_is_never_read_through_a_symlink(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    outside = tmp_path / "outside.json"
    outside.write_bytes(b"{}")
    digest = _digest(b"{}")
    layout.blob_path(digest).symlink_to(outside)
    with pytest.raises(LayoutError) as err:
        layout.read_document(digest)
    assert str(err.value) == f"{layout.root}: blob {digest} is missing"
    with pytest.raises(LayoutError, match=r": not a sha256 digest: 'sha256:\.\./x'$"):
        layout.checked_blob("sha256:../x")
    assert layout.checked_blob(layout.put_blob(b"plain")) == layout.blob_path(_digest(b"plain"))


def test_checked_digest_names_where_a_bad_digest_was(tmp_path: Path) -> None:
    good = _digest(b"x")
    assert checked_digest(good, "here") == good
    for bad in (None, 7, "sha256:" + "A" * 64, "sha512:" + "a" * 64, good + "0"):
        with pytest.raises(LayoutError) as err:
            checked_digest(bad, "index.json entry 3")
        assert str(err.value) == f"index.json entry 3: not a sha256 digest: {str(bad)[:80]!r}"


def test_an_index_is_read_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    monkeypatch.setattr(oci_layout, "MAX_DOCUMENT", 10)
    with pytest.raises(LayoutError) as err:
        layout.entries()
    assert str(err.value) == f"{layout.root / 'index.json'}: not a readable OCI index (larger than 10 bytes)"


def test_index_entries_are_found_by_name_or_digest(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci")
    assert not layout.has_index() and layout.entries() == []
    layout.init()
    assert layout.has_index()
    config = layout.put_config({"architecture": "amd64"})
    first = layout.put_manifest("reg/a:1", config, [_layer(b"one")])
    index = json.loads((layout.root / "index.json").read_text())
    index["manifests"].insert(0, "not an object")
    (layout.root / "index.json").write_text(json.dumps(index))
    assert [e["digest"] for e in layout.entries()] == [first]
    assert layout.find("reg/a:1") == first and layout.find(first) == first
    assert layout.find("reg/b:1") is None and layout.find(_digest(b"other")) is None
    entry = layout.entry(first)
    assert entry is not None and entry["annotations"] == {REF_NAME: "reg/a:1"}
    assert layout.entry(_digest(b"other")) is None
    index["manifests"] = [{"digest": "sha256:../../etc", "annotations": {REF_NAME: "reg/evil:1"}}]
    (layout.root / "index.json").write_text(json.dumps(index))
    with pytest.raises(LayoutError, match=r"index\.json: not a sha256 digest: 'sha256:\.\./\.\./etc'$"):
        layout.find("reg/evil:1")


def test_the_manifest_a_build_writes_keeps_its_bytes(tmp_path: Path) -> None:
    """put_config + put_manifest give the bytes the build has always written (canonical JSON of the manifest
    with the config descriptor and each layer's ``as_oci``): the demo images' digests depend on them."""
    layout = OCILayout(tmp_path / "oci").init()
    config = layout.put_config({"os": "linux", "architecture": "arm64"})
    body = b'{"architecture":"arm64","os":"linux"}'
    assert config == {"mediaType": MEDIA_TYPE_CONFIG, "digest": _digest(body), "size": len(body)}
    assert layout.read_blob(config["digest"]) == body
    layers = [_layer(b"one"), _layer(b"two")]
    digest = layout.put_manifest("reg/a:1", config, layers, {"io.pinmatrix.inputs": "abc"})
    expected = (
        '{"config":{"digest":"%s","mediaType":"%s","size":%d},"layers":['
        '{"digest":"%s","mediaType":"application/vnd.oci.image.layer.v1.tar+zstd","size":3},'
        '{"digest":"%s","mediaType":"application/vnd.oci.image.layer.v1.tar+zstd","size":3}],'
        '"mediaType":"%s","schemaVersion":2}'
        % (config["digest"], MEDIA_TYPE_CONFIG, len(body), layers[0].digest, layers[1].digest, MEDIA_TYPE_MANIFEST)
    ).encode()
    assert layout.read_blob(digest) == expected and digest == _digest(expected)
    assert layout.entry(digest) == {"mediaType": MEDIA_TYPE_MANIFEST, "digest": digest, "size": len(expected),
                                    "annotations": {"io.pinmatrix.inputs": "abc", REF_NAME: "reg/a:1"}}
    assert layout.read_document(digest, "manifest")["layers"][1]["digest"] == layers[1].digest
