"""Evidence attached to a promoted image, stored in the registry next to it as OCI artifacts whose
``subject`` is the image's manifest:

- an in-toto Statement (v1) with the test-result predicate (v0.1): what ran, where, with what result;
- an in-toto Statement whose predicate is the cell's CycloneDX SBOM (``pinmatrix.release.sbom``, from its lock);
- an in-toto Statement whose predicate is the image's SLSA provenance v1 (``pinmatrix.release.provenance``).

Signed (``signer`` given), each is a DSSE envelope (``pinmatrix.release.signing``): artifactType and layer media type
``application/vnd.dsse.envelope.v1+json``, the statement's predicate type in the manifest annotation
``in-toto.io/predicate-type``. Unsigned (no key), the statement itself is the layer
(``application/vnd.in-toto+json``): ``pinmatrix verify`` and ``pull`` never accept that.

Registries with the OCI 1.1 referrers API index the artifacts themselves; for registries without it (Debian's
docker-registry, distribution 2.8) they are listed in the OCI 1.1 distribution spec's referrers tag schema
fallback: an image index under the tag ``sha256-<hex of the image digest>``. ``attachments`` reads them
back either way. Checking them is ``pinmatrix.release.verify``'s job.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pinmatrix.cell import Cell
from pinmatrix.hashing import sha256_bytes
from pinmatrix.image.cellconfig import LOCK_LABEL
from pinmatrix.imageref import ImageRef, RegistryError
from pinmatrix.oci.manifest import layer_descriptors
from pinmatrix.registry.client import Manifest, Registry
from pinmatrix.release.debian import base_packages
from pinmatrix.release.requires import cached_requires
from pinmatrix.release.sbom import CYCLONEDX_PREDICATE, locked_packages
from pinmatrix.release.signing import TrustedKey, check_envelope, sign_envelope
from pinmatrix.results.store import SmokeRecord
from pinmatrix.statuses import INFRA_STATUSES

if TYPE_CHECKING:
    from securesystemslib.signer import CryptoSigner

    from pinmatrix.release.debian import DebianPackage

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
TEST_RESULT_PREDICATE = "https://in-toto.io/attestation/test-result/v0.1"
SBOM_PREDICATE = CYCLONEDX_PREDICATE
IN_TOTO_MEDIA_TYPE = "application/vnd.in-toto+json"
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
PREDICATE_ANNOTATION = "in-toto.io/predicate-type"
EVIDENCE_TYPES = (DSSE_MEDIA_TYPE, IN_TOTO_MEDIA_TYPE)
MAX_EVIDENCE_BYTES = 32 << 20  # an attestation larger than this is refused, not read

PASSED = ("pass",)
WARNED = ("xfail", "xpass", "degraded")
FAILED = ("fail",)


def test_name(rec: SmokeRecord) -> str:
    return f"{rec.smoke} [host {rec.host.id}]"


def finished_key(rec: SmokeRecord) -> datetime:
    """When ``rec`` finished, as an aware datetime: ``finished_at`` is ISO 8601 ('...Z' or '+00:00'); a value
    without a zone is taken as UTC, an unreadable one sorts first (it can never be "the latest")."""
    try:
        moment = datetime.fromisoformat(rec.finished_at.replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return datetime.min.replace(tzinfo=timezone.utc)
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def latest_per_smoke_host(records: Iterable[SmokeRecord]) -> list[SmokeRecord]:
    """Per (smoke, host): the record that FINISHED last (not the one imported last: results of an older run
    imported after a newer one must not hide the newer verdict). Equal finish times: the later record wins."""
    latest: dict[tuple[str, str], SmokeRecord] = {}
    for rec in records:
        key = (rec.smoke, rec.host.id)
        if key not in latest or finished_key(rec) >= finished_key(latest[key]):
            latest[key] = rec
    return sorted(latest.values(), key=lambda r: (r.smoke, r.host.id))


def utc_stamp(moment: datetime) -> str:
    """``2026-12-01T14:00:00Z``: the form every time in a statement takes (sortable as text)."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def described(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    """An in-toto v1 ResourceDescriptor for a configuration the results depend on (the cell, a host, the policy):
    its annotations, and, since v1 says a descriptor MUST have a uri, digest or content, the sha256 of those
    annotations as canonical JSON (sorted keys, no spaces: ``canonical``), which names exactly what it says."""
    return {"name": name, "digest": {"sha256": sha256_bytes(canonical(annotations))},
            "mediaType": "application/json", "annotations": annotations}


def test_result_statement(image: ImageRef, cell: Cell, records: Iterable[SmokeRecord], *,
                          url: str | None = None, policy: dict[str, Any] | None = None,
                          signed_at: datetime | None = None) -> dict[str, Any]:
    """The statement for ``image`` (which must carry its digest) from the latest result per smoke x host
    recorded for ``cell`` against that digest. It carries the signer's time (``signedAt``, ``signed_at`` or
    now) and the run's (``runFinishedAt``: when the last of those results finished), so a verifier can take
    the newest and refuse one older than what it already knows."""
    if not image.digest:
        raise RegistryError(f"{image}: an attestation subject needs a digest")
    latest = [r for r in latest_per_smoke_host(r for r in records if r.status not in INFRA_STATUSES)
              if r.cell_id == cell.id]  # an infrastructure error is no result: it hides none
    passed = [test_name(r) for r in latest if r.status in PASSED]
    warned = [test_name(r) for r in latest if r.status in WARNED]
    failed = [test_name(r) for r in latest if r.status in FAILED]
    result = "FAILED" if failed else "WARNED" if warned else "PASSED"
    hosts = {r.host.id: r.host for r in latest}
    configuration: list[dict[str, Any]] = [described(
        f"pinmatrix-cell/{cell.id}",
        {"stack": cell.stack, "name": cell.name, "python": cell.python, "platform": cell.platform,
         **{f"pin.{k}": str(v) for k, v in sorted(cell.pins.items())}})]
    for host in hosts.values():
        configuration.append(described(
            f"pinmatrix-host/{host.id}",
            {k: str(v) for k, v in host.to_dict().items() if v is not None and k != "id"}))
    predicate: dict[str, Any] = {
        "result": result,
        "signedAt": utc_stamp(signed_at or datetime.now(timezone.utc)),
        "configuration": configuration,
        "passedTests": passed,
        "warnedTests": warned,
        "failedTests": failed,
    }
    if latest:
        predicate["runFinishedAt"] = utc_stamp(max(finished_key(r) for r in latest))
    if url:
        predicate["url"] = url
    statement: dict[str, Any] = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": image.name, "digest": {"sha256": image.digest.split(":", 1)[1]}}],
        "predicateType": TEST_RESULT_PREDICATE,
        "predicate": predicate,
    }
    if policy is not None:
        # Not part of the test-result predicate: the promotion policy these results satisfied.
        statement["predicate"]["configuration"].append(described(
            "pinmatrix-promotion-policy", {k: json.dumps(v) for k, v in policy.items()}))
    return statement


def sbom_statement(image: ImageRef, bom: dict[str, Any]) -> dict[str, Any]:
    """The in-toto statement carrying ``bom`` (a CycloneDX document) for ``image`` (with its digest)."""
    if not image.digest:
        raise RegistryError(f"{image}: an attestation subject needs a digest")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": image.name, "digest": {"sha256": image.digest.split(":", 1)[1]}}],
        "predicateType": SBOM_PREDICATE,
        "predicate": bom,
    }


def lock_for_sbom(registry: Registry, image: ImageRef, lock_file: Path) -> tuple[str | None, str]:
    """(the lock text to build the SBOM from, or None; why not). The lock must exist and, when the image says
    which lock it was built from (``io.pinmatrix.lock.sha256``), be that very lock."""
    if not lock_file.is_file():
        return None, f"{lock_file}: no lock for the cell, so no SBOM is attached"
    text = lock_file.read_text()
    manifest = registry.get_manifest(image.repository, image.reference)
    if manifest is not None and "config" in manifest.json:
        built = registry.config_labels(image.repository, manifest.json).get(LOCK_LABEL)
        if built and built != sha256_bytes(text.encode()):
            return None, (f"{lock_file} changed since {image} was built (its {LOCK_LABEL} label is {built[:12]}...): "
                          "no SBOM is attached")
    return text, ""


@dataclass(frozen=True)
class SbomInputs:
    """What the SBOM is made of beyond the lock: the base's Debian packages and the wheels' Requires-Dist."""

    debian: tuple[DebianPackage, ...]
    requires: dict[str, list[str]]  # canonical name -> Requires-Dist lines, for the wheels found in the cache
    notes: tuple[str, ...]  # what is missing, and why


def sbom_inputs(registry: Registry, image: ImageRef, lock_text: str, wheel_cache: Path,
                lock_source: str = "lock") -> SbomInputs:
    """The Debian packages of ``image``'s base (read from the registry, ``pinmatrix.release.debian``) and the
    Requires-Dist of every locked wheel in the build's ``wheel_cache`` (``pinmatrix.release.requires``). The lock
    (named ``lock_source`` in errors) is read first: a bad one is refused before the registry is asked."""

    packages = locked_packages(lock_text, lock_source)
    base = base_packages(registry, image)
    requires = cached_requires({p.name: p.hashes for p in packages}, wheel_cache)
    notes = [] if base.packages else [base.note]
    if len(requires) < len(packages):
        missing = sorted(p.name for p in packages if p.name not in requires)
        notes.append(f"{len(missing)} of {len(packages)} locked wheels are not in {wheel_cache} "
                     f"({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}): their dependencies in the "
                     "SBOM are the lock's via notes")
    return SbomInputs(base.packages, requires, tuple(notes))


def canonical(statement: dict[str, Any]) -> bytes:
    return json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()


def attach(registry: Registry, image: ImageRef, statement: dict[str, Any], *, now: datetime | None = None,
           signer: CryptoSigner | None = None) -> str:
    """Push ``statement`` as an artifact referring to ``image`` (same repository): a DSSE envelope signed by
    ``signer``, or the bare statement when there is none. Returns the artifact's digest."""

    if not image.digest:
        raise RegistryError(f"{image}: an attestation subject needs a digest")
    subject: Manifest | None = registry.get_manifest(image.repository, image.digest)
    if subject is None:
        raise RegistryError(f"{image}: no such image to attach an attestation to")
    payload = canonical(statement)
    created = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    annotations = {"org.opencontainers.image.created": created,
                   PREDICATE_ANNOTATION: str(statement.get("predicateType", ""))}
    if signer is None:
        return registry.push_artifact(image.repository, subject, artifact_type=IN_TOTO_MEDIA_TYPE, payload=payload,
                                      payload_media_type=IN_TOTO_MEDIA_TYPE, annotations=annotations)
    envelope = canonical(sign_envelope(payload, signer))
    return registry.push_artifact(image.repository, subject, artifact_type=DSSE_MEDIA_TYPE, payload=envelope,
                                  payload_media_type=DSSE_MEDIA_TYPE, annotations=annotations)


