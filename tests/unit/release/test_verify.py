"""pinmatrix.release.verify rule by rule against an honest registry in memory (tests/support/memregistry.py) that holds
what a test puts there: a cell image with its labels and the attestations attached to it (signed by the trusted
key, by another key, unsigned, tampered, or signed but saying the wrong thing). Each rule's refusal is checked
as the line ``pull`` would give; an image that keeps every rule verifies, with the fields ``verify`` prints."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from memregistry import MemoryRegistry, serve_registry
from promotion import CPU_CELL, record

from pinmatrix.image.cellconfig import LOCK_LABEL
from pinmatrix.imageref import ImageRef
from pinmatrix.registry.client import OCI_INDEX, OCI_MANIFEST, Registry
from pinmatrix.release import attest
from pinmatrix.release.attest import DSSE_MEDIA_TYPE, PREDICATE_ANNOTATION, SBOM_PREDICATE, TEST_RESULT_PREDICATE
from pinmatrix.release.signing import generate_keypair, load_public_key, load_signer, sign_envelope
from pinmatrix.release.verify import label_problems, verify_image

REPO = "promoted/demo"
SIGNED = datetime(2026, 12, 1, 14, 0, tzinfo=timezone.utc)
LOCK_SHA = "ab" * 32


def _labels(cell=CPU_CELL, **over: str) -> dict[str, str]:  # noqa: ANN001
    labels = {"io.pinmatrix.cell.id": cell.id, "io.pinmatrix.cell.stack": cell.stack,
              "io.pinmatrix.cell.name": cell.name, "io.pinmatrix.cell.python": cell.python,
              "io.pinmatrix.cell.platform": cell.platform, LOCK_LABEL: LOCK_SHA,
              **{f"io.pinmatrix.pin.{k}": str(v) for k, v in cell.pins.items()}}
    labels.update(over)
    return {k: v for k, v in labels.items() if v != "-"}


class World:
    """A registry in memory with one image, a trusted key and an untrusted one."""

    def __init__(self, reg: MemoryRegistry, tmp_path: Path, labels: dict[str, str] | None = None) -> None:
        self.reg = reg
        self.registry = Registry(reg.address, allowed_token_hosts=())
        private, public, _ = generate_keypair(tmp_path / "trusted")
        self.signer, self.key = load_signer(private), load_public_key(public)
        other, _, _ = generate_keypair(tmp_path / "other")
        self.other = load_signer(other)
        config = json.dumps({"config": {"Labels": labels if labels is not None else _labels()}}).encode()
        layer = b"layer"
        manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                               "digest": reg.add_blob(REPO, config), "size": len(config)},
                    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                "digest": reg.add_blob(REPO, layer), "size": len(layer)}]}
        self.manifest = manifest
        self.digest = reg.add_manifest(REPO, json.dumps(manifest).encode(), OCI_MANIFEST, "known-good")
        self.ref = ImageRef(reg.address, REPO, "known-good")
        self.image = ImageRef(reg.address, REPO, None, self.digest)

    def statement(self, *statuses: str, signed_at: datetime = SIGNED, cell=CPU_CELL) -> dict[str, Any]:  # noqa: ANN001
        records = [record(cell, f"smoke-{i}", status, self.digest) for i, status in enumerate(statuses or ("pass",))]
        return attest.test_result_statement(self.image, cell, records, signed_at=signed_at)

    def attach(self, statement: dict[str, Any], signer: object = "trusted") -> str:
        chosen = self.signer if signer == "trusted" else self.other if signer == "other" else None
        return attest.attach(self.registry, self.image, statement, signer=chosen)  # type: ignore[arg-type]

    def attach_raw(self, envelope: bytes, predicate: str = TEST_RESULT_PREDICATE, subject: str | None = None) -> str:
        manifest = self.registry.get_manifest(REPO, subject or self.digest)
        assert manifest is not None
        return self.registry.push_artifact(REPO, manifest, artifact_type=DSSE_MEDIA_TYPE, payload=envelope,
                                           payload_media_type=DSSE_MEDIA_TYPE,
                                           annotations={PREDICATE_ANNOTATION: predicate})

    def verify(self, ref: ImageRef | None = None, **kwargs: Any):  # noqa: ANN201
        return verify_image(self.registry, ref or self.ref, [self.key], **kwargs)


@pytest.fixture
def world(tmp_path: Path):  # noqa: ANN201
    with serve_registry() as reg:
        yield World(reg, tmp_path)


def _bom(cell=CPU_CELL, lock: str | None = LOCK_SHA) -> dict[str, Any]:  # noqa: ANN001
    props = [{"name": "pinmatrix:lock.sha256", "value": lock}] if lock else []
    return {"bomFormat": "CycloneDX", "metadata": {"component": {"name": f"pinmatrix-cell/{cell.id}",
                                                                 "properties": props}},
            "components": [{"name": "six"}, {"name": "idna"}]}


# -- what verifies ------------------------------------------------------------------------------------

def test_a_signed_passing_result_and_sbom_verify(world: World) -> None:
    att = world.attach(world.statement("pass", "pass"))
    world.attach(attest.sbom_statement(world.image, _bom()))
    out = world.verify()
    assert out.ok and out.problems == [] and out.reason == ""
    assert (out.digest, out.cell_id, out.stack, out.cell_name) == (world.digest, CPU_CELL.id, "demo", CPU_CELL.name)
    assert (out.result, out.signed_at, out.run_finished_at) == ("PASSED", "2026-12-01T14:00:00Z", "2026-11-29T20:00:01Z")
    assert out.keyids == [world.key.keyid] and out.trusted_keys == [world.key.keyid]
    assert (out.sbom, out.sbom_components) == ("verified", 2)
    report = next(e for e in out.evidence if e.digest == att)
    assert (report.predicate_type, report.signed, report.verified, report.keyid, report.key_source, report.note) == (
        TEST_RESULT_PREDICATE, True, True, world.key.keyid, world.key.source, None)
    assert json.loads(out.to_json())["ok"] is True
    # the verified manifest's layer media types reach pull's engine check, and stay out of the report
    assert out.layer_media_types == ["application/vnd.oci.image.layer.v1.tar"]
    assert "layer_media_types" not in json.loads(out.to_json())
    assert world.verify(world.image, expect_digest=world.digest, expect_cell=CPU_CELL.id, expect_stack="demo",
                        not_before="2026-12-01T14:00:00Z").ok


def test_a_warned_result_verifies_without_an_sbom(world: World) -> None:
    world.attach(world.statement("pass", "xfail"))
    out = world.verify()
    assert out.ok and out.result == "WARNED" and out.sbom == "absent" and out.sbom_components is None


# -- what does not ------------------------------------------------------------------------------------

def test_no_key_no_image_another_digest_or_an_index(world: World) -> None:
    none = verify_image(world.registry, world.ref, [])
    assert none.problems == ["no trusted public key to verify with: pass --key FILE.pub or set PINMATRIX_TRUSTED_KEYS"]
    assert not none.ok and none.digest is None
    absent = world.verify(ImageRef(world.reg.address, REPO, "nope"))
    assert absent.problems == [f"{world.reg.address}/{REPO}:nope is not in the registry"]
    other = "sha256:" + "9" * 64
    moved = world.verify(expect_digest=other)
    assert moved.problems == [f"{world.ref} is {world.digest}, not the recorded {other}"] and moved.evidence == []
    index = world.reg.add_manifest(REPO, json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX,
                                                     "manifests": []}).encode(), OCI_INDEX, "multi")
    out = world.verify(ImageRef(world.reg.address, REPO, "multi"))
    assert out.problems == [f"{world.reg.address}/{REPO}:multi is an image index, not one image: pinmatrix promotes "
                            "single images"] and out.digest == index


def test_a_tag_and_digest_that_disagree(world: World) -> None:
    world.attach(world.statement())
    other = world.reg.add_manifest(REPO, json.dumps({**world.manifest, "layers": []}).encode(), OCI_MANIFEST)
    out = world.verify(ImageRef(world.reg.address, REPO, "known-good", other))
    assert out.problems[0] == f"tag {world.reg.address}/{REPO}:known-good names {world.digest}, not {other}"
    assert world.verify(ImageRef(world.reg.address, REPO, "known-good", world.digest)).ok
    gone = world.verify(ImageRef(world.reg.address, REPO, "gone", world.digest))
    assert gone.problems[0] == f"tag {world.reg.address}/{REPO}:gone names nothing, not {world.digest}"


def test_unsigned_or_foreign_evidence_is_listed_and_ignored(world: World) -> None:
    unsigned = world.attach(world.statement(), signer=None)
    foreign = world.attach(world.statement(), signer="other")
    out = world.verify()
    notes = {e.digest: e.note for e in out.evidence}
    assert notes[unsigned] == "unsigned: ignored"
    assert notes[foreign].startswith("signed only by untrusted key(s) ")
    assert len(out.problems) == 1 and out.problems[0].startswith(
        "no test-result attestation signed by a trusted key (2 attestation(s) found: ")
    assert f"{unsigned[:19]}: unsigned: ignored" in out.problems[0]
    assert not out.ok and out.result is None


def test_no_evidence_at_all(world: World) -> None:
    out = world.verify()
    assert out.problems == ["no test-result attestation signed by a trusted key (0 attestation(s) found: none "
                            "attached)"]


def test_a_tampered_envelope_is_refused_not_skipped(world: World) -> None:
    envelope = sign_envelope(attest.canonical(world.statement()), world.signer)
    envelope["payload"] = base64.b64encode(attest.canonical(world.statement("fail"))).decode()
    digest = world.attach_raw(attest.canonical(envelope))
    world.attach(world.statement())
    out = world.verify()
    assert out.problems == [f"attestation {digest}: the signature by trusted key {world.key.keyid[:12]} "
                            f"({world.key.source}) does not verify (tampered?)"]


def test_a_signed_payload_of_another_type_or_not_json_is_refused(world: World) -> None:
    other_type = world.attach_raw(attest.canonical(sign_envelope(attest.canonical(world.statement()), world.signer,
                                                                 payload_type="text/plain")))
    not_json = world.attach_raw(attest.canonical(sign_envelope(b"[1, 2]", world.signer)))
    broken = world.attach_raw(attest.canonical(sign_envelope(b"{broken", world.signer)))
    out = world.verify()
    assert set(out.problems[:3]) == {
        f"attestation {other_type}: signed payload type is 'text/plain', not application/vnd.in-toto+json",
        f"attestation {not_json}: the signed payload is not a JSON statement",
        f"attestation {broken}: the signed payload is not a JSON statement"}


def test_an_annotation_that_is_not_the_signed_predicate_is_refused(world: World) -> None:
    digest = world.attach_raw(attest.canonical(sign_envelope(attest.canonical(world.statement()), world.signer)),
                              predicate=SBOM_PREDICATE)
    out = world.verify()
    assert out.problems[0] == (f"attestation {digest}: annotated as {SBOM_PREDICATE} but the signed statement is "
                               f"{TEST_RESULT_PREDICATE}")


def test_a_statement_for_another_digest_or_repository_is_refused(world: World) -> None:
    statement = world.statement()
    other = "cd" * 32
    statement["subject"] = [{"name": f"{world.reg.address}/{REPO}", "digest": {"sha256": other}}]
    att = world.attach(statement)
    assert world.verify().problems[0] == (f"the signed attestation {att} is for sha256:{other}, not for the image's "
                                          f"digest {world.digest}")


def test_subject_problems_each_named(world: World) -> None:
    digest = world.digest
    cases = [
        ({"_type": "other"}, "is not an in-toto v1 statement"),
        ({"subject": []}, f"is for no digest, not for the image's digest {digest}"),
        ({"subject": [{"name": f"{world.reg.address}/other/repo", "digest": {"sha256": digest[7:]}}, "junk"]},
         "names repository other/repo, not promoted/demo"),
        ({"subject": [{"digest": {"sha256": digest[7:]}}]}, "names repository (none), not promoted/demo"),
    ]
    for change, tail in cases:
        statement = {**world.statement(), **change}
        att = world.attach(statement)
        problems = world.verify().problems
        assert f"the signed attestation {att} {tail}" in problems, (tail, problems)


def test_a_result_older_than_the_recorded_promotion_is_refused(world: World) -> None:
    world.attach(world.statement())
    out = world.verify(not_before="2026-12-02T00:00:00Z")
    assert out.problems == [f"the newest signed test result for {world.digest} was signed at 2026-12-01T14:00:00Z, "
                            "before the recorded promotion at 2026-12-02T00:00:00Z (a newer result is being withheld?)"]
    assert world.verify(not_before="2026-12-01T14:00:00").ok  # no zone: UTC
    assert not world.verify(not_before="not a time").ok


def test_a_result_without_a_signing_time_is_older_than_any_record(world: World) -> None:
    statement = world.statement()
    del statement["predicate"]["signedAt"]
    world.attach(statement)
    out = world.verify(not_before="2026-01-01T00:00:00Z")
    assert out.signed_at is None and out.ok is False
    assert "was signed at an unknown time, before the recorded promotion" in out.problems[0]


def test_the_newest_result_decides(world: World) -> None:
    world.attach(world.statement("pass"))
    world.attach(world.statement("fail", signed_at=datetime(2026, 12, 2, tzinfo=timezone.utc)))
    out = world.verify()
    assert out.result == "FAILED" and out.problems[0].startswith(
        f"the newest signed test result for {world.digest} is FAILED, not PASSED")


def test_a_statement_without_a_cell_and_cells_that_differ(world: World) -> None:
    nocell = world.statement()
    nocell["predicate"]["configuration"] = []
    world.attach(nocell)
    assert "the signed test-result statement names no pinmatrix cell" in world.verify().problems


def test_two_signed_results_for_different_cells_are_refused(world: World) -> None:
    from conftest import make_cell

    other = make_cell("demo", ("six==1.16.0",), pins={"six": "1.16.0"})
    world.attach(world.statement())
    world.attach(world.statement(cell=other, signed_at=datetime(2026, 11, 1, tzinfo=timezone.utc)))
    out = world.verify()
    ids = ", ".join(sorted({CPU_CELL.id, other.id}))
    assert out.problems == [f"the signed attestations of {world.digest} name different cells: {ids}"]
    assert out.cell_id == CPU_CELL.id and out.keyids == [world.key.keyid]


def test_the_recorded_cell_and_stack_must_match(world: World) -> None:
    world.attach(world.statement())
    out = world.verify(expect_cell="0" * 12, expect_stack="other")
    assert out.problems == [
        f"the recorded cell is {'0' * 12}, but the signed attestation of {world.digest} is for cell {CPU_CELL.id}",
        f"the recorded stack is other, but the signed attestation of {world.digest} is for stack demo"]


@pytest.mark.parametrize(("bom", "problem"), [
    ([1], "the signed SBOM is not a CycloneDX document"),
    ({"bomFormat": "SPDX"}, "the signed SBOM is not a CycloneDX document"),
    (_bom(lock=None), None),
    (_bom(lock="ef" * 32), f"the signed SBOM was made from lock sha256 {'ef' * 32}, the image was built from {LOCK_SHA}"),
    ({**_bom(), "metadata": {"component": {"name": "pinmatrix-cell/000000000000"}}},
     f"the signed SBOM describes 'pinmatrix-cell/000000000000', not pinmatrix-cell/{CPU_CELL.id}"),
    ({"bomFormat": "CycloneDX"}, f"the signed SBOM describes None, not pinmatrix-cell/{CPU_CELL.id}"),
])
def test_the_signed_sbom_must_describe_the_image(world: World, bom: object, problem: str | None) -> None:
    world.attach(world.statement())
    world.attach({**attest.sbom_statement(world.image, {}), "predicate": bom})
    out = world.verify()
    assert out.problems == ([problem] if problem else []) and out.sbom == "verified"


def test_an_sbom_without_a_test_result_names_no_cell(world: World) -> None:
    world.attach(attest.sbom_statement(world.image, _bom()))
    out = world.verify()
    assert out.problems[0].startswith("no test-result attestation signed by a trusted key")


def test_an_image_without_a_lock_label_takes_any_sbom_lock(tmp_path: Path) -> None:
    with serve_registry() as reg:
        world = World(reg, tmp_path, labels=_labels(**{LOCK_LABEL: "-"}))
        world.attach(world.statement())
        world.attach(attest.sbom_statement(world.image, _bom(lock="ef" * 32)))
        assert world.verify().ok


def test_the_image_labels_must_be_the_cells(tmp_path: Path) -> None:
    with serve_registry() as reg:
        world = World(reg, tmp_path, labels=_labels(**{"io.pinmatrix.pin.six": "1.16.0"}))
        world.attach(world.statement())
        assert world.verify().problems == [f"cell {CPU_CELL.id}: pin six is '1.17.0' in the attestation, '1.16.0' in "
                                           "the image's labels"]


def test_label_problems_each_named() -> None:
    cell = {"id": "c" * 12, "stack": "demo", "name": "n", "python": "3.11", "platform": "p", "pin.six": "1"}
    labels = {f"io.pinmatrix.cell.{k}": v for k, v in cell.items() if not k.startswith("pin.")}
    labels["io.pinmatrix.pin.six"] = "1"
    assert label_problems(cell, labels) == []
    assert label_problems(cell, {}) == ["the image carries no io.pinmatrix.cell.id label: it is not a pinmatrix cell "
                                        "image"]
    assert label_problems(cell, {**labels, "io.pinmatrix.cell.id": "d" * 12}) == [
        f"the attestation is for cell {'c' * 12}, but the image's io.pinmatrix.cell.id label is {'d' * 12}"]
    extra = {**labels, "io.pinmatrix.pin.idna": "3.7"}
    assert label_problems(cell, extra) == [f"cell {'c' * 12}: pin idna is None in the attestation, '3.7' in the "
                                           "image's labels"]
    two = {**cell, "pin.a": "1", "pin.b": "2"}
    assert label_problems(two, labels) == [f"cell {'c' * 12}: pin a is '1' in the attestation, None in the image's "
                                           "labels", f"cell {'c' * 12}: pin b is '2' in the attestation, None in the "
                                           "image's labels"]
