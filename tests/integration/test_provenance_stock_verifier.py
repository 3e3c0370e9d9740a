"""The SLSA provenance `pinmatrix promote` attaches to a promoted demo image is accepted by stock code, none of it
pinmatrix's: the artifact is found over plain HTTP (the registry's referrers tag, its manifest, its layer), the
DSSE envelope is verified by securesystemslib with the project's public key, the statement is parsed strictly and
validated by the in-toto attestation framework's own bindings (``in_toto_attestation.v1``), and its predicate by
the SLSA provenance v1 protobuf model of the same package (an unknown field is an error). The image is a demo
cell's, its manifest written by pinmatrix's layout writer with the annotations a build gives it (source, revision,
created, the cell's pins) and a config whose history names its base layer. An edited provenance (a dependency's
digest changed, the signature kept) fails the stock verifier, and ``pinmatrix verify`` refuses it too."""

from __future__ import annotations

import base64
import copy
import gzip
import hashlib
import io
import json
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from evidence import CPU, Promoted, _lock_text, _one_line_error, _replace_referrer
from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1 import resource_descriptor_pb2, statement_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import Statement
from oci_layout import cell_labels, skopeo_push
from promotion import _matrix_for, oci_registry, record  # noqa: F401 - the fixture
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey

from conftest import require_binaries
from pinmatrix.cli import main
from pinmatrix.image.annotations import ImageOrigin, image_annotations
from pinmatrix.imageref import ImageRef
from pinmatrix.oci.config import image_config
from pinmatrix.oci.layer import LayerDescriptor
from pinmatrix.oci.layout import OCILayout
from pinmatrix.registry.client import Registry
from pinmatrix.results.store import ResultsStore

SLSA = "https://slsa.dev/provenance/v1"
SOURCE = "https://forge.example/team/pinmatrix.git"
REVISION = "89abcdef0123456789abcdef0123456789abcdef"
EPOCH = 1_764_000_000


def _get(url: str, accept: str = "application/vnd.oci.image.index.v1+json, "
                                  "application/vnd.oci.image.manifest.v1+json") -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": accept}), timeout=30) as resp:
        return bytes(resp.read())


def _demo_image(layout_dir: Path, cell: Any, lock: str) -> Path:
    """The demo cell's image in an OCI layout: a base layer and a layer of the cell's own, a config with the
    cell's labels and one history entry per layer, a manifest with a build's annotations."""
    layout = OCILayout(layout_dir).init()
    layers = []
    for name in ("etc/os-release", "opt/venv/pyvenv.cfg"):
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w") as tar:
            info = tarfile.TarInfo(name)
            info.size = 3
            tar.addfile(info, io.BytesIO(b"x=1"))
        blob = gzip.compress(raw.getvalue(), mtime=0)
        layers.append(LayerDescriptor(layout.put_blob(blob), len(blob),
                                      "sha256:" + hashlib.sha256(raw.getvalue()).hexdigest(),
                                      "application/vnd.oci.image.layer.v1.tar+gzip"))
    labels = {**cell_labels(cell), "io.pinmatrix.lock.sha256": hashlib.sha256(lock.encode()).hexdigest(),
              "org.opencontainers.image.base.name": "debian:trixie"}
    config = image_config(platform=cell.platform, env={}, labels=labels, diff_ids=[d.diff_id for d in layers],
                          history=["base debian:trixie", "venv"], epoch=EPOCH, cmd=["/bin/true"])
    layout.put_manifest("latest", layout.put_config(config), layers,
                        manifest_annotations=image_annotations(cell, ImageOrigin(SOURCE, REVISION, None), EPOCH))
    return layout_dir


def _provenance_envelope(host: str, repository: str, digest: str) -> tuple[str, dict[str, Any]]:
    """(artifact digest, DSSE envelope) of the image's SLSA provenance, read over plain HTTP: the referrers tag
    schema's index under sha256-<hex>, each artifact's manifest, the envelope layer."""
    base = f"http://{host}/v2/{repository}"
    index = json.loads(_get(f"{base}/manifests/sha256-{digest.split(':', 1)[1]}"))
    found = [m for m in index["manifests"] if m.get("annotations", {}).get("in-toto.io/predicate-type") == SLSA]
    assert len(found) == 1, index
    artifact = json.loads(_get(f"{base}/manifests/{found[0]['digest']}"))
    assert artifact["subject"]["digest"] == digest and artifact["artifactType"] == "application/vnd.dsse.envelope.v1+json"
    layer = artifact["layers"][0]
    body = _get(f"{base}/blobs/{layer['digest']}", accept="*/*")
    assert "sha256:" + hashlib.sha256(body).hexdigest() == layer["digest"]
    return found[0]["digest"], json.loads(body)


