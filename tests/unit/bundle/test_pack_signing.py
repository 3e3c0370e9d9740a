"""Signed bundles: `pinmatrix bundle --signing-key` writes manifest.dsse.json (the DSSE envelope of promotion
evidence over an in-toto statement naming manifest.json by sha256, the cell, the lock's sha256, the image digest and
the unpack script's sha256) and prints the digests to compare out of band; `pinmatrix unbundle --key` verifies it and
unpacks with pinmatrix's own unpack script. Refused, in one line and with DEST untouched: a forged bundle that is
consistent in itself (it passes the stdlib unpacker alone, not with --manifest-sha256), a bundle signed by a key
that is not trusted, an unsigned bundle; a replaced unpacker is told by its digest and never run."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

import pytest
from test_pack import (  # noqa: F401 - the fixtures
    Project,
    _rewrite_stream,
    images,
    make_wheels_bundle,
    project,
    quiet,
    refusal,
    unbundle,
)

from pinmatrix.bundle.image import ImageRequest, bundle_image
from pinmatrix.bundle.model import BundleError
from pinmatrix.bundle.sign import SIGNATURE_NAME, verify_bundle
from pinmatrix.bundle.wheels import WheelsRequest, bundle_wheels
from pinmatrix.cli import main
from pinmatrix.index.wheel_index import WheelFetcher
from pinmatrix.release.signing import generate_keypair, load_public_key, load_signer


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    own, own_pub, _ = generate_keypair(tmp_path / "keys" / "project")
    _, other_pub, _ = generate_keypair(tmp_path / "keys" / "other")
    return {"key": own, "pub": own_pub, "other": other_pub}


def signed_wheels(project: Project, out: Path, key: Path) -> None:  # noqa: F811
    request = WheelsRequest(cell=project.cell, lock_text=project.lock, lock_source="locks/x.txt", python="3.12",
                            platform=None, host=None, exclude=("nvidia-*",), part_size=4096, out=out,
                            cache_dir=project.cache, signer=load_signer(key))
    bundle_wheels(request, WheelFetcher(project.cache / "wheels"), quiet)


def statement(bundle: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(base64.b64decode(json.loads((bundle / SIGNATURE_NAME).read_text())["payload"]))


def test_a_signed_wheels_bundle_names_its_cell_lock_and_manifest(project: Project, keys, tmp_path: Path) -> None:  # noqa: ANN001, F811
    signed_wheels(project, tmp_path / "b", keys["key"])
    said = statement(tmp_path / "b")
    body = (tmp_path / "b" / "manifest.json").read_bytes()
    assert said["subject"] == [{"name": "manifest.json", "digest": {"sha256": hashlib.sha256(body).hexdigest()}}]
    assert said["predicateType"] == "https://pinmatrix.dev/bundle/v1"
    assert said["predicate"]["cell_id"] == project.cell.id and said["predicate"]["kind"] == "wheels"
    assert said["predicate"]["lock_sha256"] == hashlib.sha256(project.lock.encode()).hexdigest()
    assert said["predicate"]["unbundle_sha256"] == hashlib.sha256((tmp_path / "b" / "unbundle.py").read_bytes()).hexdigest()
    verified = verify_bundle(tmp_path / "b", [load_public_key(keys["pub"])])
    assert verified.manifest.cell_id == project.cell.id

    assert main(["unbundle", str(tmp_path / "b"), "--key", str(keys["pub"]), "--out", str(tmp_path / "dest"),
                 "--quiet"]) == 0
    assert sorted(p.name for p in (tmp_path / "dest").iterdir()) == sorted(
        w for w in project.wheels if not w.startswith(("nvidia", "fast-1.0-cp313")))


def _forge(bundle: Path, project: Project) -> None:  # noqa: F811
    """Another beta wheel, with the lock, the manifest and the parts made to agree with it."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    beta = next(w for w in manifest["wheels"] if w["name"] == "beta")
    old = project.wheels[beta["filename"]]
    new = old.replace(b"VERSION = '2.0'", b"VERSION = '6.6'")
    assert len(new) == len(old) and new != old

    def swap(stream: bytes, _: dict) -> bytes:  # type: ignore[type-arg]
        return stream[:beta["offset"]] + new + stream[beta["offset"] + len(old):]

    _rewrite_stream(bundle, swap)
    lock = (bundle / "lock.txt").read_text().replace(hashlib.sha256(old).hexdigest(), hashlib.sha256(new).hexdigest())
    (bundle / "lock.txt").write_text(lock)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["lock_sha256"] = hashlib.sha256(lock.encode()).hexdigest()
    next(w for w in manifest["wheels"] if w["name"] == "beta")["sha256"] = hashlib.sha256(new).hexdigest()
    (bundle / "manifest.json").write_text(json.dumps(manifest))


