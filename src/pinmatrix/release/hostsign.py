"""Results a GPU host signs with its own key (``pinmatrix keygen --host``), so that what a promotion counts
can be traced to the machine that ran it, whoever carried the results in between.

One in-toto Statement (v1) per cell x image digest x host, with the test-result predicate (v0.1): its subject
is the image digest the smokes ran on (named ``pinmatrix-cell/<id>``: the host does not know where the image
will be promoted to), its ``configuration`` the cell and the host's fingerprint (GPU, driver, capability), its
lists each smoke's latest verdict, and ``pinmatrixRecords`` (a field the test-result predicate does not define,
which in-toto consumers ignore) every record itself, so they can be imported and counted. Each statement is a
DSSE envelope signed by the host key (``pinmatrix.release.signing``).

When a stack's promotion policy names ``trusted_hosts``, ``signed_only`` keeps the results a trusted host
signed for the very digest they claim, and says for each smoke it drops why: unsigned, signed by a key the
policy does not trust, signed for another digest, or an envelope whose signature does not verify.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from securesystemslib.signer import SSlibKey

from pinmatrix.errors import PinmatrixError
from pinmatrix.hashing import sha256_bytes
from pinmatrix.hostprobe import HostFingerprint
from pinmatrix.release.attest import (
    FAILED,
    PASSED,
    STATEMENT_TYPE,
    TEST_RESULT_PREDICATE,
    WARNED,
    described,
    finished_key,
    latest_per_smoke_host,
    utc_stamp,
)
from pinmatrix.release.signing import IN_TOTO_PAYLOAD_TYPE, TrustedKey, check_envelope, parse_envelope, sign_envelope
from pinmatrix.results.signedfile import keep_envelope
from pinmatrix.results.store import ResultsStore, SmokeRecord
from pinmatrix.results.storefile import ResultsError
from pinmatrix.statuses import INFRA_STATUSES

if TYPE_CHECKING:
    from securesystemslib.signer import CryptoSigner

RECORDS_FIELD = "pinmatrixRecords"
CELL_PREFIX = "pinmatrix-cell/"
HOST_PREFIX = "pinmatrix-host/"
TRUSTED_HOST_PREFIX = "pinmatrix-trusted-host/"
MAX_RECORDS = 2048  # records in one statement: a cell's smokes, on one host and image, over many runs


class HostSignatureError(PinmatrixError):
    """A host-signed envelope that is refused: forged, signed by an untrusted key, malformed."""


def _hex(digest: str) -> str:
    return digest.split(":", 1)[1]


def host_statement(records: Sequence[SmokeRecord], signed_at: datetime) -> dict[str, Any]:
    """The statement for ``records``: all of one cell, one image digest and one host."""
    first = records[0]
    digest = str(first.image_digest)
    latest = latest_per_smoke_host(r for r in records if r.status not in INFRA_STATUSES)
    names = {s: [r.smoke for r in latest if r.status in statuses] for s, statuses in
             (("passed", PASSED), ("warned", WARNED), ("failed", FAILED))}
    host = first.host
    predicate: dict[str, Any] = {
        "result": "FAILED" if names["failed"] else "WARNED" if names["warned"] else "PASSED",
        "signedAt": utc_stamp(signed_at),
        "configuration": [
            described(CELL_PREFIX + first.cell_id, {"stack": first.stack}),
            described(HOST_PREFIX + host.id, {k: str(v) for k, v in host.to_dict().items()
                                              if v is not None and k != "id"}),
        ],
        "passedTests": names["passed"],
        "warnedTests": names["warned"],
        "failedTests": names["failed"],
        RECORDS_FIELD: [{k: v for k, v in r.to_dict().items() if k != "log_path"} for r in records],
    }
    if latest:
        predicate["runFinishedAt"] = utc_stamp(max(finished_key(r) for r in latest))
    return {"_type": STATEMENT_TYPE,
            "subject": [{"name": CELL_PREFIX + first.cell_id, "digest": {"sha256": _hex(digest)}}],
            "predicateType": TEST_RESULT_PREDICATE, "predicate": predicate}


def signed_exports(records: Iterable[SmokeRecord], signer: CryptoSigner, *,
                   now: datetime | None = None) -> list[dict[str, Any]]:
    """One DSSE envelope per cell x image digest x host of ``records``, signed by ``signer``. Results measured
    outside an image (no digest) and bisect probes are no image's evidence: left out."""
    groups: dict[tuple[str, str, str], list[SmokeRecord]] = defaultdict(list)
    for rec in records:
        if rec.image_digest and not rec.is_probe:
            groups[(rec.cell_id, rec.image_digest, rec.host.id)].append(rec)
    moment = now or datetime.now(timezone.utc)
    return [sign_envelope(json.dumps(host_statement(groups[key], moment), sort_keys=True,
                                     separators=(",", ":")).encode(), signer)
            for key in sorted(groups)]


