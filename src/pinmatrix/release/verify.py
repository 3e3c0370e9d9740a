"""Whether an image in a registry is what pinmatrix promoted: ``pinmatrix verify REF`` and every ``pull``.

An image verifies when ALL of these hold:
1. its manifest (fetched by digest, so checked against the digest) is one image with a config;
2. at least one test-result attestation refers to it whose DSSE signature verifies with a trusted public key;
3. that signed statement names the image's manifest digest as its subject, and the same repository as the
   reference (the registry host may differ: a mirror serves the same digests);
4. of the signed test results, the newest (by its signed ``signedAt``, then ``runFinishedAt``) decides: its
   result is PASSED or WARNED and agrees with its own lists (a failed test makes it FAILED, a warned one at
   least WARNED), it is not older than what the caller already knows (``not_before``: the known-good
   record's promotion time), and its cell (``pinmatrix-cell/<id>`` with stack, name, python, platform and
   pins, every one of them present) equals the image's ``io.pinmatrix.cell.*`` / ``io.pinmatrix.pin.*`` labels;
5. no attestation of the image carries a signature by a trusted key that does NOT verify (tampering is
   refused, not skipped), and every signed SBOM names the same digest, repository and cell (and the lock the
   image was built from, when the image has the ``io.pinmatrix.lock.sha256`` label), every signed SLSA
   provenance the same digest, repository and cell (reported: builder, subject, count of inputs).
6. when the newest signed result names GPU hosts' keys (the promotion counted only results those hosts signed:
   ``trusted_hosts``), at least one host-signed attestation of the image verifies with them, none signed by
   them fails to, and each is for the image's digest; each is reported (``hosts``: key, GPU, driver, smokes).

Evidence signed only by keys that are not trusted, or unsigned evidence, is listed and ignored. The first
problem found is the one-line reason ``pull`` gives.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, Field

from pinmatrix.image.cellconfig import LOCK_LABEL
from pinmatrix.imageref import ImageRef, repository_path
from pinmatrix.oci.manifest import layer_descriptors
from pinmatrix.registry.client import INDEX_TYPES, Registry
from pinmatrix.release.attest import (
    DSSE_MEDIA_TYPE,
    SBOM_PREDICATE,
    STATEMENT_TYPE,
    TEST_RESULT_PREDICATE,
    Attachment,
    attachments,
)
from pinmatrix.release.hostsign import HostSignatureError, named_host_keys, open_host_envelope
from pinmatrix.release.provenance import SLSA_PROVENANCE_PREDICATE, provenance_summary
from pinmatrix.release.signing import IN_TOTO_PAYLOAD_TYPE, TrustedKey, check_envelope

CELL_LABEL = "io.pinmatrix.cell."
PIN_LABEL = "io.pinmatrix.pin."
CELL_FIELDS = ("stack", "name", "python", "platform")


class EvidenceReport(BaseModel):
    """One attached artifact as verification saw it."""

    digest: str
    predicate_type: str
    signed: bool
    verified: bool
    keyid: str | None = None
    key_source: str | None = None
    note: str | None = None


class HostReport(BaseModel):
    """A GPU host's signed test results attached to the image, verified with a host key the promotion's
    signed statement names: who ran what, where."""

    attestation: str
    keyid: str
    host: dict[str, Any]
    cell_id: str
    smokes: list[tuple[str, str]]  # (smoke, status) of each smoke's latest record


class ProvenanceReport(BaseModel):
    """The signed SLSA provenance of the image: who built it from what (``release.provenance``)."""

    attestation: str
    builder: str
    subject: str
    inputs: int  # its resolved dependencies: the source, the base's layers, the lock's files


class Verification(BaseModel):
    """The outcome of verifying one reference. ``ok`` is True only when ``problems`` is empty."""

    reference: str
    digest: str | None = None
    ok: bool = False
    problems: list[str] = Field(default_factory=list)
    cell_id: str | None = None
    stack: str | None = None
    cell_name: str | None = None
    result: str | None = None
    attestation: str | None = None  # the digest of the artifact holding the newest signed result: the one used
    signed_at: str | None = None  # the newest signed result's signing time
    run_finished_at: str | None = None
    keyids: list[str] = Field(default_factory=list)
    sbom: Literal["verified", "absent"] | None = None
    sbom_components: int | None = None
    provenance: ProvenanceReport | None = None
    evidence: list[EvidenceReport] = Field(default_factory=list)
    trusted_keys: list[str] = Field(default_factory=list)
    hosts: list[HostReport] = Field(default_factory=list)
    # the media types of the verified manifest's layers, for the engine check before a pull (not in the report)
    layer_media_types: list[str] = Field(default_factory=list, exclude=True)

    @property
    def reason(self) -> str:
        return self.problems[0] if self.problems else ""

    def to_json(self) -> str:
        return json.dumps(self.model_dump(), indent=2)


def _subject_problem(statement: dict[str, Any], digest: str, ref: ImageRef, what: str) -> str | None:
    if statement.get("_type") != STATEMENT_TYPE:
        return f"{what} is not an in-toto v1 statement"
    subjects = [s for s in statement.get("subject") or [] if isinstance(s, dict)]
    hexes = {str((s.get("digest") or {}).get("sha256", "")) for s in subjects}
    if digest.split(":", 1)[1] not in hexes:
        named = ", ".join(sorted(f"sha256:{h}" for h in hexes if h)) or "no digest"
        return f"{what} is for {named}, not for the image's digest {digest}"
    names = {repository_path(str(s.get("name", ""))) for s in subjects
             if str((s.get("digest") or {}).get("sha256", "")) == digest.split(":", 1)[1]}
    if ref.repository not in names:
        return f"{what} names repository {', '.join(sorted(names)) or '(none)'}, not {ref.repository}"
    return None


def statement_cell(statement: dict[str, Any]) -> dict[str, str] | None:
    """The cell a test-result statement describes: {"id", "stack", "name", "python", "platform", "pin.*"}."""
    for item in (statement.get("predicate") or {}).get("configuration") or []:
        if isinstance(item, dict) and str(item.get("name", "")).startswith("pinmatrix-cell/"):
            annotations = {k: str(v) for k, v in (item.get("annotations") or {}).items()}
            return {"id": str(item["name"]).split("/", 1)[1], **annotations}
    return None


def label_problems(cell: dict[str, str], labels: dict[str, str]) -> list[str]:
    """Differences between the statement's cell and the image's labels, as sentences."""
    problems: list[str] = []
    image_id = labels.get(CELL_LABEL + "id")
    if image_id is None:
        return [f"the image carries no {CELL_LABEL}id label: it is not a pinmatrix cell image"]
    if image_id != cell["id"]:
        return [f"the attestation is for cell {cell['id']}, but the image's {CELL_LABEL}id label is {image_id}"]
    for key in CELL_FIELDS:
        if cell.get(key) is None or labels.get(CELL_LABEL + key) != cell[key]:
            problems.append(f"cell {cell['id']}: the attestation says {key} {cell.get(key)!r}, the image's label "
                            f"{CELL_LABEL}{key} says {labels.get(CELL_LABEL + key)!r}")
    pins = {k[4:]: v for k, v in cell.items() if k.startswith("pin.")}
    image_pins = {k[len(PIN_LABEL):]: v for k, v in labels.items() if k.startswith(PIN_LABEL)}
    for axis in sorted(set(pins) | set(image_pins)):
        if pins.get(axis) != image_pins.get(axis):
            problems.append(f"cell {cell['id']}: pin {axis} is {pins.get(axis)!r} in the attestation, "
                            f"{image_pins.get(axis)!r} in the image's labels")
    return problems


def _moment(value: Any) -> datetime | None:
    """A statement's ``2026-12-01T14:00:00Z`` as an aware datetime; None when absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


