"""pinmatrix.oci.layout rule by rule: the layout's files, digests as blob names, blobs checked before reuse,
images named in index.json (replaced by name, kept sorted), what an image needs, and the oci-archive that
engines load (each blob once, the index naming each image for podman and docker)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from pinmatrix.oci import layout as oci_layout
from pinmatrix.oci.layout import (
    CONTAINERD_NAME,
    MEDIA_TYPE_INDEX,
    MEDIA_TYPE_MANIFEST,
    REF_NAME,
    LayoutError,
    OCILayout,
    StoredImage,
    canonical_json,
    remove_dead_temporaries,
)


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _image(layout: OCILayout, ref: str, layer: bytes = b"layer", **annotations: str) -> str:
    config = layout.put_blob(canonical_json({"config": {"Labels": {"ref": ref}}}))
    layer_digest = layout.put_blob(layer)
    manifest = {"schemaVersion": 2, "mediaType": MEDIA_TYPE_MANIFEST,
                "config": {"digest": config, "size": 1}, "layers": [{"digest": layer_digest, "size": len(layer)}]}
    return layout.put_image(ref, manifest, annotations or None)


def test_canonical_json_is_sorted_compact_and_utf8() -> None:
    assert canonical_json({"b": 1, "a": ["é", 2]}) == '{"a":["é",2],"b":1}'.encode()


def test_a_new_layout_has_its_marker_and_an_empty_index_and_keeps_them(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    assert json.loads((tmp_path / "oci" / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    assert json.loads((tmp_path / "oci" / "index.json").read_text()) == {
        "schemaVersion": 2, "mediaType": MEDIA_TYPE_INDEX, "manifests": []}
    assert layout.blobs == tmp_path / "oci" / "blobs" / "sha256" and layout.blobs.is_dir()
    _image(layout, "r:1")
    index = (tmp_path / "oci" / "index.json").read_bytes()
    (tmp_path / "oci" / "oci-layout").write_text("kept")
    OCILayout(tmp_path / "oci").init()
    assert (tmp_path / "oci" / "index.json").read_bytes() == index
    assert (tmp_path / "oci" / "oci-layout").read_text() == "kept"


@pytest.mark.parametrize("digest", ["sha512:" + "a" * 64, "sha256:" + "a" * 63, "sha256:" + "A" * 64, "sha256:" + "X" * 64,
                                    "sha256:" + "g" * 64, "sha256:../" + "a" * 61])
def test_a_blob_is_named_only_by_a_sha256_digest(tmp_path: Path, digest: str) -> None:
    with pytest.raises(LayoutError) as err:
        OCILayout(tmp_path).blob_path(digest)
    assert str(err.value) == f"not a sha256 digest: {digest!r}"


def test_blobs_are_stored_under_their_digest_and_read_back(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    digest = layout.put_blob(b"bytes")
    assert digest == _digest(b"bytes") and layout.blob_path(digest) == layout.blobs / digest[7:]
    assert layout.has_blob(digest) and layout.read_blob(digest) == b"bytes"
    assert layout.intact_blob(digest, size=5)
    missing = _digest(b"missing")
    assert not layout.has_blob(missing) and not layout.intact_blob(missing)
    with pytest.raises(LayoutError) as err:
        layout.read_blob(missing)
    assert str(err.value) == f"{tmp_path / 'oci'}: blob {missing} is missing"


def test_a_blob_is_hashed_once_per_process_and_a_wrong_size_removes_it(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    digest = layout.put_blob(b"x" * ((1 << 20) + 5))  # more than one read chunk
    assert OCILayout(tmp_path / "oci").intact_blob(digest, size=(1 << 20) + 5)
    assert layout.intact_blob(digest)
    layout.blob_path(digest).write_bytes(b"damaged after the check")
    assert layout.intact_blob(digest)  # remembered for this layout object
    assert not layout.intact_blob(digest, size=5)  # but a record of another size is refused all the same
    fresh = OCILayout(tmp_path / "oci")
    assert not fresh.intact_blob(digest) and not fresh.blob_path(digest).exists()
    other = fresh.put_blob(b"abc")
    assert not OCILayout(tmp_path / "oci").intact_blob(other, size=4)
    assert not fresh.blob_path(other).exists()


def test_put_blob_writes_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    layout.put_blob(b"once")
    monkeypatch.setattr(oci_layout, "atomic_write_bytes", lambda *a: pytest.fail("written again"))
    layout.put_blob(b"once")


def test_images_are_named_replaced_by_name_and_sorted(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    first = _image(layout, "reg/b:1", b"one", note="n")
    _image(layout, "reg/a:1", b"two")
    index = json.loads((tmp_path / "oci" / "index.json").read_text())
    assert [m["annotations"][REF_NAME] for m in index["manifests"]] == ["reg/a:1", "reg/b:1"]
    entry = index["manifests"][1]
    body = layout.read_blob(first)
    assert entry == {"mediaType": MEDIA_TYPE_MANIFEST, "digest": first, "size": len(body),
                     "annotations": {"note": "n", REF_NAME: "reg/b:1"}}
    assert (tmp_path / "oci" / "index.json").read_bytes() == canonical_json(index)
    second = _image(layout, "reg/b:1", b"three")
    refs = [(i.ref, i.digest) for i in layout.images()]
    assert refs == [("reg/a:1", refs[0][1]), ("reg/b:1", second)] and second != first
    image = layout.image("reg/b:1")
    assert isinstance(image, StoredImage) and image.annotations == {REF_NAME: "reg/b:1"}
    assert image.manifest == json.loads(layout.read_blob(second))
    assert layout.config(image) == {"config": {"Labels": {"ref": "reg/b:1"}}}
    assert layout.image("reg/c:1") is None


def test_index_entries_without_a_name_or_a_manifest_are_not_images(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    digest = _image(layout, "reg/a:1")
    index = json.loads((tmp_path / "oci" / "index.json").read_text())
    index["manifests"] = [{"digest": digest}, {"digest": digest, "annotations": {"other": "x"}},
                          {"digest": _digest(b"gone"), "annotations": {REF_NAME: "reg/gone:1"}}] + index["manifests"]
    (tmp_path / "oci" / "index.json").write_text(json.dumps(index))
    assert [i.ref for i in layout.images()] == ["reg/a:1"]
    _image(layout, "127.0.0.1:5000/z:1")  # entries without a name sort first, before any name, and are kept
    assert [m.get("annotations", {}).get(REF_NAME) for m in
            json.loads((tmp_path / "oci" / "index.json").read_text())["manifests"]] == [
        None, None, "127.0.0.1:5000/z:1", "reg/a:1", "reg/gone:1"]


@pytest.mark.parametrize(("text", "line"), [
    ("{not json", "not a readable OCI index"),
    ("[]", "not an OCI image index"),
    ('{"manifests": {}}', "not an OCI image index"),
])
def test_an_unreadable_index_is_one_line(tmp_path: Path, text: str, line: str) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    (tmp_path / "oci" / "index.json").write_text(text)
    with pytest.raises(LayoutError) as err:
        layout.images()
    assert str(err.value).startswith(f"{tmp_path / 'oci' / 'index.json'}: {line}")


def test_a_layout_without_an_index_has_no_images_and_gets_one(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci")
    assert layout.images() == []
    layout.blobs.mkdir(parents=True)
    _image(layout, "reg/a:1")
    assert [i.ref for i in OCILayout(tmp_path / "oci").images()] == ["reg/a:1"]


def test_what_an_image_needs_and_what_is_missing(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    digest = _image(layout, "reg/a:1", b"layer one")
    image = layout.image("reg/a:1")
    assert image is not None
    layer = _digest(b"layer one")
    assert layout.blobs_of(image) == [image.config_digest, layer, digest]
    assert layout.missing_blobs(image) == []
    layout.blob_path(layer).unlink()
    assert OCILayout(tmp_path / "oci").missing_blobs(image) == [layer]  # another process: checked afresh


def test_an_archive_holds_each_blob_once_and_names_each_image(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    _image(layout, "reg/a:1", b"shared layer")
    _image(layout, "reg/b:1", b"shared layer")
    images = layout.images()
    out = io.BytesIO()
    layout.write_archive(images, out)
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        names = tar.getnames()
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    assert names[:2] == ["oci-layout", "index.json"]
    blobs = [n for n in names if n.startswith("blobs/sha256/")]
    assert len(blobs) == len(set(blobs)) == 5  # two configs, one shared layer, two manifests
    for name in blobs:
        assert files[name] == layout.blob_path("sha256:" + name.rsplit("/", 1)[1]).read_bytes()
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(files["index.json"])
    assert index["mediaType"] == MEDIA_TYPE_INDEX and index["schemaVersion"] == 2
    assert index["manifests"] == [
        {"mediaType": MEDIA_TYPE_MANIFEST, "digest": i.digest, "size": layout.blob_path(i.digest).stat().st_size,
         "annotations": {REF_NAME: i.ref, CONTAINERD_NAME: i.ref}} for i in images]


def test_only_temporaries_of_dead_writers_are_removed(tmp_path: Path) -> None:
    dead, me = _dead_pid(), os.getpid()
    names = {
        f".layer-{dead}-ab12.tmp": True, f".index.json.{dead}.9f.tmp": True, f".x.whl.{dead}.part": True,
        f".layer-{me}-ab12.tmp": False, f".x.whl.{me}.part": False, f".x.whl.{os.getppid()}.part": False,
        f"layer-{dead}-ab12.tmp": False, f".layer-{dead}-XY.tmp": False, f".x.whl.{dead}.partial": False,
        "plain": False,
    }
    for name in names:
        (tmp_path / name).write_bytes(b"")
    (tmp_path / f".dir.{dead}.part").mkdir()
    removed = remove_dead_temporaries(tmp_path)
    assert sorted(p.name for p in removed) == sorted(n for n, gone in names.items() if gone)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [n for n, gone in names.items() if not gone] + [f".dir.{dead}.part"])
    assert remove_dead_temporaries(tmp_path / "absent") == []