def attach_envelope(registry: Registry, image: ImageRef, envelope: bytes, predicate_type: str, *,
                    now: datetime | None = None) -> str:
    """Push a DSSE envelope someone else signed (a GPU host's test results) as it is, as an artifact referring
    to ``image``. Returns the artifact's digest."""
    subject = registry.get_manifest(image.repository, str(image.digest)) if image.digest else None
    if subject is None:
        raise RegistryError(f"{image}: no such image to attach an attestation to")
    created = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return registry.push_artifact(image.repository, subject, artifact_type=DSSE_MEDIA_TYPE, payload=envelope,
                                  payload_media_type=DSSE_MEDIA_TYPE,
                                  annotations={"org.opencontainers.image.created": created,
                                               PREDICATE_ANNOTATION: predicate_type})


@dataclass(frozen=True)
class Published:
    attestation: str  # digest of the test-result artifact
    sbom: str | None  # digest of the SBOM artifact, when a lock was given
    keyid: str | None  # the signing key's id (None: unsigned)
    replaced: tuple[str, ...] = ()  # earlier artifacts of the same kinds and signer, taken off the referrers
    kept: tuple[str, ...] = ()  # earlier ones the registry would not let go (no manifest deletes)
    provenance: str | None = None  # digest of the SLSA provenance artifact, when one was given