_EPOCH = datetime.min.replace(tzinfo=timezone.utc)


def newest_first(results: Sequence[tuple[dict[str, Any], TrustedKey]]) -> list[tuple[dict[str, Any], TrustedKey]]:
    """Signed test results, the newest first: by signing time, then the run's finishing time (a result
    without either counts as the oldest)."""
    def key(item: tuple[dict[str, Any], TrustedKey]) -> tuple[datetime, datetime]:
        predicate = item[0].get("predicate") or {}
        return (_moment(predicate.get("signedAt")) or _EPOCH, _moment(predicate.get("runFinishedAt")) or _EPOCH)

    return sorted(results, key=key, reverse=True)


def result_problem(predicate: dict[str, Any], digest: str) -> str | None:
    """Whether a signed test result lets the image through: PASSED or WARNED, and in agreement with its lists."""
    result = str(predicate.get("result", ""))
    failed = predicate.get("failedTests") or []
    warned = predicate.get("warnedTests") or []
    if result not in ("PASSED", "WARNED"):
        return f"the newest signed test result for {digest} is {result or 'missing'}, not PASSED"
    if failed:
        return (f"the newest signed test result for {digest} says {result} but lists {len(failed)} failed "
                f"test(s) ({str(failed[0])[:80]})")
    if warned and result != "WARNED":
        return f"the newest signed test result for {digest} says {result} but lists {len(warned)} warned test(s)"
    return None


