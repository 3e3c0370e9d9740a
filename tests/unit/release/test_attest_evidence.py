"""pinmatrix.release.attest where test_attest_rules does not look: times in a statement and an artifact are UTC
whatever the machine's zone, a statement without a predicate type is annotated with none, a re-promotion without an
SBOM replaces no SBOM and looks past evidence of other kinds, a DSSE payload is strict base64, and statements that
cannot be read or name no subject are passed over without hiding the ones after them."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from attest_data import _image
from helpers import fetch_statements, statement_of
from memregistry import serve_registry
from promotion import CPU_CELL, record

from pinmatrix.registry.client import Registry
from pinmatrix.release import attest
from pinmatrix.release.attest import DSSE_MEDIA_TYPE, PREDICATE_ANNOTATION, TEST_RESULT_PREDICATE, Attachment

MOMENT = datetime(2026, 12, 1, 15, 0, 0, tzinfo=timezone.utc)


@pytest.fixture
def tokyo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The machine's local zone is UTC+9 for the test."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_stamps_are_utc_on_a_machine_in_another_zone(tokyo: None) -> None:
    assert attest.utc_stamp(MOMENT) == "2026-12-01T15:00:00Z"
    assert attest.utc_stamp(datetime(2026, 12, 1, 0, 30, tzinfo=timezone(timedelta(hours=9)))) == "2026-11-30T15:30:00Z"


def test_an_artifacts_creation_time_is_utc_on_a_machine_in_another_zone(tokyo: None) -> None:
    with serve_registry() as reg:
        registry = Registry(reg.address, allowed_token_hosts=())
        image = _image(reg, {})
        before = datetime.now(timezone.utc).replace(microsecond=0)
        digest = attest.attach(registry, image, {"predicateType": TEST_RESULT_PREDICATE})
        after = datetime.now(timezone.utc)
        created = json.loads(reg.manifests[digest][0])["annotations"]["org.opencontainers.image.created"]
        moment = datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        assert before <= moment <= after


def test_a_statement_without_a_predicate_type_is_annotated_with_none() -> None:
    with serve_registry() as reg:
        registry = Registry(reg.address, allowed_token_hosts=())
        image = _image(reg, {})
        digest = attest.attach(registry, image, {"_type": "x"}, now=MOMENT)
        assert json.loads(reg.manifests[digest][0])["annotations"][PREDICATE_ANNOTATION] == ""


def test_a_promotion_without_an_sbom_leaves_the_earlier_sbom_and_looks_past_other_evidence() -> None:
    with serve_registry() as reg:
        registry = Registry(reg.address, allowed_token_hosts=())
        image = _image(reg, {})
        other = attest.attach(registry, image, {"predicateType": "https://example.com/other/v1"}, now=MOMENT)
        records = [record(CPU_CELL, "p", "pass", image.digest)]
        first = attest.publish(registry, image, attest.test_result_statement(image, CPU_CELL, records, signed_at=MOMENT),
                               bom={"b": 1}, now=MOMENT)
        later = MOMENT + timedelta(hours=1)
        second = attest.publish(registry, image, attest.test_result_statement(image, CPU_CELL, records, signed_at=later),
                                now=later)
        assert second.replaced == (first.attestation,) and second.sbom is None
        listed = {a.digest for a in attest.attachments(registry, image)}
        assert listed == {other, first.sbom, second.attestation}


def test_a_dsse_payload_is_strict_base64() -> None:
    loose = json.dumps({"payload": "e3!0="}).encode()  # "{}" with a character base64 does not have
    assert base64.b64decode("e3!0=") == b"{}"
    assert statement_of(Attachment("sha256:" + "1" * 64, DSSE_MEDIA_TYPE, "", None, DSSE_MEDIA_TYPE,
                                          loose)) is None


def test_unreadable_statements_and_ones_without_a_subject_do_not_hide_the_next(tmp_path: Path) -> None:
    with serve_registry() as reg:
        registry = Registry(reg.address, allowed_token_hosts=())
        image = _image(reg, {})
        subject = registry.get_manifest("promoted/demo", image.digest)
        assert subject is not None
        registry.push_artifact("promoted/demo", subject, artifact_type=DSSE_MEDIA_TYPE, payload=b"not an envelope",
                               payload_media_type=DSSE_MEDIA_TYPE)
        attest.attach(registry, image, {"predicateType": TEST_RESULT_PREDICATE}, now=MOMENT)  # no subject
        attest.attach(registry, image, {"predicateType": TEST_RESULT_PREDICATE, "subject": [{"name": "x"}]},
                      now=MOMENT)  # a subject without a digest
        good = attest.test_result_statement(image, CPU_CELL, [record(CPU_CELL, "p", "pass", image.digest)],
                                            signed_at=MOMENT)
        attest.attach(registry, image, good, now=MOMENT)
        assert fetch_statements(registry, image) == [good]


def _list(registry: Registry, image, doc: dict, descriptor_type: str) -> str:  # noqa: ANN001
    """Put ``doc`` as a manifest and list it as a referrer of ``image`` with ``descriptor_type``."""
    from pinmatrix.hashing import sha256_digest
    from pinmatrix.registry.client import OCI_MANIFEST, Manifest

    body = json.dumps(doc).encode()
    digest = sha256_digest(body)
    registry.put_manifest("promoted/demo", digest, Manifest(body, OCI_MANIFEST, digest))
    registry._add_to_referrers_tag("promoted/demo", image.digest, {"mediaType": OCI_MANIFEST, "digest": digest,
                                                                   "size": len(body), "artifactType": descriptor_type})
    return digest


def test_what_is_not_evidence_is_passed_over_without_hiding_what_follows(monkeypatch: pytest.MonkeyPatch) -> None:
    from pinmatrix.release.attest import IN_TOTO_MEDIA_TYPE

    with serve_registry() as reg:
        registry = Registry(reg.address, allowed_token_hosts=())
        image = _image(reg, {})
        subject = registry.get_manifest("promoted/demo", image.digest)
        assert subject is not None
        registry.push_artifact("promoted/demo", subject, artifact_type="application/x-other", payload=b"{}",
                               payload_media_type=IN_TOTO_MEDIA_TYPE)  # not evidence
        registry._add_to_referrers_tag("promoted/demo", image.digest, {
            "mediaType": "x", "digest": "sha256:" + "8" * 64, "size": 1, "artifactType": IN_TOTO_MEDIA_TYPE})  # gone
        _list(registry, image, {"schemaVersion": 2}, IN_TOTO_MEDIA_TYPE)  # no layers at all
        statement = registry.push_blob("promoted/demo", b'{"s": 1}')
        other = registry.push_blob("promoted/demo", b"other")
        two = _list(registry, image, {"schemaVersion": 2, "layers": [
            {"mediaType": "application/octet-stream", "digest": other, "size": 5},
            {"mediaType": IN_TOTO_MEDIA_TYPE, "digest": statement, "size": 8}]}, IN_TOTO_MEDIA_TYPE)
        plain = registry.push_artifact("promoted/demo", subject, artifact_type=IN_TOTO_MEDIA_TYPE, payload=b'{"p": 2}',
                                       payload_media_type=IN_TOTO_MEDIA_TYPE)  # no annotations
        found = attest.attachments(registry, image)
        assert [(a.digest, a.artifact_type, a.predicate_type, a.content) for a in found] == [
            (two, "", "", b'{"s": 1}'), (plain, IN_TOTO_MEDIA_TYPE, "", b'{"p": 2}')]
        monkeypatch.setattr(attest, "MAX_EVIDENCE_BYTES", 7)
        with pytest.raises(Exception, match="is 8 bytes, more than the 7 expected here"):
            attest.attachments(registry, image)


def test_a_bad_lock_is_named_as_the_lock_by_default(tmp_path: Path) -> None:
    from pinmatrix.errors import PinmatrixError

    with serve_registry() as reg:
        image = _image(reg, {})
        with pytest.raises(PinmatrixError, match=r"^lock: cannot read requirement "):
            attest.sbom_inputs(Registry(reg.address, allowed_token_hosts=()), image, "=== no\n", tmp_path)