@dataclass(frozen=True)
class HostAttestation:
    """A host-signed statement, read: who signed it, for which image and cell, on which host, what ran."""

    key: SSlibKey
    key_source: str
    digest: str
    cell_id: str
    stack: str
    host: HostFingerprint
    records: tuple[SmokeRecord, ...]
    envelope: bytes = field(repr=False)

    @property
    def keyid(self) -> str:
        return str(self.key.keyid)

    def summary(self) -> list[tuple[str, str]]:
        """(smoke, status) of each smoke's latest record."""
        return [(r.smoke, r.status) for r in latest_per_smoke_host(self.records)]


def read_host_statement(payload: bytes) -> tuple[str, str, str, HostFingerprint, tuple[SmokeRecord, ...]]:
    """(digest, cell id, stack, host, records) of a host statement's payload; ValueError says what is wrong.
    Every record must be of the statement's cell, digest and host."""
    statement = json.loads(payload)
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE \
            or statement.get("predicateType") != TEST_RESULT_PREDICATE:
        raise ValueError("not an in-toto test-result statement")
    subjects = statement.get("subject")
    hexes = [str((s.get("digest") or {}).get("sha256", "")) for s in subjects or [] if isinstance(s, dict)]
    if len(hexes) != 1 or len(hexes[0]) != 64 or any(c not in "0123456789abcdef" for c in hexes[0]):
        raise ValueError("its subject is not one sha256 image digest")
    digest = "sha256:" + hexes[0]
    predicate: dict[str, Any] = statement["predicate"] if isinstance(statement.get("predicate"), dict) else {}
    config = {str(c.get("name", "")): c.get("annotations") or {} for c in predicate.get("configuration") or []
              if isinstance(c, dict)}
    cells = [n[len(CELL_PREFIX):] for n in config if n.startswith(CELL_PREFIX)]
    if len(cells) != 1:
        raise ValueError("it names no single pinmatrix cell")
    rows = predicate.get(RECORDS_FIELD)
    if not isinstance(rows, list) or not rows or len(rows) > MAX_RECORDS:
        raise ValueError(f"its {RECORDS_FIELD} is not a list of 1 to {MAX_RECORDS} records")
    try:
        records = tuple(SmokeRecord.from_dict(r) for r in rows)
    except (ResultsError, AttributeError, TypeError) as err:
        raise ValueError(str(err)) from None
    host = records[0].host
    for rec in records:
        if (rec.cell_id, rec.image_digest, rec.host.id) != (cells[0], digest, host.id):
            raise ValueError(f"it carries a record of cell {rec.cell_id}, image {rec.image_digest}, host "
                             f"{rec.host.id} under the subject {digest} of cell {cells[0]} on host {host.id}")
    return digest, cells[0], str(config[CELL_PREFIX + cells[0]].get("stack", "")), host, records


def open_host_envelope(envelope: bytes, keys: Sequence[TrustedKey], source: str) -> HostAttestation:
    """The attestation ``envelope`` carries, once a key of ``keys`` verified it; HostSignatureError (one line,
    naming ``source``) when none did, or when what it signed is not a host statement."""
    check = check_envelope(envelope, keys)
    if check.verified_by is None:
        tail = "" if check.foreign else " (payload edited?)"
        raise HostSignatureError(f"{source}: {check.problem}{tail}")
    if check.payload_type != IN_TOTO_PAYLOAD_TYPE:
        raise HostSignatureError(f"{source}: signed payload type is {check.payload_type!r}, not {IN_TOTO_PAYLOAD_TYPE}")
    try:
        digest, cell_id, stack, host, records = read_host_statement(check.payload)
    except ValueError as err:
        raise HostSignatureError(f"{source}: the signed statement is refused: {err}") from None
    key = check.verified_by
    return HostAttestation(key.key, key.source, digest, cell_id, stack, host, records, envelope)


def host_key_descriptors(attestations: Sequence[HostAttestation], artifacts: Sequence[str]) -> list[dict[str, Any]]:
    """For the project-signed statement of a promotion: each host key whose attestation was counted and
    attached (``TRUSTED_HOST_PREFIX<keyid>``, the key in securesystemslib's form, the artifacts it signed), so
    that ``verify``, trusting the project's key, can check the host's signatures too."""
    by_key: dict[str, dict[str, Any]] = {}
    for att, artifact in zip(attestations, artifacts, strict=True):
        entry = by_key.setdefault(att.keyid, {"key": att.key, "artifacts": []})
        entry["artifacts"].append(artifact)
    return [described(TRUSTED_HOST_PREFIX + keyid, {"key": json.dumps(entry["key"].to_dict(), sort_keys=True),
                                                      "attestations": " ".join(entry["artifacts"])})
            for keyid, entry in sorted(by_key.items())]