def _sbom_problems(bom: Any, cell: dict[str, str] | None, labels: dict[str, str]) -> list[str]:
    if not isinstance(bom, dict) or bom.get("bomFormat") != "CycloneDX":
        return ["the signed SBOM is not a CycloneDX document"]
    root = (bom.get("metadata") or {}).get("component") or {}
    problems: list[str] = []
    if cell is not None and root.get("name") != f"pinmatrix-cell/{cell['id']}":
        problems.append(f"the signed SBOM describes {root.get('name')!r}, not pinmatrix-cell/{cell['id']}")
    props = {p.get("name"): p.get("value") for p in root.get("properties") or [] if isinstance(p, dict)}
    if LOCK_LABEL in labels and props.get("pinmatrix:lock.sha256") not in (None, labels[LOCK_LABEL]):
        problems.append(f"the signed SBOM was made from lock sha256 {props.get('pinmatrix:lock.sha256')}, the image "
                        f"was built from {labels[LOCK_LABEL]}")
    return problems


def verify_image(registry: Registry, ref: ImageRef, keys: Sequence[TrustedKey], *,
                 expect_digest: str | None = None, expect_cell: str | None = None,
                 expect_stack: str | None = None, not_before: str | None = None) -> Verification:
    """Verify the image ``ref`` names (by tag or digest) against ``keys``. ``expect_*``: what a known-good
    record says it must be (its digest, cell id and stack); ``not_before``: the time of the promotion it
    records (the newest signed result must not be older)."""
    out = Verification(reference=str(ref), trusted_keys=[k.keyid for k in keys])
    if not keys:
        out.problems.append("no trusted public key to verify with: pass --key FILE.pub or set PINMATRIX_TRUSTED_KEYS")
        return out
    found = _single_image(registry, ref, out, expect_digest)
    if found is None:
        return out
    digest, labels = found
    evidence = _read_evidence(registry, ref, digest, keys, out)
    if not evidence.results:
        count = len(out.evidence)
        detail = "; ".join(f"{e.digest[:19]}: {e.note}" for e in out.evidence if e.note) or "none attached"
        out.problems.append(f"no test-result attestation signed by a trusted key "
                            f"({count} attestation(s) found: {detail})")
        return _finish(out)
    ordered = newest_first(evidence.results)
    out.attestation = evidence.artifact_of[id(ordered[0][0])]
    _judge_newest(out, ordered[0][0].get("predicate") or {}, digest, not_before)
    cells = _judge_cells(out, ordered, labels)
    if cells:
        _judge_recorded_cell(out, cells, digest, expect_cell, expect_stack)
    _judge_hosts(out, evidence.foreign, named_host_keys(ordered[0][0]), digest)
    _judge_sboms(out, evidence.sboms, cells[0] if cells else None, labels)
    _judge_provenance(out, evidence.provenances, cells[0] if cells else None, digest)
    return _finish(out)


def _single_image(registry: Registry, ref: ImageRef, out: Verification,
                  expect_digest: str | None) -> tuple[str, dict[str, str]] | None:
    """Step 1: the manifest ``ref`` names, by digest, is the recorded one and one image with a config: its
    digest and config labels; None (with the problem in ``out``) when it is not."""
    manifest = registry.get_manifest(ref.repository, ref.reference)
    if manifest is None:
        out.problems.append(f"{ref} is not in the registry")
        return None
    digest = manifest.digest
    out.digest = digest
    if ref.digest and ref.tag:
        tagged = registry.resolve(ref.with_tag(ref.tag))
        if tagged != ref.digest:
            out.problems.append(f"tag {ref.name}:{ref.tag} names {tagged or 'nothing'}, not {ref.digest}")
    if expect_digest and digest != expect_digest:
        out.problems.append(f"{ref} is {digest}, not the recorded {expect_digest}")
        return None
    if manifest.media_type in INDEX_TYPES or "config" not in manifest.json:
        out.problems.append(f"{ref} is an image index, not one image: pinmatrix promotes single images")
        return None
    out.layer_media_types = [str(layer.get("mediaType", "")) for layer in layer_descriptors(manifest.json)]
    return digest, registry.config_labels(ref.repository, manifest.json)