def stock_verify(envelope: dict[str, Any], public_pem: bytes) -> dict[str, Any]:
    """The provenance statement, once securesystemslib verified its DSSE signature with the key and the in-toto
    bindings accepted it; raises otherwise."""
    key = SSlibKey.from_crypto(serialization.load_pem_public_key(public_pem))  # type: ignore[arg-type]
    dsse = Envelope.from_dict(copy.deepcopy(envelope))  # from_dict rewrites the signatures it is given
    assert dsse.payload_type == "application/vnd.in-toto+json"
    dsse.verify([key], 1)
    statement: dict[str, Any] = json.loads(dsse.payload)
    Statement.copy_from_pb(json_format.ParseDict(statement, statement_pb2.Statement())).validate()
    assert statement["predicateType"] == SLSA
    json_format.ParseDict(statement["predicate"], provenance_pb2.Provenance())  # strict: no unknown field
    for dep in statement["predicate"]["buildDefinition"]["resolvedDependencies"]:
        ResourceDescriptor.copy_from_pb(json_format.ParseDict(dep, resource_descriptor_pb2.ResourceDescriptor())
                                        ).validate()
    return statement


@pytest.mark.registry
def test_a_stock_verifier_accepts_the_provenance_of_a_promoted_demo_image(oci_registry: str,  # noqa: F811
                                                                          tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from pinmatrix.matrix.selection import load

    require_binaries("skopeo")
    prefix = f"{oci_registry}/slsa"
    matrix = _matrix_for(tmp_path, prefix)
    _, expansion = load(matrix)
    cell = next(c for c in expansion.cells if c.stack == "demo")
    lock = _lock_text(cell)
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / f"{cell.id}.txt").write_text(lock)
    digest = skopeo_push(_demo_image(tmp_path / "layout", cell, lock), f"{prefix}/demo:{cell.id}")
    assert main(["keygen", "--out", str(tmp_path / "keys" / "signer")]) == 0
    store = ResultsStore(tmp_path / "results.sqlite")
    for smoke in cell.smokes:
        store.record(record(cell, smoke, "pass", digest, host=CPU))
    assert main(["promote", str(matrix), "--cell", cell.id, "--results", str(store.path), "--known-good",
                 str(tmp_path / "known-good.toml"), "--signing-key", str(tmp_path / "keys" / "signer.key")]) == 0
    capsys.readouterr()

    pub = (tmp_path / "keys" / "signer.pub").read_bytes()
    artifact, envelope = _provenance_envelope(oci_registry, "slsa/known-good/demo", digest)
    statement = stock_verify(envelope, pub)
    assert statement["subject"] == [{"name": f"{prefix}/known-good/demo", "digest": {"sha256": digest[7:]}}]
    build = statement["predicate"]["buildDefinition"]
    assert build["externalParameters"] == {
        "cell": cell.id, "stack": "demo", "matrix": {"sha256": hashlib.sha256(matrix.read_bytes()).hexdigest()},
        "lock": {"sha256": hashlib.sha256(lock.encode()).hexdigest()}}
    assert build["internalParameters"] == {"created": "2025-11-24T16:00:00Z"}
    deps = build["resolvedDependencies"]
    manifest = json.loads(_get(f"http://{oci_registry}/v2/slsa/known-good/demo/manifests/{digest}"))
    assert deps[0] == {"name": "source", "uri": f"git+{SOURCE}", "digest": {"gitCommit": REVISION}}
    assert deps[1] == {"name": "base:debian:trixie", "digest": {"sha256": manifest["layers"][0]["digest"][7:]},
                       "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip"}  # the base's layer, not the venv's
    wheels = {(d["uri"], d["digest"]["sha256"]) for d in deps[2:]}
    assert wheels == {(f"pkg:pypi/{n}@{cell.pins[n]}", hashlib.sha256(f"{n}-{cell.pins[n]}".encode()).hexdigest())
                      for n in ("idna", "six")}
    assert statement["predicate"]["runDetails"]["builder"]["id"] == "https://pinmatrix.dev/promote"

    ref = f"{prefix}/known-good/demo@{digest}"
    assert main(["verify", ref, "--key", str(tmp_path / "keys" / "signer.pub")]) == 0
    out = capsys.readouterr().out
    assert f"  SLSA provenance {artifact}: builder https://pinmatrix.dev/promote, subject {digest}, 4 inputs" in out

    # edited (a wheel's digest swapped, the signature kept): the stock verifier refuses it, and so does verify
    edited = json.loads(base64.b64decode(envelope["payload"]))
    edited["predicate"]["buildDefinition"]["resolvedDependencies"][2]["digest"]["sha256"] = "0" * 64
    forged = {**envelope, "payload": base64.b64encode(json.dumps(edited).encode()).decode()}
    with pytest.raises(VerificationError):
        stock_verify(forged, pub)
    with pytest.raises(json_format.ParseError):  # a predicate outside the SLSA v1 model, even when signed
        json_format.ParseDict({**statement["predicate"], "extra": 1}, provenance_pb2.Provenance())
    promoted = Promoted(Registry(oci_registry), prefix, matrix, tmp_path / "known-good.toml", tmp_path / "h.json",
                        tmp_path / "keys" / "signer.pub", cell.id, digest, ImageRef.parse(f"{prefix}/known-good/demo"))
    _replace_referrer(promoted, artifact, json.dumps(forged).encode(), SLSA)
    assert main(["verify", ref, "--key", str(tmp_path / "keys" / "signer.pub")]) == 1
    assert "tampered?" in _one_line_error(capsys.readouterr().err)