def superseded(registry: Registry, image: ImageRef, signer: CryptoSigner | None,
               predicates: Sequence[str]) -> list[str]:
    """The artifacts of ``image`` a new promotion replaces: pinmatrix's statements of ``predicates`` signed by
    ``signer``'s key (bare ones when there is no signer), as ``cosign attest --replace`` does. Another signer's
    evidence is never touched."""

    own = [TrustedKey(signer.public_key, "the signing key")] if signer is not None else []
    out = []
    for att in attachments(registry, image):
        if att.predicate_type not in predicates:
            continue
        if signer is None:
            if att.media_type != DSSE_MEDIA_TYPE:
                out.append(att.digest)
        elif att.media_type == DSSE_MEDIA_TYPE and check_envelope(att.content, own).verified_by is not None:
            out.append(att.digest)
    return out


def publish(registry: Registry, image: ImageRef, statement: dict[str, Any], *, bom: dict[str, Any] | None = None,
            signer: CryptoSigner | None = None, now: datetime | None = None,
            provenance: dict[str, Any] | None = None) -> Published:
    """Attach the test-result statement, (given ``bom``) the SBOM statement and (given ``provenance``) the SLSA
    provenance statement (``release.provenance``) to ``image``; then take the ones they replace (``superseded``)
    off the image's referrers, so re-promotions do not pile them up."""
    kinds = [TEST_RESULT_PREDICATE] + ([SBOM_PREDICATE] if bom is not None else []) \
        + ([str(provenance["predicateType"])] if provenance is not None else [])
    earlier = superseded(registry, image, signer, kinds)
    attestation = attach(registry, image, statement, now=now, signer=signer)
    sbom = attach(registry, image, sbom_statement(image, bom), now=now, signer=signer) if bom is not None else None
    origin = attach(registry, image, provenance, now=now, signer=signer) if provenance is not None else None
    old = set(earlier) - {attestation, sbom, origin}
    kept = registry.remove_referrers(image.repository, str(image.digest), old)
    return Published(attestation, sbom, signer.public_key.keyid if signer is not None else None,
                     replaced=tuple(sorted(old - kept)), kept=tuple(sorted(kept)), provenance=origin)