@dataclass
class _Evidence:
    """The statements of an image's attestations that a trusted key signed and that name the image."""

    results: list[tuple[dict[str, Any], TrustedKey]] = field(default_factory=list)
    artifact_of: dict[int, str] = field(default_factory=dict)  # id() of a verified statement -> its artifact
    sboms: list[dict[str, Any]] = field(default_factory=list)
    provenances: list[tuple[dict[str, Any], str]] = field(default_factory=list)  # (statement, its artifact)
    foreign: list[Attachment] = field(default_factory=list)  # DSSE ones no trusted key signed (a host's, say)


def _read_evidence(registry: Registry, ref: ImageRef, digest: str, keys: Sequence[TrustedKey],
                   out: Verification) -> _Evidence:
    """Steps 2, 3 and 5's signatures: every attachment of the image, reported in ``out.evidence``; the signed
    test results and SBOMs kept, every problem (a bad signature by a trusted key among them) in ``out``."""
    evidence = _Evidence()
    for att in attachments(registry, ref.with_digest(digest)):
        report = EvidenceReport(digest=att.digest, predicate_type=att.predicate_type,
                                signed=att.media_type == DSSE_MEDIA_TYPE, verified=False)
        out.evidence.append(report)
        if att.subject != digest:
            report.note = f"its manifest's subject is {att.subject}, not {digest}"
            out.problems.append(f"attestation {att.digest} is listed for {digest} but its subject is {att.subject}")
            continue
        if att.media_type != DSSE_MEDIA_TYPE:
            report.note = "unsigned: ignored"
            continue
        signed = _signed_statement(att, keys, report, out)
        if signed is None:
            if not report.verified:
                evidence.foreign.append(att)
            continue
        statement, key = signed
        problem = _subject_problem(statement, digest, ref, f"the signed attestation {att.digest}")
        if problem:
            out.problems.append(problem)
            continue
        predicate = statement.get("predicateType")
        if predicate == TEST_RESULT_PREDICATE:
            evidence.results.append((statement, key))
            evidence.artifact_of[id(statement)] = att.digest
        elif predicate == SBOM_PREDICATE:
            evidence.sboms.append(statement)
        elif predicate == SLSA_PROVENANCE_PREDICATE:
            evidence.provenances.append((statement, att.digest))
    return evidence


def _signed_statement(att: Attachment, keys: Sequence[TrustedKey], report: EvidenceReport,
                      out: Verification) -> tuple[dict[str, Any], TrustedKey] | None:
    """The in-toto statement a DSSE attachment carries, with the trusted key that signed it; None when no
    trusted key signed it (ignored) or when it is refused (the problem added to ``out``)."""
    check = check_envelope(att.content, keys)
    if check.verified_by is None:
        report.note = check.problem
        if check.foreign:
            return None  # another signer's evidence: not ours to judge
        out.problems.append(f"attestation {att.digest}: {check.problem} (tampered?)")
        return None
    report.verified, report.keyid, report.key_source = True, check.verified_by.keyid, check.verified_by.source
    if check.payload_type != IN_TOTO_PAYLOAD_TYPE:
        out.problems.append(f"attestation {att.digest}: signed payload type is {check.payload_type!r}, "
                            f"not {IN_TOTO_PAYLOAD_TYPE}")
        return None
    try:
        statement = json.loads(check.payload)
        if not isinstance(statement, dict):
            raise ValueError
    except ValueError:
        out.problems.append(f"attestation {att.digest}: the signed payload is not a JSON statement")
        return None
    predicate = statement.get("predicateType")
    if att.predicate_type and predicate != att.predicate_type:
        out.problems.append(f"attestation {att.digest}: annotated as {att.predicate_type} but the signed "
                            f"statement is {predicate}")
        return None
    return statement, check.verified_by


def _judge_newest(out: Verification, newest: dict[str, Any], digest: str, not_before: str | None) -> None:
    """Step 4's result: the newest signed test result's predicate lets the image through, and is not older
    than the recorded promotion."""
    out.result = str(newest.get("result", "")) or None
    out.signed_at = str(newest.get("signedAt")) if newest.get("signedAt") is not None else None
    out.run_finished_at = str(newest.get("runFinishedAt")) if newest.get("runFinishedAt") is not None else None
    problem = result_problem(newest, digest)
    if problem:
        out.problems.append(problem)
    if not_before is not None:
        floor, signed = _moment(not_before), _moment(newest.get("signedAt"))
        if floor is None or signed is None or signed < floor:
            out.problems.append(f"the newest signed test result for {digest} was signed at "
                                f"{out.signed_at or 'an unknown time'}, before the recorded promotion at {not_before} "
                                "(a newer result is being withheld?)")


