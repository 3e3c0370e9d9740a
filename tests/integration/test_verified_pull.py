"""Signed evidence end to end, through the CLI, against Debian's docker-registry (no referrers API: the
referrers tag schema fallback): `keygen` -> `promote --signing-key` (DSSE-signed test-result attestation and
CycloneDX SBOM) -> `verify` and `pull` accept the untampered promotion and pull it with podman; then
known-good.toml, the tag, the attestation and the signature are tampered with in turn, and `verify` (exit 1)
and `pull` (exit 2) refuse each with a one-line reason.

The image is a tiny one assembled here and pushed with skopeo (tests/support/oci_layout.py): what is checked is the
evidence, not the build."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path

import pytest
import tomlkit
from evidence import (
    _envelope_of,
    _one_line_error,
    _referrers_index,
    _replace_referrer,
    _set_entry,
    promote_signed,
)
from oci_layout import cell_labels, push_cell_image
from promotion import _matrix_for, record  # noqa: F401 - the fixture

from pinmatrix.cli import main
from pinmatrix.registry.client import referrers_tag
from pinmatrix.release.attest import DSSE_MEDIA_TYPE, SBOM_PREDICATE, TEST_RESULT_PREDICATE, attachments
from pinmatrix.release.provenance import SLSA_PROVENANCE_PREDICATE
from pinmatrix.release.signing import generate_keypair, load_signer, sign_envelope

pytestmark = [pytest.mark.registry]


















def test_untampered_promotion_verifies_and_pulls(oci_registry: str, podman_env, tmp_path: Path, capsys,  # noqa: F811
                                                 monkeypatch) -> None:
    p = promote_signed(oci_registry, tmp_path, capsys, "vp-ok")
    entry = tomlkit.parse(p.known_good.read_text())["promoted"][0]
    assert entry["signed_by"] and entry["sbom"].startswith(f"{p.target.name}@sha256:")

    # the layout: three DSSE artifacts in the referrers tag schema fallback, predicate types annotated
    found = attachments(p.registry, p.target.with_digest(p.digest))
    assert sorted(a.predicate_type for a in found) == sorted([TEST_RESULT_PREDICATE, SBOM_PREDICATE,
                                                              SLSA_PROVENANCE_PREDICATE])
    assert {a.artifact_type for a in found} == {DSSE_MEDIA_TYPE} and {a.subject for a in found} == {p.digest}

    rc = main(p.verify(f"{p.target.name}:known-good"))
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert out.startswith(f"verified {p.target.name}@{p.digest}: cell {p.cell_id}")
    assert "SBOM verified (2 components)" in out
    (result_artifact,) = [a.digest for a in found if a.predicate_type == TEST_RESULT_PREDICATE]
    assert f"result PASSED from attestation {result_artifact} signed at " in out  # the evidence it used
    assert "the newest of" not in out  # only one was attached
    rc = main(p.verify(f"{p.target.name}@{p.digest}", "--json"))
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["ok"] is True and doc["problems"] == []
    assert (doc["cell_id"], doc["stack"], doc["result"], doc["sbom"]) == (p.cell_id, "demo", "PASSED", "verified")
    assert doc["keyids"] == [entry["signed_by"]]
    assert doc["attestation"] == result_artifact

    # a real pull with podman (private storage), by digest, after verification
    for key, value in podman_env.env.items():
        monkeypatch.setenv(key, value)
    rc = main(p.pull("--engine", "podman"))
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert out.strip() == f"{p.target.name}@{p.digest}"
    assert f"verified {p.target.name}@{p.digest}: cell {p.cell_id}, result PASSED" in err
    listed = subprocess.run(["podman", "images", "--digests", "--format", "{{.Digest}}"], capture_output=True,
                            text=True, check=True).stdout.split()
    assert p.digest in listed

    # without a trusted key nothing is accepted
    monkeypatch.delenv("PINMATRIX_TRUSTED_KEYS", raising=False)
    rc = main(["verify", f"{p.target.name}:known-good"])
    assert rc == 2 and "no trusted public key" in _one_line_error(capsys.readouterr().err)
    other = generate_keypair(tmp_path / "other")[1]
    monkeypatch.setenv("PINMATRIX_TRUSTED_KEYS", str(other))
    rc = main(["verify", f"{p.target.name}:known-good"])
    line = _one_line_error(capsys.readouterr().err)
    assert rc == 1 and "no test-result attestation signed by a trusted key" in line
    assert "signed only by untrusted key(s)" in line


def test_each_tampering_is_refused_by_verify_and_pull(oci_registry: str, tmp_path: Path, capsys) -> None:  # noqa: F811
    p = promote_signed(oci_registry, tmp_path, capsys, "vp-tamper")
    good = f"{p.target.name}@{p.digest}"
    assert main(p.pull("--print")) == 0 and capsys.readouterr().out.strip() == good

    # an image that was never promoted, pushed into the promoted repository (same labels, no evidence)
    from pinmatrix.matrix.selection import load

    cell = next(c for c in load(p.matrix)[1].cells if c.id == p.cell_id)
    evil = push_cell_image(tmp_path / "evil", f"{p.target.name}:evil", cell_labels(cell), "never promoted")

    # 1. known-good.toml edited to name a digest that was never promoted
    original = _set_entry(p.known_good, digest=evil, reference=f"{p.target.name}@{evil}")
    rc = main(p.pull("--print"))
    out, err = capsys.readouterr()
    line = _one_line_error(err)
    assert rc == 2 and out == ""
    assert line.endswith(f"cell {p.cell_id}: will not pull {p.target.name}@{evil}: no test-result attestation signed "
                         "by a trusted key (0 attestation(s) found: none attached)")
    rc = main(p.verify(f"{p.target.name}@{evil}"))
    assert rc == 1 and "no test-result attestation signed by a trusted key" in _one_line_error(capsys.readouterr().err)
    p.known_good.write_text(original)

    # 2. a reference that does not carry the recorded digest
    _set_entry(p.known_good, reference=f"{p.target.name}:known-good")
    rc = main(p.pull("--print"))
    line = _one_line_error(capsys.readouterr().err)
    assert rc == 2 and "does not carry the recorded digest" in line
    p.known_good.write_text(original)

    # 3. the known-good tag moved (outside promote) to the never-promoted image
    reg, repo = p.registry, p.target.repository
    reg.put_manifest(repo, "known-good", reg.get_manifest(repo, evil))
    rc = main(p.verify(f"{p.target.name}:known-good"))
    assert rc == 1 and "no test-result attestation signed by a trusted key" in _one_line_error(capsys.readouterr().err)
    rc = main(p.pull("--print"))
    line = _one_line_error(capsys.readouterr().err)
    assert rc == 2 and f"tag {p.target.name}:known-good was moved to {evil}, which does not verify" in line
    reg.put_manifest(repo, "known-good", reg.get_manifest(repo, p.digest))
    assert main(p.pull("--print")) == 0
    capsys.readouterr()

    index_before = _referrers_index(p)
    att_digest, envelope = _envelope_of(p, TEST_RESULT_PREDICATE)

    # 4. the attestation tampered with: the statement changed (FAILED made PASSED is the same act), signature kept
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["failedTests"] = ["slipped in"]
    forged = dict(envelope, payload=base64.b64encode(json.dumps(statement).encode()).decode())
    _replace_referrer(p, att_digest, json.dumps(forged).encode(), TEST_RESULT_PREDICATE)
    rc = main(p.verify(good))
    line = _one_line_error(capsys.readouterr().err)
    assert rc == 1 and "does not verify: attestation sha256:" in line
    assert "the signature by trusted key" in line and "does not verify (tampered?)" in line
    rc = main(p.pull("--print"))
    line = _one_line_error(capsys.readouterr().err)
    assert rc == 2 and f"will not pull {good}: attestation sha256:" in line and "(tampered?)" in line
    reg.put_manifest(repo, referrers_tag(p.digest), index_before)

    # 5a. a bad signature: the trusted key id, a signature made by another key
    intruder = load_signer(generate_keypair(tmp_path / "intruder")[0])
    resigned = sign_envelope(base64.b64decode(envelope["payload"]), intruder)
    bad = dict(envelope, signatures=[{"keyid": envelope["signatures"][0]["keyid"],
                                      "sig": resigned["signatures"][0]["sig"]}])
    _replace_referrer(p, att_digest, json.dumps(bad).encode(), TEST_RESULT_PREDICATE)
    rc = main(p.verify(good))
    assert rc == 1 and "does not verify (tampered?)" in _one_line_error(capsys.readouterr().err)
    rc = main(p.pull("--print"))
    assert rc == 2 and "does not verify (tampered?)" in _one_line_error(capsys.readouterr().err)
    reg.put_manifest(repo, referrers_tag(p.digest), index_before)

    # 5b. the attestation re-signed by someone else's key: not trusted, so there is no valid one left
    _replace_referrer(p, att_digest, json.dumps(resigned).encode(), TEST_RESULT_PREDICATE)
    rc = main(p.pull("--print"))
    line = _one_line_error(capsys.readouterr().err)
    assert rc == 2 and "no test-result attestation signed by a trusted key" in line
    assert f"signed only by untrusted key(s) {intruder.public_key.keyid[:12]}" in line
    reg.put_manifest(repo, referrers_tag(p.digest), index_before)

    # 6. a signed SBOM of another image listed for this one (a valid signature, the wrong subject)
    sbom_digest, sbom_env = _envelope_of(p, SBOM_PREDICATE)
    other = json.loads(base64.b64decode(sbom_env["payload"]))
    other["subject"][0]["digest"]["sha256"] = evil.split(":")[1]
    signer = load_signer(p.pub.with_suffix(".key"))
    _replace_referrer(p, sbom_digest, json.dumps(sign_envelope(json.dumps(other).encode(), signer)).encode(),
                      SBOM_PREDICATE)
    rc = main(p.verify(good))
    line = _one_line_error(capsys.readouterr().err)
    assert rc == 1 and f"is for {evil}, not for the image's digest {p.digest}" in line
    reg.put_manifest(repo, referrers_tag(p.digest), index_before)

    # restored: verifies again
    assert main(p.verify(good)) == 0 and main(p.pull("--print")) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == good


def test_a_lock_changed_since_the_build_gives_no_sbom(oci_registry: str, tmp_path: Path, capsys) -> None:  # noqa: F811
    p = promote_signed(oci_registry, tmp_path, capsys, "vp-stale", built_from_lock="# another lock\n")
    err = capsys.readouterr().err
    assert f"note: cell {p.cell_id}: " in err and "changed since" in err and "no SBOM is attached" in err
    assert "sbom" not in tomlkit.parse(p.known_good.read_text())["promoted"][0]
    rc = main(p.verify(f"{p.target.name}@{p.digest}"))
    assert rc == 0 and capsys.readouterr().out.splitlines()[0].endswith("no SBOM attached")


def test_evidence_copied_to_another_repository_does_not_verify_there(oci_registry: str, tmp_path: Path,  # noqa: F811
                                                                     capsys) -> None:
    """The image and its signed evidence copied whole into another repository: the signature still verifies,
    but the statement names the repository it was promoted to."""
    p = promote_signed(oci_registry, tmp_path, capsys, "vp-moved")
    reg, other = p.registry, f"{p.prefix.split('/', 1)[1]}/elsewhere/demo"
    reg.copy(p.target.with_digest(p.digest), other, ["x"])
    index = _referrers_index(p)
    for desc in index.json["manifests"]:
        reg.copy(p.target.with_digest(desc["digest"]), other, [])
    reg.put_manifest(other, referrers_tag(p.digest), index)
    rc = main(p.verify(f"{oci_registry}/{other}:x"))
    line = _one_line_error(capsys.readouterr().err)
    assert rc == 1 and f"names repository {p.target.repository}, not {other}" in line


def test_unsigned_evidence_is_never_accepted(oci_registry: str, tmp_path: Path, capsys) -> None:  # noqa: F811
    p = promote_signed(oci_registry, tmp_path, capsys, "vp-unsigned", sign=False)
    assert "signed_by" not in tomlkit.parse(p.known_good.read_text())["promoted"][0]
    rc = main(p.verify(f"{p.target.name}:known-good"))
    line = _one_line_error(capsys.readouterr().err)
    assert rc == 1 and "no test-result attestation signed by a trusted key (3 attestation(s) found: " in line
    assert line.count("unsigned: ignored") == 3  # test results, SBOM, provenance
    rc = main(p.pull("--print"))
    assert rc == 2 and "no test-result attestation signed by a trusted key" in _one_line_error(capsys.readouterr().err)


def test_a_repromotion_replaces_its_own_evidence_and_keeps_another_signers(oci_registry: str, tmp_path: Path,  # noqa: F811
                                                                         capsys) -> None:  # noqa: ANN001
    from pinmatrix.release.attest import attach

    p = promote_signed(oci_registry, tmp_path, capsys, "vp-again")
    image = p.target.with_digest(p.digest)
    first = {a.predicate_type: a.digest for a in attachments(p.registry, image)}
    other_key = load_signer(generate_keypair(tmp_path / "other")[0])
    foreign = attach(p.registry, image, {"_type": "https://in-toto.io/Statement/v1", "predicateType":
                                         TEST_RESULT_PREDICATE, "subject": [], "predicate": {}}, signer=other_key)
    time.sleep(1.1)  # statements carry their signing second: a promotion within the same one is the same bytes
    rc = main(["promote", str(p.matrix), "--cell", p.cell_id, "--results", str(tmp_path / "results.sqlite"),
               "--known-good", str(p.known_good), "--signing-key", str(tmp_path / "keys" / "signer.key"), "--force"])
    out, err = capsys.readouterr()
    assert rc == 0 and f"promoted {p.cell_id}" in out, err
    after = attachments(p.registry, image)
    ours = {a.predicate_type: a.digest for a in after if a.digest != foreign}
    assert set(ours) == {TEST_RESULT_PREDICATE, SBOM_PREDICATE, SLSA_PROVENANCE_PREDICATE}  # one of each, not two
    assert not set(ours.values()) & set(first.values())  # the new ones, the earlier ones gone
    assert foreign in {a.digest for a in after}  # another signer's evidence is not ours to remove
    assert len(after) == 4
    rc = main(p.verify(f"{p.target.name}@{p.digest}"))
    out = capsys.readouterr().out
    assert rc == 0 and f"from attestation {ours[TEST_RESULT_PREDICATE]} " in out