def test_a_forged_self_consistent_bundle_is_refused(project: Project, keys, tmp_path: Path, capsys) -> None:  # noqa: ANN001, F811
    bundle = tmp_path / "b"
    signed_wheels(project, bundle, keys["key"])
    signed = hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    _forge(bundle, project)
    # the stdlib unpacker alone cannot tell: every part, file and the lock agree with the (forged) manifest
    assert unbundle(bundle, "--check").returncode == 0
    line = refusal(unbundle(bundle, "--manifest-sha256", signed, "--out", str(tmp_path / "d1")))
    assert line.endswith(f"is not the {signed} the bundle was made with: another manifest")
    assert main(["unbundle", str(bundle), "--key", str(keys["pub"]), "--out", str(tmp_path / "d2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(r"manifest\.json: sha256 [0-9a-f]{64} is not the signed [0-9a-f]{64}: another "
                                       "manifest$", err[0]), err
    assert not (tmp_path / "d1").exists() and not (tmp_path / "d2").exists()


def test_a_bundle_signed_by_an_untrusted_key_or_unsigned_is_refused(project: Project, keys, tmp_path: Path,  # noqa: ANN001, F811
                                                                    capsys) -> None:  # noqa: ANN001
    signed_wheels(project, tmp_path / "b", keys["key"])
    assert main(["unbundle", str(tmp_path / "b"), "--key", str(keys["other"]), "--out", str(tmp_path / "d")]) == 2
    assert "manifest.dsse.json: signed only by untrusted key(s) " in capsys.readouterr().err
    make_wheels_bundle(project, tmp_path / "u")
    assert not (tmp_path / "u" / SIGNATURE_NAME).exists()
    with pytest.raises(BundleError, match=r"manifest\.dsse\.json: missing: the bundle is not signed"):
        verify_bundle(tmp_path / "u", [load_public_key(keys["pub"])])
    with pytest.raises(BundleError, match="no trusted key"):
        verify_bundle(tmp_path / "b", [])
    assert not (tmp_path / "d").exists()


def test_a_statement_naming_another_cell_than_the_manifest_is_refused(project: Project, keys,  # noqa: ANN001, F811
                                                                       tmp_path: Path) -> None:
    from pinmatrix.bundle.model import BundleManifest
    from pinmatrix.bundle.sign import sign_bundle

    signed_wheels(project, tmp_path / "b", keys["key"])
    body = (tmp_path / "b" / "manifest.json").read_bytes()
    lied = BundleManifest.model_validate_json(body).model_copy(update={"cell_id": "fedcba987654"})
    (tmp_path / "b" / SIGNATURE_NAME).write_bytes(sign_bundle(body, lied, "0" * 64, load_signer(keys["key"])))
    with pytest.raises(BundleError, match=f"the signed cell_id 'fedcba987654' is not the manifest's '{project.cell.id}'"):
        verify_bundle(tmp_path / "b", [load_public_key(keys["pub"])])


def test_bundle_prints_the_digests_and_a_replaced_unpacker_is_told_and_never_run(images, keys, tmp_path: Path,  # noqa: ANN001, F811
                                                                                 capsys) -> None:  # noqa: ANN001
    layout, made = images
    plain, _ = made["plain"]
    out = tmp_path / "b"
    assert main(["bundle", "image", "--layout", str(layout.root), "--digest", plain, "--part-size", "10KB",
                 "--out", str(out), "--signing-key", str(keys["key"]), "--quiet"]) == 0
    printed = dict(re.findall(r"^sha256 (\S+): ([0-9a-f]{64})$", capsys.readouterr().out, re.M))
    assert set(printed) == {"manifest.json", "unbundle.py", SIGNATURE_NAME}
    assert printed["unbundle.py"] == hashlib.sha256((out / "unbundle.py").read_bytes()).hexdigest()
    assert statement(out)["predicate"]["image_digest"] == plain
    marker = tmp_path / "ran"
    (out / "unbundle.py").write_text(f"open({str(marker)!r}, 'w').write('x')\nprint('wheels bundle checked')\n")
    assert hashlib.sha256((out / "unbundle.py").read_bytes()).hexdigest() != printed["unbundle.py"]  # told
    assert main(["unbundle", str(out), "--key", str(keys["pub"]), "--out", str(tmp_path / "host"), "--quiet"]) == 0
    assert not marker.exists()  # pinmatrix ran its own copy
    assert (tmp_path / "host" / "index.json").is_file()


def test_an_image_bundle_names_the_cell_and_lock_its_config_labels(keys, tmp_path: Path) -> None:  # noqa: ANN001
    from pinmatrix.oci.layout import MEDIA_TYPE_CONFIG, OCILayout

    layout = OCILayout(tmp_path / "oci").init()
    layer = layout.put_blob(b"layer")
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []},
                         "config": {"Labels": {"io.pinmatrix.cell.id": "0123456789ab",
                                               "io.pinmatrix.lock.sha256": "c" * 64}}}).encode()
    digest = layout.put_image("reg/x:1", {
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": MEDIA_TYPE_CONFIG, "digest": layout.put_blob(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": 5}]})
    manifest = bundle_image(ImageRequest(layout.root, digest, frozenset(), 5000, tmp_path / "b",
                                         signer=load_signer(keys["key"])), quiet)
    assert (manifest.cell_id, manifest.lock_sha256) == ("0123456789ab", "c" * 64)
    predicate = statement(tmp_path / "b")["predicate"]
    assert (predicate["cell_id"], predicate["lock_sha256"], predicate["image_digest"]) == ("0123456789ab", "c" * 64,
                                                                                          digest)
    assert unbundle(tmp_path / "b", "--check").returncode == 0  # the stdlib check takes the lock field on images