def _judge_cells(out: Verification, ordered: Sequence[tuple[dict[str, Any], TrustedKey]],
                 labels: dict[str, str]) -> list[dict[str, str]]:
    """Step 4's cell: the cells the signed results name (newest first), the signers' keys noted, and the
    newest one compared with the image's labels."""
    cells: list[dict[str, str]] = []
    for statement, key in ordered:
        cell = statement_cell(statement)
        if key.keyid not in out.keyids:
            out.keyids.append(key.keyid)
        if cell is None:
            out.problems.append("the signed test-result statement names no pinmatrix cell")
            continue
        cells.append(cell)
        if statement is ordered[0][0]:
            out.problems.extend(label_problems(cell, labels))
    return cells


def _judge_recorded_cell(out: Verification, cells: Sequence[dict[str, str]], digest: str,
                         expect_cell: str | None, expect_stack: str | None) -> None:
    """Every signed result names one cell, and it is the one (and the stack) the known-good record names."""
    first = cells[0]
    out.cell_id, out.stack, out.cell_name = first["id"], first.get("stack"), first.get("name")
    if any(c["id"] != first["id"] for c in cells):
        out.problems.append(f"the signed attestations of {digest} name different cells: "
                            f"{', '.join(sorted({c['id'] for c in cells}))}")
    if expect_cell and first["id"] != expect_cell:
        out.problems.append(f"the recorded cell is {expect_cell}, but the signed attestation of {digest} is for "
                            f"cell {first['id']}")
    if expect_stack and first.get("stack") != expect_stack:
        out.problems.append(f"the recorded stack is {expect_stack}, but the signed attestation of {digest} is "
                            f"for stack {first.get('stack')}")


def _judge_hosts(out: Verification, foreign: Sequence[Attachment], host_keys: Sequence[TrustedKey],
                 digest: str) -> None:
    """The host-signed test results the newest promotion statement vouches for (it names their keys): each
    verifies with its key and is for this image's digest; one of them at least is attached."""
    if not host_keys:
        return
    for att in foreign:
        try:
            host = open_host_envelope(att.content, host_keys, f"host-signed attestation {att.digest}")
        except HostSignatureError as err:
            if not check_envelope(att.content, host_keys).foreign:
                out.problems.append(str(err))
            continue
        if host.digest != digest:
            out.problems.append(f"host-signed attestation {att.digest} is for {host.digest}, not {digest}")
            continue
        out.hosts.append(HostReport(attestation=att.digest, keyid=host.keyid, host=host.host.to_dict(),
                                    cell_id=host.cell_id, smokes=host.summary()))
    if not out.hosts:
        out.problems.append(f"the promotion of {digest} counted host-signed results, but no host-signed "
                            "attestation attached to it verifies with the host keys it names")


def _judge_sboms(out: Verification, sboms: Sequence[dict[str, Any]], cell: dict[str, str] | None,
                 labels: dict[str, str]) -> None:
    """Step 5's SBOMs: each signed one describes the cell and the lock the image was built from."""
    out.sbom = "verified" if sboms else "absent"
    for statement in sboms:
        bom = statement.get("predicate")
        out.problems.extend(_sbom_problems(bom, cell, labels))
        if isinstance(bom, dict):
            out.sbom_components = len(bom.get("components") or [])


def _judge_provenance(out: Verification, provenances: Sequence[tuple[dict[str, Any], str]],
                      cell: dict[str, str] | None, digest: str) -> None:
    """Each signed provenance (its subject already checked) is for the cell the test results name."""
    for statement, artifact in provenances:
        external = ((statement.get("predicate") or {}).get("buildDefinition") or {}).get("externalParameters") or {}
        named = external.get("cell") if isinstance(external, dict) else None
        if cell is not None and named != cell["id"]:
            out.problems.append(f"the signed provenance {artifact} is for cell {str(named)[:64]!r}, not {cell['id']}")
        builder, inputs = provenance_summary(statement)
        out.provenance = ProvenanceReport(attestation=artifact, builder=builder, subject=digest, inputs=inputs)


def _finish(out: Verification) -> Verification:
    out.ok = not out.problems
    return out
