"""The unpacker's reading of an image (oci/unpack.py): which manifests and layer descriptors it takes, the one line
each refusal is, and the life of a root folder (made once under its digest, reused, replaced when incomplete, a
killed unpack's staging folder removed by the next run)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hostile_images import add_image, layer, member

from pinmatrix.oci.unpack import COMPLETE, RootfsError, image_digest, root_dir, unpack_image

TAR = "application/vnd.oci.image.layer.v1.tar"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _blob(layout: Path, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256" / digest[7:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest


def _plain_tar(*names: str) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(name), 1735689600
            tar.addfile(info, io.BytesIO(name.encode()))
    return raw.getvalue()


def _image(layout: Path, manifest: dict[str, Any]) -> str:
    """``manifest`` stored as it is (its config a plain config unless it names one) and listed in index.json."""
    if "config" not in manifest:
        manifest = {"config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                               "digest": _blob(layout, b'{"architecture": "amd64", "os": "linux"}'), "size": 40},
                    **manifest}
    digest = _blob(layout, json.dumps(manifest).encode())
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": MANIFEST, "digest": digest, "size": 1, "annotations": {
            "org.opencontainers.image.ref.name": "t:custom"}}]}))
    return digest


def _refusal(layout: Path, digest: str, roots: Path) -> str:
    with pytest.raises(RootfsError) as err:
        unpack_image(layout, digest, roots)
    return str(err.value)


def test_a_manifest_without_a_media_type_is_read_and_one_of_another_type_is_refused_naming_it(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    tar = _plain_tar("f")
    plain = _image(layout, {"schemaVersion": 2, "layers": [{"mediaType": TAR, "digest": _blob(layout, tar),
                                                            "size": len(tar)}]})
    assert (unpack_image(layout, plain, tmp_path / "roots").path / "f").read_bytes() == b"f"
    odd = "application/vnd.example." + "x" * 100
    other = _image(layout, {"schemaVersion": 2, "mediaType": odd, "layers": []})
    assert _refusal(layout, other, tmp_path / "roots") == (
        f"{layout}: manifest {other} has media type {odd[:80]!r}, not an image manifest")


def test_an_index_is_refused_asking_for_one_platforms_manifest(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    index = _image(layout, {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                            "manifests": []})
    assert _refusal(layout, index, tmp_path / "roots") == (
        f"{layout}: {index} is an image index: name one platform's manifest digest")


@pytest.mark.parametrize("manifest", [{"schemaVersion": 2, "config": {}}, {"schemaVersion": 2, "layers": [],
                                                                           "config": "sha256:0"}])
def test_a_manifest_without_config_or_layers_is_one_line(tmp_path: Path, manifest: dict[str, Any]) -> None:
    layout = tmp_path / "oci"
    digest = _image(layout, manifest)
    assert _refusal(layout, digest, tmp_path / "roots") == f"{layout}: manifest {digest} has no config or layers"


def test_at_most_512_layers(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    tar = _plain_tar("f")
    one = {"mediaType": TAR, "digest": _blob(layout, tar), "size": len(tar)}
    full = _image(layout, {"schemaVersion": 2, "layers": [one] * 512})
    assert (unpack_image(layout, full, tmp_path / "roots").path / "f").is_file()
    over = _image(layout, {"schemaVersion": 2, "layers": [one] * 513})
    assert _refusal(layout, over, tmp_path / "roots") == f"{layout}: manifest {over} has 513 layers (at most 512)"


def test_the_config_and_the_layer_descriptors_are_named_in_their_refusals(tmp_path: Path) -> None:
    layout, roots = tmp_path / "oci", tmp_path / "roots"
    listed = _blob(layout, b"[1]")
    config = {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": listed, "size": 3}
    digest = _image(layout, {"schemaVersion": 2, "config": config, "layers": []})
    assert _refusal(layout, digest, roots) == f"{layout}: config {listed} is not a JSON object"
    digest = _image(layout, {"schemaVersion": 2, "config": {**config, "digest": "sha256:no"}, "layers": []})
    assert _refusal(layout, digest, roots) == f"manifest {digest} config: not a sha256 digest: 'sha256:no'"
    digest = _image(layout, {"schemaVersion": 2, "layers": ["sha256:ab"]})
    assert _refusal(layout, digest, roots) == f"{layout}: manifest {digest} layer 0 is not a descriptor"
    tar = _plain_tar("f")
    good = {"mediaType": TAR, "digest": _blob(layout, tar), "size": len(tar)}
    digest = _image(layout, {"schemaVersion": 2, "layers": [good, {**good, "digest": "md5:1"}]})
    assert _refusal(layout, digest, roots) == f"manifest {digest} layer 1: not a sha256 digest: 'md5:1'"
    for size in (-1, "12", None, True):
        digest = _image(layout, {"schemaVersion": 2, "layers": [{**good, "size": size}]})
        assert _refusal(layout, digest, roots) == f"{layout}: layer {good['digest']} has no valid size"
    odd = "application/vnd.example.layer." + "y" * 100
    digest = _image(layout, {"schemaVersion": 2, "layers": [{**good, "mediaType": odd}]})
    assert _refusal(layout, digest, roots) == (
        f"{layout}: layer {good['digest']} has media type {odd[:80]!r}, not a tar layer")


def test_an_empty_layer_blob_has_a_valid_size_and_is_no_tar(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    empty = _blob(layout, b"")
    digest = _image(layout, {"schemaVersion": 2, "layers": [{"mediaType": TAR, "digest": empty, "size": 0}]})
    assert _refusal(layout, digest, tmp_path / "roots").startswith(f"layer {empty}: not a readable tar (")


def test_a_bad_image_digest_is_named_as_the_image(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    add_image(layout, "t:one", [layer([member("f")])])
    assert _refusal(layout, "sha256:xyz", tmp_path / "roots") == "image: not a sha256 digest: 'sha256:xyz'"
    with pytest.raises(RootfsError, match="^image: not a sha256 digest: 'latest'$"):
        root_dir(tmp_path / "roots", "latest")
    hexdigest = "ab" * 32
    assert root_dir(tmp_path / "roots", "sha256:" + hexdigest) == tmp_path / "roots" / hexdigest


def test_image_digest_finds_a_reference_or_a_listed_digest(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    digest = add_image(layout, "t:one", [layer([member("f")])])
    assert image_digest(layout, "t:one") == digest
    assert image_digest(layout, digest) == digest
    assert image_digest(layout, "t:two") is None
    with pytest.raises(RootfsError, match="not an OCI image layout"):
        image_digest(tmp_path / "nowhere", "t:one")


def test_a_root_is_made_once_under_its_digest_with_its_record_and_reused(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    layers = [layer([member("a", data=b"1")]), layer([member("b", data=b"2")])]
    digest = add_image(layout, "t:two", layers, config={"User": "nobody"})
    roots = tmp_path / "deep" / "er" / "roots"  # made with its parents
    lines: list[str] = []
    made = unpack_image(layout, digest, roots, echo=lines.append)
    layer_digests = ["sha256:" + hashlib.sha256(data).hexdigest() for data in layers]
    assert lines == [f"  unpack layer {n}/2 {d[:19]} ({len(data)} bytes, gzip)"
                     for n, (d, data) in enumerate(zip(layer_digests, layers, strict=True), 1)]
    assert (made.digest, made.path, made.user, made.reused) == (digest, roots / digest[7:] / "rootfs", "nobody", False)
    assert sorted(p.name for p in roots.iterdir()) == sorted([digest[7:], f".{digest[7:]}.lock"])
    assert stat.S_IMODE(os.stat(made.path).st_mode) == 0o755
    record = {"layers": layer_digests, "manifest": digest, "owners": os.geteuid() == 0}
    assert (roots / digest[7:] / COMPLETE).read_text() == json.dumps(record, indent=1, sort_keys=True) + "\n"
    again = unpack_image(layout, digest, roots, echo=lines.append)
    assert (again.digest, again.path, again.config, again.reused) == (digest, made.path, made.config, True)
    assert len(lines) == 2


@pytest.mark.parametrize("record", ["[]", '{"manifest": "sha256:' + "0" * 64 + '"}', "{not json"])
def test_a_root_whose_record_names_another_manifest_or_none_is_made_again(tmp_path: Path, record: str) -> None:
    layout, roots = tmp_path / "oci", tmp_path / "roots"
    digest = add_image(layout, "t:one", [layer([member("f", data=b"new")])])
    final = roots / digest[7:]
    (final / "rootfs").mkdir(parents=True)
    (final / "rootfs" / "left").write_text("from before")
    (final / COMPLETE).write_text(record)
    made = unpack_image(layout, digest, roots)
    assert not made.reused and sorted(os.listdir(made.path)) == ["f"]


def test_a_killed_unpacks_staging_folder_is_removed_by_the_next_run(tmp_path: Path) -> None:
    """An unpack killed with -9 leaves its ``.tmp-<hex>-*`` folder (read-only folders inside); the next run of
    the same image removes it and leaves only the root and its lock."""
    import pinmatrix.oci.unpack as unpack

    layout, roots = tmp_path / "oci", tmp_path / "roots"
    digest = add_image(layout, "t:one", [layer([member("ro", "dir", mode=0o500), member("ro/f", data=b"x")]),
                                         layer([member("g", data=b"y")])])
    pid = os.fork()
    if pid == 0:  # the unpack, killed in its second layer
        try:
            real = unpack.apply_layer

            def killed(root: Path, blob: Path, d: str, *args: Any, **kwargs: Any) -> int:
                if (root / "ro").exists():
                    os.chmod(root / "ro", 0o500)
                    os.kill(os.getpid(), 9)
                return real(root, blob, d, *args, **kwargs)

            unpack.apply_layer = killed  # type: ignore[assignment]
            unpack_image(layout, digest, roots)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9
    (staging,) = [p.name for p in roots.iterdir() if p.name.startswith(".tmp-")]
    assert staging.startswith(f".tmp-{digest[7:]}-")
    made = unpack_image(layout, digest, roots)
    assert sorted(os.listdir(made.path)) == ["g", "ro"]
    assert sorted(p.name for p in roots.iterdir()) == sorted([digest[7:], f".{digest[7:]}.lock"])


def test_a_partly_made_root_is_removed_whatever_its_modes_without_following_a_link(tmp_path: Path) -> None:
    """As a user without root's overrides (a fork that drops to nobody): folders of mode 000 and 500 go, a
    link inside to a folder elsewhere is removed, never followed (its target keeps its mode)."""
    from pinmatrix.oci.unpack import force_remove

    base = Path(tempfile.mkdtemp(prefix="pm-force-remove-"))
    try:
        os.chown(base, 65534, 65534)
        pid = os.fork()
        if pid == 0:
            code = 2
            try:
                os.setgid(65534)
                os.setuid(65534)
                outside, victim = base / "outside", base / "victim"
                (victim / "a" / "b").mkdir(parents=True)
                outside.mkdir()
                for name in ("f", "a/g", "a/b/h"):
                    (victim / name).write_text(name)
                (victim / "ln").symlink_to(outside)
                for name, mode in (("a/b", 0o500), ("a", 0o000), ("", 0o500)):
                    os.chmod(victim / name, mode)
                os.chmod(outside, 0o500)
                force_remove(victim)
                code = 0 if not os.path.lexists(victim) and stat.S_IMODE(os.stat(outside).st_mode) == 0o500 else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        shutil.rmtree(base)
    folder = tmp_path / "folder"
    folder.mkdir()
    (tmp_path / "link").symlink_to(folder)
    (tmp_path / "file").write_text("x")
    for name in ("link", "file", "missing"):
        force_remove(tmp_path / name)
    assert sorted(os.listdir(tmp_path)) == ["folder"]