def test_the_envelope_is_canonical_in_toto_and_the_digests_name_only_what_is_there(project: Project, keys,  # noqa: ANN001, F811
                                                                                  tmp_path: Path) -> None:
    signed_wheels(project, tmp_path / "b", keys["key"])
    text = (tmp_path / "b" / SIGNATURE_NAME).read_text()
    envelope = json.loads(text)
    assert text == json.dumps(envelope, indent=1, sort_keys=True) + "\n"
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    payload = base64.b64decode(envelope["payload"])
    said = json.loads(payload)
    assert payload == json.dumps(said, sort_keys=True, separators=(",", ":")).encode()
    assert said["_type"] == "https://in-toto.io/Statement/v1"
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert said["predicate"]["pinmatrix_version"] == manifest["pinmatrix_version"]
    verified = verify_bundle(tmp_path / "b", [load_public_key(keys["pub"])])
    assert verified.predicate == said["predicate"] and verified.signer.keyid == load_public_key(keys["pub"]).keyid

    from pinmatrix.bundle.sign import bundle_digests

    assert set(bundle_digests(tmp_path / "b")) == {"manifest.json", "unbundle.py", SIGNATURE_NAME}
    make_wheels_bundle(project, tmp_path / "u")
    assert set(bundle_digests(tmp_path / "u")) == {"manifest.json", "unbundle.py"}


def _resign(bundle: Path, key: Path, statement_doc: object) -> None:
    from securesystemslib.dsse import Envelope

    envelope = Envelope(payload=json.dumps(statement_doc).encode(), payload_type="application/vnd.in-toto+json",
                        signatures={})
    envelope.sign(load_signer(key))
    (bundle / SIGNATURE_NAME).write_text(json.dumps(envelope.to_dict()))


def test_a_statement_of_another_kind_or_a_signed_manifest_that_is_no_manifest_is_one_line(  # noqa: F811
        project: Project, keys, tmp_path: Path) -> None:  # noqa: ANN001, F811
    bundle = tmp_path / "b"
    signed_wheels(project, bundle, keys["key"])
    said = statement(bundle)
    trusted = [load_public_key(keys["pub"])]
    with pytest.raises(BundleError) as err:
        verify_bundle(bundle, [])
    assert str(err.value) == "no trusted key: pass --key PUB (the public half of the key the bundle was signed with)"
    _resign(bundle, keys["key"], {**said, "predicateType": "https://in-toto.io/attestation/test-result/v0.1"})
    with pytest.raises(BundleError) as err:
        verify_bundle(bundle, trusted)
    assert str(err.value) == f"{bundle / SIGNATURE_NAME}: not a pinmatrix bundle statement: another predicate type"
    _resign(bundle, keys["key"], {**said, "predicate": "a string"})
    with pytest.raises(BundleError, match="not a pinmatrix bundle statement: another predicate type$"):
        verify_bundle(bundle, trusted)
    _resign(bundle, keys["key"], {"subject": []})
    with pytest.raises(BundleError, match="not a pinmatrix bundle statement: list index out of range$"):
        verify_bundle(bundle, trusted)
    garbage = b'{"format": "pinmatrix-bundle"}\n'
    (bundle / "manifest.json").write_bytes(garbage)
    import hashlib as _hashlib

    said["subject"][0]["digest"]["sha256"] = _hashlib.sha256(garbage).hexdigest()
    _resign(bundle, keys["key"], said)
    with pytest.raises(BundleError) as err:
        verify_bundle(bundle, trusted)
    assert str(err.value) == f"{bundle / 'manifest.json'}: not a bundle manifest: 5 validation errors for BundleManifest"


def test_bundle_files_are_read_bounded_and_never_through_a_link_or_a_fifo(tmp_path: Path) -> None:
    import os
    import threading

    from pinmatrix.bundle.sign import read_bundle_file

    path = tmp_path / "manifest.json"
    path.write_bytes(b"0123456789")
    assert read_bundle_file(path, 10) == b"0123456789"  # exactly the bound
    with pytest.raises(BundleError) as err:
        read_bundle_file(path, 9)
    assert str(err.value) == f"{path}: larger than 9 bytes: refused"
    (tmp_path / "link.json").symlink_to(path)
    with pytest.raises(BundleError) as err:
        read_bundle_file(tmp_path / "link.json", 10)
    assert str(err.value) == f"{tmp_path / 'link.json'}: cannot read: Too many levels of symbolic links"
    os.mkfifo(tmp_path / "fifo.json")
    got: list[object] = []

    def read() -> None:
        try:
            got.append(read_bundle_file(tmp_path / "fifo.json", 10))
        except BundleError as exc:
            got.append(exc)

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():
        os.close(os.open(tmp_path / "fifo.json", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("a FIFO was waited on")
    assert [str(g) for g in got] == [f"{tmp_path / 'fifo.json'}: not a regular file (a FIFO, device or folder): refused"]
