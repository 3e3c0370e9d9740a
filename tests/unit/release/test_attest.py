"""pinmatrix.release.attest rule by rule: the test-result statement built from a cell's records (the latest per
smoke x host by finishing time, infrastructure errors left out, other cells' records ignored), its descriptors,
the SBOM statement and the lock it may be built from, and attachments pushed to and read back from an honest
registry in memory (signed or bare, with and without the referrers API)."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest
from attest_data import _image
from helpers import fetch_statements, statement_of
from memregistry import MemoryRegistry, serve_registry
from promotion import CPU_CELL, GPU_CELL, record
from report_data import H200

from pinmatrix.hashing import sha256_bytes
from pinmatrix.image.cellconfig import LOCK_LABEL
from pinmatrix.imageref import ImageRef, RegistryError
from pinmatrix.registry.client import OCI_MANIFEST, Registry
from pinmatrix.release import attest
from pinmatrix.release.attest import (
    DSSE_MEDIA_TYPE,
    IN_TOTO_MEDIA_TYPE,
    PREDICATE_ANNOTATION,
    SBOM_PREDICATE,
    STATEMENT_TYPE,
    TEST_RESULT_PREDICATE,
    Attachment,
)
from pinmatrix.release.signing import generate_keypair, load_signer
from pinmatrix.results.store import HostFingerprint

DIGEST = "sha256:" + "ab" * 32
IMAGE = ImageRef("127.0.0.1:5000", "promoted/demo", None, DIGEST)
SIGNED = datetime(2026, 12, 1, 14, 0, tzinfo=timezone.utc)
OTHER_HOST = HostFingerprint.make(hostname="b", gpu_name="NVIDIA B200", gpu_count=1, driver="580", capability="10.0")


def _at(rec, finished: str):  # noqa: ANN001, ANN202
    return replace(rec, finished_at=finished)


def test_finished_key_reads_zones_and_sorts_the_unreadable_first() -> None:
    rec = record(CPU_CELL, "s", "pass", DIGEST)
    assert attest.finished_key(_at(rec, "2026-12-01T10:00:00Z")) == datetime(2026, 12, 1, 10, tzinfo=timezone.utc)
    assert attest.finished_key(_at(rec, "2026-12-01T12:00:00+02:00")) == datetime(2026, 12, 1, 10, tzinfo=timezone.utc)
    assert attest.finished_key(_at(rec, "2026-12-01T10:00:00")) == datetime(2026, 12, 1, 10, tzinfo=timezone.utc)
    assert attest.finished_key(_at(rec, "yesterday")) == datetime.min.replace(tzinfo=timezone.utc)


def test_the_latest_record_per_smoke_and_host_by_finishing_time() -> None:
    old = _at(record(CPU_CELL, "a", "fail", DIGEST, run="r1"), "2026-12-01T10:00:00Z")
    new = _at(record(CPU_CELL, "a", "pass", DIGEST, run="r2"), "2026-12-01T11:00:00Z")
    tie = _at(record(CPU_CELL, "a", "xfail", DIGEST, run="r3"), "2026-12-01T11:00:00Z")
    elsewhere = _at(record(CPU_CELL, "a", "fail", DIGEST, host=OTHER_HOST), "2026-12-01T09:00:00Z")
    b = record(CPU_CELL, "b", "pass", DIGEST)
    assert attest.latest_per_smoke_host([new, old]) == [new]  # imported later, finished earlier: not the latest
    assert attest.latest_per_smoke_host([old, new, tie]) == [tie]  # equal times: the later record
    got = attest.latest_per_smoke_host([b, elsewhere, old, new])
    assert got == sorted([new, elsewhere, b], key=lambda r: (r.smoke, r.host.id))


def test_utc_stamps_and_descriptors() -> None:
    assert attest.utc_stamp(datetime(2026, 12, 1, 15, 0, 5, 999, tzinfo=timezone(__import__("datetime").timedelta(
        hours=1)))) == "2026-12-01T14:00:05Z"
    annotations = {"b": "2", "a": "1"}
    assert attest.described("x/y", annotations) == {
        "name": "x/y", "digest": {"sha256": sha256_bytes(b'{"a":"1","b":"2"}')}, "mediaType": "application/json",
        "annotations": annotations}
    assert attest.canonical({"b": [1, {"d": 1, "c": 2}], "a": "é"}) == '{"a":"\\u00e9","b":[1,{"c":2,"d":1}]}'.encode()


def test_the_test_result_statement_from_a_cells_records() -> None:
    recs = [
        _at(record(CPU_CELL, "p", "pass", DIGEST), "2026-12-01T10:00:00Z"),
        _at(record(CPU_CELL, "w1", "xfail", DIGEST), "2026-12-01T10:30:00Z"),
        _at(record(CPU_CELL, "w2", "xpass", DIGEST), "2026-12-01T10:31:00Z"),
        _at(record(CPU_CELL, "w3", "degraded", DIGEST, host=OTHER_HOST), "2026-12-01T10:32:00Z"),
        _at(record(CPU_CELL, "e", "error", DIGEST), "2026-12-01T12:00:00Z"),  # no result: hides none
        _at(record(CPU_CELL, "p", "error", DIGEST), "2026-12-01T13:00:00Z"),
        _at(record(GPU_CELL, "g", "fail", DIGEST), "2026-12-01T14:00:00Z"),  # another cell
    ]
    statement = attest.test_result_statement(IMAGE, CPU_CELL, recs, url="https://ci/run/1", signed_at=SIGNED,
                                             policy={"min_clean_runs": 2})
    assert statement["_type"] == STATEMENT_TYPE and statement["predicateType"] == TEST_RESULT_PREDICATE
    assert statement["subject"] == [{"name": "127.0.0.1:5000/promoted/demo", "digest": {"sha256": "ab" * 32}}]
    p = statement["predicate"]
    assert p["result"] == "WARNED" and p["signedAt"] == "2026-12-01T14:00:00Z" and p["url"] == "https://ci/run/1"
    assert p["passedTests"] == [f"p [host {H200.id}]"]
    assert p["warnedTests"] == [f"w1 [host {H200.id}]", f"w2 [host {H200.id}]", f"w3 [host {OTHER_HOST.id}]"]
    assert p["failedTests"] == [] and p["runFinishedAt"] == "2026-12-01T10:32:00Z"
    names = [c["name"] for c in p["configuration"]]
    assert names == [f"pinmatrix-cell/{CPU_CELL.id}", f"pinmatrix-host/{H200.id}", f"pinmatrix-host/{OTHER_HOST.id}",
                     "pinmatrix-promotion-policy"]
    cell = p["configuration"][0]["annotations"]
    assert cell == {"stack": "demo", "name": CPU_CELL.name, "python": CPU_CELL.python, "platform": CPU_CELL.platform,
                    "pin.six": "1.17.0"}
    host = p["configuration"][1]["annotations"]
    assert "id" not in host and host["gpu_name"] == H200.gpu_name and all(isinstance(v, str) for v in host.values())
    assert None not in host.values() and "None" not in host.values()
    assert p["configuration"][3]["annotations"] == {"min_clean_runs": "2"}
    failed = attest.test_result_statement(IMAGE, CPU_CELL, recs + [record(CPU_CELL, "f", "fail", DIGEST)],
                                          signed_at=SIGNED)["predicate"]
    assert failed["result"] == "FAILED" and failed["failedTests"] == [f"f [host {H200.id}]"]
    assert "url" not in failed and len(failed["configuration"]) == 3
    passed = attest.test_result_statement(IMAGE, CPU_CELL, recs[:1], signed_at=SIGNED)["predicate"]
    assert passed["result"] == "PASSED" and passed["warnedTests"] == []


def test_a_statement_needs_the_images_digest() -> None:
    tagged = ImageRef("127.0.0.1:5000", "promoted/demo", "v1")
    for build in (lambda: attest.test_result_statement(tagged, CPU_CELL, []),
                  lambda: attest.sbom_statement(tagged, {})):
        with pytest.raises(RegistryError, match=r"^127\.0\.0\.1:5000/promoted/demo:v1: an attestation subject needs a "
                                                r"digest$"):
            build()


def test_the_sbom_statement() -> None:
    assert attest.sbom_statement(IMAGE, {"bomFormat": "CycloneDX"}) == {
        "_type": STATEMENT_TYPE, "subject": [{"name": "127.0.0.1:5000/promoted/demo", "digest": {"sha256": "ab" * 32}}],
        "predicateType": SBOM_PREDICATE, "predicate": {"bomFormat": "CycloneDX"}}




def test_the_lock_for_an_sbom_must_be_the_one_the_image_was_built_from(tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    with serve_registry() as reg:
        registry = Registry(reg.address, allowed_token_hosts=())
        image = _image(reg, {})
        assert attest.lock_for_sbom(registry, image, lock) == (None, f"{lock}: no lock for the cell, so no SBOM is "
                                                                     "attached")
        lock.write_text("six==1.17.0\n")
        assert attest.lock_for_sbom(registry, image, lock) == ("six==1.17.0\n", "")
        built = _image(reg, {LOCK_LABEL: sha256_bytes(b"six==1.17.0\n")})
        assert attest.lock_for_sbom(registry, built, lock) == ("six==1.17.0\n", "")
        other = _image(reg, {LOCK_LABEL: "cd" * 32})
        assert attest.lock_for_sbom(registry, other, lock) == (None, (
            f"{lock} changed since {other} was built (its {LOCK_LABEL} label is cdcdcdcdcdcd...): no SBOM is attached"))
        absent = ImageRef(reg.address, "promoted/demo", None, "sha256:" + "9" * 64)
        assert attest.lock_for_sbom(registry, absent, lock) == ("six==1.17.0\n", "")


@pytest.mark.parametrize("api", [True, False])
def test_attachments_are_pushed_and_read_back(tmp_path: Path, api: bool) -> None:
    private, _, _ = generate_keypair(tmp_path / "k")
    signer = load_signer(private)
    with serve_registry(MemoryRegistry(referrers_api=api)) as reg:
        registry = Registry(reg.address, allowed_token_hosts=())
        image = _image(reg, {})
        statement = attest.test_result_statement(image, CPU_CELL, [record(CPU_CELL, "p", "pass", image.digest)],
                                                 signed_at=SIGNED)
        now = datetime(2026, 12, 1, 15, 0, 7, tzinfo=timezone.utc)
        published = attest.publish(registry, image, statement, bom={"bomFormat": "CycloneDX"}, signer=signer, now=now)
        assert published.keyid == signer.public_key.keyid and published.sbom is not None
        bare = attest.publish(registry, image, statement, now=now)
        assert bare.keyid is None and bare.sbom is None
        found = {a.digest: a for a in attest.attachments(registry, image)}
        assert set(found) == {published.attestation, published.sbom, bare.attestation}
        signed = found[published.attestation]
        assert (signed.artifact_type, signed.media_type, signed.predicate_type, signed.subject) == (
            DSSE_MEDIA_TYPE, DSSE_MEDIA_TYPE, TEST_RESULT_PREDICATE, image.digest)
        assert found[published.sbom].predicate_type == SBOM_PREDICATE  # type: ignore[index]
        unsigned = found[bare.attestation]
        assert (unsigned.media_type, unsigned.artifact_type) == (IN_TOTO_MEDIA_TYPE, IN_TOTO_MEDIA_TYPE)
        assert json.loads(unsigned.content) == statement
        envelope = json.loads(signed.content)
        assert json.loads(base64.b64decode(envelope["payload"])) == statement
        doc = json.loads(reg.manifests[published.attestation][0])
        assert doc["annotations"] == {"org.opencontainers.image.created": "2026-12-01T15:00:07Z",
                                      PREDICATE_ANNOTATION: TEST_RESULT_PREDICATE}
        assert fetch_statements(registry, image) == [statement, statement]
        assert fetch_statements(registry, image, SBOM_PREDICATE) == [attest.sbom_statement(
            image, {"bomFormat": "CycloneDX"})]
        assert len(fetch_statements(registry, image, None)) == 3


def test_attaching_needs_a_digest_and_an_image(tmp_path: Path) -> None:
    with serve_registry() as reg:
        registry = Registry(reg.address, allowed_token_hosts=())
        tagged = ImageRef(reg.address, "promoted/demo", "v1")
        with pytest.raises(RegistryError, match=r"an attestation subject needs a digest$"):
            attest.attach(registry, tagged, {})
        for read in (attest.attachments, fetch_statements):
            with pytest.raises(RegistryError, match=r": looking up attestations needs a digest$"):
                read(registry, tagged)  # type: ignore[operator]
        absent = ImageRef(reg.address, "promoted/demo", None, "sha256:" + "9" * 64)
        with pytest.raises(RegistryError, match=r": no such image to attach an attestation to$"):
            attest.attach(registry, absent, {})


def test_only_evidence_artifacts_and_layers_are_read(tmp_path: Path) -> None:
    with serve_registry() as reg:
        registry = Registry(reg.address, allowed_token_hosts=())
        image = _image(reg, {})
        subject = registry.get_manifest("promoted/demo", image.digest)
        assert subject is not None
        registry.push_artifact("promoted/demo", subject, artifact_type="application/x-other", payload=b"{}",
                               payload_media_type=IN_TOTO_MEDIA_TYPE)
        registry.push_artifact("promoted/demo", subject, artifact_type=IN_TOTO_MEDIA_TYPE, payload=b"not evidence",
                               payload_media_type="application/octet-stream")
        ghost = {"mediaType": OCI_MANIFEST, "digest": "sha256:" + "8" * 64, "size": 1, "artifactType": DSSE_MEDIA_TYPE}
        registry._add_to_referrers_tag("promoted/demo", image.digest, ghost)  # listed, but no such manifest
        assert attest.attachments(registry, image) == []
        statement = attest.sbom_statement(image, {})
        attest.attach(registry, image, {**statement, "subject": [{"digest": {"sha256": "7" * 64}}, "junk"]})
        assert fetch_statements(registry, image, None) == []  # names another digest


@pytest.mark.parametrize(("media_type", "content", "statement"), [
    (IN_TOTO_MEDIA_TYPE, b'{"a": 1}', {"a": 1}),
    (IN_TOTO_MEDIA_TYPE, b"[1]", None),
    (IN_TOTO_MEDIA_TYPE, b"{", None),
    (DSSE_MEDIA_TYPE, json.dumps({"payload": base64.b64encode(b'{"b": 2}').decode()}).encode(), {"b": 2}),
    (DSSE_MEDIA_TYPE, b'{"nopayload": 1}', None),
    (DSSE_MEDIA_TYPE, b'{"payload": "!!"}', None),
    (DSSE_MEDIA_TYPE, b'{"payload": 3}', None),
])
def test_statement_of_reads_without_verifying(media_type: str, content: bytes, statement: dict | None) -> None:
    att = Attachment("sha256:" + "1" * 64, media_type, "", None, media_type, content)
    assert statement_of(att) == statement
