"""Evidence attached to a promoted image: an in-toto Statement (v1) with the test-result predicate (v0.1),
stored in the registry next to the image as an OCI artifact whose ``subject`` is the image's manifest.

Registries with the OCI 1.1 referrers API index it themselves; for registries without it (Debian's
docker-registry, distribution 2.8) the artifact is listed in the OCI 1.1 distribution spec's referrers tag
schema fallback: an image index under the tag ``sha256-<hex of the image digest>``. ``fetch_statements``
reads it back either way. The statement is not signed (cosign is not available on these machines).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from pinmatrix.cell import Cell
from pinmatrix.distribution import ImageRef, Manifest, Registry, RegistryError
from pinmatrix.results import SmokeRecord

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
TEST_RESULT_PREDICATE = "https://in-toto.io/attestation/test-result/v0.1"
IN_TOTO_MEDIA_TYPE = "application/vnd.in-toto+json"

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


def test_result_statement(image: ImageRef, cell: Cell, records: Iterable[SmokeRecord], *,
                          url: str | None = None, policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """The statement for ``image`` (which must carry its digest) from the latest result per smoke x host
    recorded for ``cell`` against that digest."""
    if not image.digest:
        raise RegistryError(f"{image}: an attestation subject needs a digest")
    latest = [r for r in latest_per_smoke_host(records) if r.cell_id == cell.id]
    passed = [test_name(r) for r in latest if r.status in PASSED]
    warned = [test_name(r) for r in latest if r.status in WARNED]
    failed = [test_name(r) for r in latest if r.status in FAILED]
    result = "FAILED" if failed else "WARNED" if warned else "PASSED"
    hosts = {r.host.id: r.host for r in latest}
    configuration: list[dict[str, Any]] = [{
        "name": f"pinmatrix-cell/{cell.id}",
        "annotations": {"stack": cell.stack, "name": cell.name, "python": cell.python, "platform": cell.platform,
                        **{f"pin.{k}": str(v) for k, v in sorted(cell.pins.items())}},
    }]
    for host in hosts.values():
        configuration.append({
            "name": f"pinmatrix-host/{host.id}",
            "annotations": {k: str(v) for k, v in host.to_dict().items() if v is not None and k != "id"},
        })
    predicate: dict[str, Any] = {
        "result": result,
        "configuration": configuration,
        "passedTests": passed,
        "warnedTests": warned,
        "failedTests": failed,
    }
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
        statement["predicate"]["configuration"].append({"name": "pinmatrix-promotion-policy",
                                                        "annotations": {k: json.dumps(v) for k, v in policy.items()}})
    return statement


def attach(registry: Registry, image: ImageRef, statement: dict[str, Any], *, now: datetime | None = None) -> str:
    """Push ``statement`` as an artifact referring to ``image`` (same repository). Returns its digest."""
    if not image.digest:
        raise RegistryError(f"{image}: an attestation subject needs a digest")
    subject: Manifest | None = registry.get_manifest(image.repository, image.digest)
    if subject is None:
        raise RegistryError(f"{image}: no such image to attach an attestation to")
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    created = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return registry.push_artifact(
        image.repository, subject, artifact_type=IN_TOTO_MEDIA_TYPE, payload=payload,
        payload_media_type=IN_TOTO_MEDIA_TYPE,
        annotations={"org.opencontainers.image.created": created, "in-toto.io/predicate-type": TEST_RESULT_PREDICATE},
    )


def fetch_statements(registry: Registry, image: ImageRef) -> list[dict[str, Any]]:
    """Every in-toto statement attached to ``image`` (by digest), each checked to name that digest."""
    if not image.digest:
        raise RegistryError(f"{image}: looking up attestations needs a digest")
    statements = []
    for desc in registry.referrers(image.repository, image.digest, artifact_type=IN_TOTO_MEDIA_TYPE):
        manifest = registry.get_manifest(image.repository, desc["digest"])
        if manifest is None:
            continue
        for layer in manifest.json.get("layers", []):
            if layer.get("mediaType") != IN_TOTO_MEDIA_TYPE:
                continue
            statement = json.loads(registry.get_blob(image.repository, layer["digest"]))
            names = {s.get("digest", {}).get("sha256") for s in statement.get("subject", [])}
            if image.digest.split(":", 1)[1] in names:
                statements.append(statement)
    return statements