@dataclass(frozen=True)
class Attachment:
    """One evidence artifact found for an image: its manifest's digest, artifact type, predicate-type
    annotation, subject digest and layer (a DSSE envelope, or a bare statement)."""

    digest: str
    artifact_type: str
    predicate_type: str
    subject: str | None
    media_type: str
    content: bytes


def attachments(registry: Registry, image: ImageRef) -> list[Attachment]:
    """Every evidence artifact (DSSE or bare in-toto) the registry lists as referring to ``image``'s digest.
    The artifact manifests and their layers are fetched by digest (so checked against it); nothing else is
    checked here."""
    if not image.digest:
        raise RegistryError(f"{image}: looking up attestations needs a digest")
    found: list[Attachment] = []
    for desc in registry.referrers(image.repository, image.digest):
        if desc.get("artifactType") not in EVIDENCE_TYPES or not isinstance(desc.get("digest"), str):
            continue
        manifest = registry.get_manifest(image.repository, desc["digest"])
        if manifest is None:
            continue
        doc = manifest.json
        subject = (doc.get("subject") or {}).get("digest")
        predicate = str((doc.get("annotations") or {}).get(PREDICATE_ANNOTATION, ""))
        for layer in layer_descriptors(doc):
            if layer.get("mediaType") not in EVIDENCE_TYPES:
                continue
            content = registry.get_blob(image.repository, layer["digest"], max_bytes=MAX_EVIDENCE_BYTES)
            found.append(Attachment(manifest.digest, str(doc.get("artifactType", "")), predicate, subject,
                                    layer["mediaType"], content))
    return found




