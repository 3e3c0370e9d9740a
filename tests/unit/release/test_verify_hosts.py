"""verify's rule 6 against a registry in memory: the host-signed results a promotion statement vouches for
(it names the host keys) must verify with those keys and be for the image's digest; each is reported; a
promotion naming host keys with no host attestation attached does not verify."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from memregistry import serve_registry
from promotion import CPU_CELL, record

from pinmatrix.imageref import ImageRef
from pinmatrix.registry.client import OCI_MANIFEST, Registry
from pinmatrix.release import attest
from pinmatrix.release.hostsign import host_key_descriptors, open_host_envelope, signed_exports
from pinmatrix.release.signing import generate_keypair, load_public_key, load_signer
from pinmatrix.release.verify import verify_image

REPO = "promoted/demo"


@pytest.fixture
def image(tmp_path: Path):  # noqa: ANN201
    with serve_registry() as reg:
        labels = {"io.pinmatrix.cell.id": CPU_CELL.id, "io.pinmatrix.cell.stack": CPU_CELL.stack,
                  "io.pinmatrix.cell.name": CPU_CELL.name, "io.pinmatrix.cell.python": CPU_CELL.python,
                  "io.pinmatrix.cell.platform": CPU_CELL.platform,
                  **{f"io.pinmatrix.pin.{k}": str(v) for k, v in CPU_CELL.pins.items()}}
        config = json.dumps({"config": {"Labels": labels}}).encode()
        manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                               "digest": reg.add_blob(REPO, config), "size": len(config)},
                    "layers": []}
        digest = reg.add_manifest(REPO, json.dumps(manifest).encode(), OCI_MANIFEST, "known-good")
        yield Registry(reg.address, allowed_token_hosts=()), ImageRef(reg.address, REPO, None, digest)


def _keys(tmp_path: Path, name: str):  # noqa: ANN202
    private, public, _ = generate_keypair(tmp_path / name)
    return load_signer(private), load_public_key(public)


def _promote(registry: Registry, image: ImageRef, tmp_path: Path, host_digest: str | None = None,
             envelope_of=None) -> tuple[object, str]:  # noqa: ANN001
    """Attach a host's envelope (for ``host_digest``, default the image's) and a project statement naming its
    key; returns (the project's public key, the host artifact's digest)."""
    project, project_pub = _keys(tmp_path, "project")
    host, host_pub = _keys(tmp_path, "host")
    records = [record(CPU_CELL, s, "pass", host_digest or image.digest) for s in CPU_CELL.smokes]
    envelope = json.dumps(signed_exports(records, host)[0]).encode()
    att = open_host_envelope(envelope, [host_pub], "e")
    artifact = attest.attach_envelope(registry, image, envelope_of(envelope) if envelope_of else envelope,
                                      attest.TEST_RESULT_PREDICATE)
    statement = attest.test_result_statement(image, CPU_CELL, [record(CPU_CELL, s, "pass", image.digest)
                                                               for s in CPU_CELL.smokes])
    statement["predicate"]["configuration"] += host_key_descriptors([att], [artifact])
    attest.attach(registry, image, statement, signer=project)
    return project_pub, artifact


def test_the_host_attestation_is_verified_and_reported(image, tmp_path: Path) -> None:  # noqa: ANN001
    registry, ref = image
    key, artifact = _promote(registry, ref, tmp_path)
    out = verify_image(registry, ref.with_tag("known-good"), [key])
    assert out.ok, out.problems
    (host,) = out.hosts
    assert host.attestation == artifact and host.cell_id == CPU_CELL.id and host.host["gpu_name"] == "NVIDIA H200"
    assert host.smokes == [(s, "pass") for s in sorted(CPU_CELL.smokes)]


def test_a_host_attestation_for_another_digest_is_refused(image, tmp_path: Path) -> None:  # noqa: ANN001
    registry, ref = image
    other = "sha256:" + "e" * 64
    key, artifact = _promote(registry, ref, tmp_path, host_digest=other)
    out = verify_image(registry, ref, [key])
    assert not out.ok and out.hosts == []
    assert out.problems[0] == f"host-signed attestation {artifact} is for {other}, not {ref.digest}"


def test_an_edited_host_attestation_is_refused(image, tmp_path: Path) -> None:  # noqa: ANN001
    registry, ref = image

    def edited(envelope: bytes) -> bytes:
        doc = json.loads(envelope)
        doc["payload"] = doc["payload"][:-8] + ("A" * 8 if not doc["payload"].endswith("A" * 8) else "B" * 8)
        return json.dumps(doc).encode()

    key, artifact = _promote(registry, ref, tmp_path, envelope_of=edited)
    out = verify_image(registry, ref, [key])
    assert not out.ok and out.problems[0].startswith(f"host-signed attestation {artifact}: ")
    assert out.problems[-1].endswith("no host-signed attestation attached to it verifies with the host keys it names")
