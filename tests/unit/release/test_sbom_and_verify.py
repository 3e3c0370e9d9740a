"""Evidence without a registry: keys (`pinmatrix keygen`, encrypted keys, trusted key lists), DSSE envelopes
signed and checked with securesystemslib (tampered payload, foreign key, malformed envelopes), the CycloneDX
SBOM made from a lock (purls, hashes, dependency graph, valid against the CycloneDX 1.6 schema), and the
comparison of a signed statement's cell with an image's labels."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest
from helpers import components_of
from sbom_data import LOCK, MOMENT, H

from conftest import make_cell
from pinmatrix.cli import main
from pinmatrix.errors import PinmatrixError
from pinmatrix.release.sbom import cell_bom, locked_packages
from pinmatrix.release.signing import (
    SigningKeyError,
    check_envelope,
    generate_keypair,
    load_public_key,
    load_signer,
    sign_envelope,
    trusted_keys,
)
from pinmatrix.release.verify import label_problems, statement_cell

# ------------------------------------------------------------------------------------------------ keys


def test_keygen_writes_a_private_key_only_its_owner_reads(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("PINMATRIX_KEY_PASSWORD", raising=False)
    assert main(["keygen", "--out", str(tmp_path / "team")]) == 0
    out = capsys.readouterr().out
    private, public = tmp_path / "team.key", tmp_path / "team.pub"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert private.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    assert public.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    signer, trusted = load_signer(private), load_public_key(public)
    assert signer.public_key.keyid == trusted.keyid and trusted.keyid in out
    assert trusted.key.keytype == "ed25519"
    # never overwritten by accident
    rc = main(["keygen", "--out", str(tmp_path / "team")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == [f"pinmatrix: error: {private}: exists; pass --force to replace it"]
    assert main(["keygen", "--out", str(tmp_path / "team"), "--force"]) == 0
    assert load_public_key(public).keyid != trusted.keyid


def test_an_encrypted_key_needs_its_password(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PINMATRIX_KEY_PASSWORD", "s3cret")
    private, public, keyid = generate_keypair(tmp_path / "enc")
    assert "ENCRYPTED" in private.read_text()
    assert load_signer(private).public_key.keyid == keyid
    monkeypatch.delenv("PINMATRIX_KEY_PASSWORD")
    with pytest.raises(SigningKeyError, match=rf"^{private}: the key is encrypted: set PINMATRIX_KEY_PASSWORD$"):
        load_signer(private)
    monkeypatch.setenv("PINMATRIX_KEY_PASSWORD", "wrong")
    wrong = rf"^{private}: not a PEM private key \(or a wrong PINMATRIX_KEY_PASSWORD\)"
    with pytest.raises(SigningKeyError, match=wrong):
        load_signer(private)
    with pytest.raises(SigningKeyError, match=rf"^{tmp_path / 'missing.key'}: cannot read the signing key"):
        load_signer(tmp_path / "missing.key")
    (tmp_path / "junk.pub").write_text("not a key")
    with pytest.raises(SigningKeyError, match=rf"^{tmp_path / 'junk.pub'}: not a PEM public key$"):
        load_public_key(tmp_path / "junk.pub")


def test_trusted_keys_from_options_or_the_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("PINMATRIX_KEY_PASSWORD", raising=False)
    a, b = generate_keypair(tmp_path / "a"), generate_keypair(tmp_path / "b")
    monkeypatch.setenv("PINMATRIX_TRUSTED_KEYS", f"{a[1]}{os.pathsep}{b[1]}")
    assert [k.keyid for k in trusted_keys()] == [a[2], b[2]]
    assert [k.keyid for k in trusted_keys([b[1]])] == [b[2]]  # an option replaces the environment
    assert load_public_key(a[0]).keyid == a[2]  # a private key file gives its public half
    monkeypatch.delenv("PINMATRIX_TRUSTED_KEYS")
    assert trusted_keys() == []


# ------------------------------------------------------------------------------------------------ DSSE


def test_envelopes_verify_only_untouched_and_only_with_a_trusted_key(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("PINMATRIX_KEY_PASSWORD", raising=False)
    signer = load_signer(generate_keypair(tmp_path / "s")[0])
    trusted = load_public_key(tmp_path / "s.pub")
    other = load_public_key(generate_keypair(tmp_path / "o")[1])
    payload = json.dumps({"_type": "https://in-toto.io/Statement/v1", "predicate": {"result": "PASSED"}}).encode()
    envelope = sign_envelope(payload, signer)
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    assert envelope["signatures"][0]["keyid"] == trusted.keyid
    good = check_envelope(json.dumps(envelope).encode(), [other, trusted])
    assert good.verified_by == trusted and good.problem is None and good.payload == payload

    forged = dict(envelope, payload=base64.b64encode(payload.replace(b"PASSED", b"FAILED")).decode())
    bad = check_envelope(json.dumps(forged).encode(), [trusted])
    assert bad.verified_by is None and not bad.foreign  # tampered, not someone else's
    assert bad.problem == f"the signature by trusted key {trusted.keyid[:12]} ({trusted.source}) does not verify"
    retyped = dict(envelope, payloadType="text/plain")  # the type is signed too (DSSE's PAE)
    assert check_envelope(json.dumps(retyped).encode(), [trusted]).verified_by is None

    foreign = check_envelope(json.dumps(envelope).encode(), [other])
    assert foreign.verified_by is None and foreign.problem == f"signed only by untrusted key(s) {trusted.keyid[:12]}"
    assert foreign.foreign  # verify passes over another signer's evidence by this flag, not by the message
    unsigned = check_envelope(json.dumps(dict(envelope, signatures=[])).encode(), [trusted])
    assert unsigned.problem == "the envelope carries no signature" and not unsigned.foreign
    assert check_envelope(b"{", [trusted]).problem == "not JSON"
    assert check_envelope(b'{"payload": 1}', [trusted]).problem == \
        "not a DSSE envelope (payload, payloadType, signatures)"
    not_base64 = json.dumps(dict(envelope, payload="%%%")).encode()
    assert check_envelope(not_base64, [trusted]).problem == "payload is not base64"


# ------------------------------------------------------------------------------------------------ SBOM


def test_sbom_from_a_lock() -> None:
    cell = make_cell("demo", ("requests",), pins={"requests": "2.32.3"})
    bom = cell_bom(cell, LOCK, moment=MOMENT)
    assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] == "1.6"
    assert bom["metadata"]["timestamp"].startswith("2026-11-30T12:00:00")
    root = bom["metadata"]["component"]
    assert root["name"] == f"pinmatrix-cell/{cell.id}" and root["type"] == "container"
    props = {p["name"]: p["value"] for p in root["properties"]}
    assert props["pinmatrix:stack"] == "demo" and props["pinmatrix:pin.requests"] == "2.32.3"
    comps = components_of(bom)
    assert sorted(comps) == ["pkg:pypi/certifi@2025.1.31", "pkg:pypi/idna@3.10", "pkg:pypi/requests@2.32.3",
                             "pkg:pypi/six@1.17.0", "pkg:pypi/urllib3@2.3.0"]  # names canonical: Six -> six
    assert comps["pkg:pypi/idna@3.10"]["hashes"] == [{"alg": "SHA-256", "content": H["idna"]},
                                                     {"alg": "SHA-256", "content": "f" * 64}]
    deps = {d["ref"]: sorted(d.get("dependsOn", [])) for d in bom["dependencies"]}
    assert deps["pkg:pypi/requests@2.32.3"] == ["pkg:pypi/certifi@2025.1.31", "pkg:pypi/idna@3.10",
                                                "pkg:pypi/urllib3@2.3.0"]
    assert deps[f"cell:{cell.id}"] == ["pkg:pypi/requests@2.32.3", "pkg:pypi/six@1.17.0"]  # the top level
    assert deps["pkg:pypi/six@1.17.0"] == []
    # deterministic: the same lock and moment give the same document
    assert cell_bom(cell, LOCK, moment=MOMENT) == bom
    assert cell_bom(cell, LOCK + "\n", moment=MOMENT)["serialNumber"] != bom["serialNumber"]


def test_sbom_is_valid_cyclonedx_1_6() -> None:
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    bom = cell_bom(make_cell("demo", ("requests",)), LOCK, moment=MOMENT)
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(bom)) is None


@pytest.mark.parametrize(("text", "message"), [
    ("requests >= 2\n", "'requests >= 2' is not pinned to one version"),
    ("requests>=2\n", "cannot read requirement 'requests>=2'"),
    ("requests==2.32.3\n", "requests==2.32.3 has no sha256 hash"),
])
def test_an_unpinned_or_unhashed_lock_gives_no_sbom(text: str, message: str) -> None:
    with pytest.raises(PinmatrixError) as err:
        locked_packages(text, "locks/x.txt")
    assert str(err.value) == f"locks/x.txt: {message}"


# ------------------------------------------------------------------------------------------ cell labels


def test_statement_cell_against_image_labels() -> None:
    statement = {"predicate": {"configuration": [
        {"name": "pinmatrix-host/abc", "annotations": {"hostname": "ci"}},
        {"name": "pinmatrix-cell/0123456789ab", "annotations": {
            "stack": "demo", "name": "demo[six=1.17.0]", "python": "3.11", "platform": "x86_64-manylinux_2_28",
            "pin.six": "1.17.0"}},
    ]}}
    cell = statement_cell(statement)
    assert cell is not None and cell["id"] == "0123456789ab"
    labels = {"io.pinmatrix.cell.id": "0123456789ab", "io.pinmatrix.cell.stack": "demo",
              "io.pinmatrix.cell.name": "demo[six=1.17.0]", "io.pinmatrix.cell.python": "3.11",
              "io.pinmatrix.cell.platform": "x86_64-manylinux_2_28", "io.pinmatrix.pin.six": "1.17.0"}
    assert label_problems(cell, labels) == []
    assert label_problems(cell, {k: v for k, v in labels.items() if k != "io.pinmatrix.cell.id"}) == [
        "the image carries no io.pinmatrix.cell.id label: it is not a pinmatrix cell image"]
    assert label_problems(cell, {**labels, "io.pinmatrix.cell.id": "ba9876543210"}) == [
        "the attestation is for cell 0123456789ab, but the image's io.pinmatrix.cell.id label is ba9876543210"]
    assert label_problems(cell, {**labels, "io.pinmatrix.cell.python": "3.13", "io.pinmatrix.pin.six": "1.16.0"}) == [
        "cell 0123456789ab: the attestation says python '3.11', the image's label io.pinmatrix.cell.python says '3.13'",
        "cell 0123456789ab: pin six is '1.17.0' in the attestation, '1.16.0' in the image's labels"]
    assert statement_cell({"predicate": {}}) is None