def named_host_keys(statement: dict[str, Any]) -> list[TrustedKey]:
    """The host keys a (project-signed) promotion statement names (``host_key_descriptors``); one that cannot
    be read is left out (it then verifies nothing)."""
    keys: list[TrustedKey] = []
    for item in (statement.get("predicate") or {}).get("configuration") or []:
        name = str(item.get("name", "")) if isinstance(item, dict) else ""
        if not name.startswith(TRUSTED_HOST_PREFIX):
            continue
        try:
            data = json.loads(str((item.get("annotations") or {}).get("key", "")))
            key = SSlibKey.from_dict(name[len(TRUSTED_HOST_PREFIX):], dict(data))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
        keys.append(TrustedKey(key, "named by the promotion's signed statement"))
    return keys


# ------------------------------------------------------------------------------------------ promotion


@dataclass
class SignedResults:
    """What ``signed_only`` kept: the signed copies of the records it counts, the attestations carrying them
    (attached at promotion), and per smoke it dropped results of, why."""

    kept: list[SmokeRecord] = field(default_factory=list)
    attestations: list[HostAttestation] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)


def _run_key(rec: SmokeRecord) -> tuple[str, str, str, str]:
    return rec.cell_id, rec.host.id, rec.smoke, rec.run_id


def _unverified(envelopes: Sequence[bytes], keys: Sequence[TrustedKey]) -> dict[tuple[str, str, str, str], str]:
    """Per run key that an envelope no trusted key verifies claims: why it does not count."""
    claimed: dict[tuple[str, str, str, str], str] = {}
    for envelope in envelopes:
        check = check_envelope(envelope, keys)
        if check.verified_by is not None:
            continue
        try:
            records = read_host_statement(parse_envelope(envelope)[0])[4]
        except ValueError:
            continue
        why = (f"signed only by a key the policy's trusted_hosts does not list ({check.problem})" if check.foreign
               else f"its envelope does not verify: {check.problem} (payload edited?)")
        for rec in records:
            claimed.setdefault(_run_key(rec), why)
    return claimed


def signed_only(records: Iterable[SmokeRecord], envelopes: Sequence[bytes], keys: Sequence[TrustedKey]) -> SignedResults:
    """Of ``records``, the ones an envelope signed by one of ``keys`` carries for the same image digest and
    status (the signed copy is kept), and why each other smoke's results do not count."""
    signed: dict[tuple[str, str, str, str], tuple[SmokeRecord, HostAttestation]] = {}
    for number, envelope in enumerate(envelopes, 1):
        try:
            att = open_host_envelope(envelope, keys, f"signed result {number}")
        except HostSignatureError:
            continue  # _unverified says why, for the results it claims
        for rec in att.records:
            signed[_run_key(rec)] = (rec, att)
    unverified = _unverified(envelopes, keys)
    out = SignedResults()
    used: dict[str, HostAttestation] = {}
    for rec in records:
        found = signed.get(_run_key(rec))
        if found is not None and found[0].image_digest == rec.image_digest and found[0].status == rec.status:
            out.kept.append(found[0])
            used.setdefault(sha256_bytes(found[1].envelope), found[1])
            continue
        if found is not None and found[0].image_digest != rec.image_digest:
            why = f"the host signed it for another digest ({found[0].image_digest}), not {rec.image_digest}"
        elif found is not None:
            why = f"the host signed {found[0].status}, the store says {rec.status}"
        else:
            why = unverified.get(_run_key(rec), "unsigned: no envelope signed by a trusted host carries it")
        out.dropped.setdefault(rec.smoke, why)
    out.attestations = list(used.values())
    return out


def open_all(envelopes: Sequence[bytes], keys: Sequence[TrustedKey], source: str) -> list[HostAttestation]:
    """Every envelope of ``source`` opened with ``keys``; the first refused one is HostSignatureError (one
    line), so a caller writes nothing unless all of them verify."""
    if not keys:
        raise HostSignatureError(f"{source}: no host public key to verify the signed results with: pass --key HOST.pub")
    return [open_host_envelope(e, keys, f"{source}: envelope {n}") for n, e in enumerate(envelopes, 1)]


def import_signed(store: ResultsStore, attestations: Sequence[HostAttestation]) -> int:
    """Record the verified ``attestations``' records in ``store`` and keep their envelopes beside it, where
    ``promote`` reads them under ``trusted_hosts``. Returns the records written."""
    written = store.record_many([r for a in attestations for r in a.records])
    for att in attestations:
        keep_envelope(store.path, att.envelope)
    return written
