"""Promotion: check a cell's results against the stack's policy, then copy its image BY DIGEST to the
promoted repository, attach the evidence, move the known-good tag and record the decision.

Safety by construction:
- The digest promoted is the one the smokes recorded (``SmokeRecord.image_digest``), never whatever a tag
  names at copy time: a tag that moves after the check cannot get another image promoted.
- Before copying, the cell's build tag must still name that digest; when it does not (the image was
  rebuilt), promotion refuses: the new image has no results yet.
- Order: copy under the immutable ``cell-<id>`` tag, attach the attestation, then move the known-good tag,
  then write ``known-good.toml`` atomically. A failure leaves the known-good tag and file untouched.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pinmatrix.cell import Cell
from pinmatrix.errors import PinmatrixError
from pinmatrix.imageref import ImageRef
from pinmatrix.project.catalogue import matches
from pinmatrix.project.known_good import record_promotion
from pinmatrix.project.policy import PromotionPolicy
from pinmatrix.registry.client import Registry
from pinmatrix.release.attest import (
    TEST_RESULT_PREDICATE,
    attach_envelope,
    latest_per_smoke_host,
    publish,
    test_result_statement,
)
from pinmatrix.release.driver_evidence import driver_range_problems
from pinmatrix.release.hostmatch import arch_covers, gpu_value_capability, host_matches_gpu
from pinmatrix.release.hostsign import HostAttestation, SignedResults, host_key_descriptors
from pinmatrix.release.provenance import image_facts, provenance_statement
from pinmatrix.release.sbom import cell_bom
from pinmatrix.results.store import SmokeRecord
from pinmatrix.statuses import INFRA_STATUSES

if TYPE_CHECKING:
    from pinmatrix.release.debian import DebianPackage


class PromotionRefused(PinmatrixError):
    """The policy is not met (or the image changed since it was tested): nothing was promoted. ``reasons``
    holds each reason on its own, as the JSON output lists them."""

    exit_code = 1

    def __init__(self, message: str, reasons: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.reasons = list(reasons) or [message]


def _refused(cell: Cell, *reasons: str) -> PromotionRefused:
    return PromotionRefused(f"cell {cell.id} ({cell.name}) not promoted: " + "; ".join(reasons), reasons)


# ------------------------------------------------------------------------------------------------- check


@dataclass(frozen=True)
class Evidence:
    smoke: str
    gpu: str
    host_id: str
    host: str
    status: str
    run_id: str
    finished_at: str
    image_digest: str | None


@dataclass
class Check:
    cell_id: str
    problems: list[str] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    digest: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def required_gpus(cell: Cell, policy: PromotionPolicy, stack_gpus: Sequence[str] = ()) -> list[str]:
    """The GPUs a cell must be clean on. "*" means any host (a CPU-only cell under "every-gpu")."""
    if isinstance(policy.hosts, list):
        return list(policy.hosts)
    if not cell.gpu_required:
        return ["*"]
    own = [g for g in str(cell.pins.get("gpu", "")).replace(",", " ").split() if g]
    gpus: list[str] = list(own)
    for g in stack_gpus:
        cap = gpu_value_capability(g)
        if g in gpus or cap is None:
            continue
        ok, _ = arch_covers(cell.arch_flags, cell.compute_capability, f"{cap[0]}.{cap[1]}")
        if ok:
            gpus.append(g)
    return gpus or ["*"]


def required_smoke_names(cell: Cell, policy: PromotionPolicy,
                         catalogue: Sequence[str] | None = None) -> tuple[list[str], list[str]]:
    """(smoke names that must be clean, required selectors that select none of the cell's smokes).
    Selectors may name groups ('xformers-tiled-matmul-boundary' = its '-output', '-a', '-b' smokes); with
    the catalogue's names they are expanded to the smokes that run."""

    cell_sel = list(cell.smokes)
    req_sel = cell_sel + [s for s in policy.required_smokes if s != "*" and s not in cell_sel] \
        if "*" in policy.required_smokes else list(policy.required_smokes)
    if catalogue is None:
        unknown = [p for p in req_sel if not any(matches(c, p) or matches(p, c) for c in cell_sel)]
        return [p for p in req_sel if p not in unknown], unknown
    selected = [n for n in catalogue if any(matches(p, n) for p in cell_sel)]
    names = [n for n in selected if any(matches(p, n) for p in req_sel)]
    unknown = [p for p in req_sel if not any(matches(p, n) for n in selected)]
    return names, unknown


def check_policy(cell: Cell, policy: PromotionPolicy, records: Iterable[SmokeRecord],
                 stack_gpus: Sequence[str] = (), catalogue: Sequence[str] | None = None,
                 dropped: Mapping[str, str] | None = None) -> Check:
    """Whether the results recorded for ``cell`` meet ``policy``; problems are full sentences. ``dropped``:
    per smoke, why its recorded results were not counted (``trusted_hosts``: not signed by a trusted host)."""

    every = [r for r in records if r.cell_id == cell.id]
    records = [r for r in every if r.status not in INFRA_STATUSES]  # the harness failed: never the cell's
    check = Check(cell_id=cell.id)

    def counted_host_run(r: SmokeRecord) -> bool:
        diff = (r.environment or {}).get("host_vs_lock") or {}
        return r.image_digest is None and policy.host_runs == "identical" and diff.get("identical") is True

    host_ok = {(r.smoke, r.host.id, r.run_id) for r in records if counted_host_run(r)}
    smokes, unknown = required_smoke_names(cell, policy, catalogue)
    for s in unknown:
        check.problems.append(f"required smoke {s!r} is not selected for stack {cell.stack!r}")
    gpus = required_gpus(cell, policy, stack_gpus)
    accept = set(policy.accept)
    clean: list[tuple[str, str, list[SmokeRecord]]] = []  # (smoke, where, records) whose latest are clean
    for smoke in smokes:
        for gpu in gpus:
            where = "any host" if gpu == "*" else f"a {gpu} host"
            matching = [r for r in records if (r.smoke == smoke if catalogue is not None else matches(smoke, r.smoke))
                        and (gpu == "*" or host_matches_gpu(gpu, r.host.capability, r.host.gpu_name))]
            if not matching:
                errors = sum(1 for r in every if r.status in INFRA_STATUSES and r.smoke == smoke)
                check.problems.append(f"missing result: smoke {smoke!r} has no result on {where}"
                                      + (f" ({errors} infrastructure error(s), not counted)" if errors else "")
                                      + _dropped_note(smoke, dropped, catalogue is not None))
                continue
            latest = latest_per_smoke_host(matching)  # per host, by finish time
            bad = [r for r in latest if r.status not in accept]
            for r in bad:
                cls = f" [{r.failure_class}]" if r.failure_class else ""
                reason = f": {r.reason}" if r.reason else ""
                check.problems.append(f"required smoke {smoke!r} is {r.status}{cls} on {r.host.label()} "
                                      f"(run {r.run_id}){reason}")
            if not bad:
                clean.append((smoke, where, matching))
                check.evidence += [Evidence(smoke=r.smoke, gpu=gpu, host_id=r.host.id, host=r.host.label(),
                                            status=r.status, run_id=r.run_id, finished_at=r.finished_at,
                                            image_digest=r.image_digest) for r in latest]
    digests: dict[str | None, list[str]] = defaultdict(list)
    for ev in check.evidence:
        if ev.image_digest is None and (ev.smoke, ev.host_id, ev.run_id) in host_ok:
            continue  # a host run the policy counts: it was the cell's environment, package for package
        digests[ev.image_digest].append(ev.smoke)
    if None in digests:
        how = ("the stack's promotion policy counts host runs only when the host matched the cell's lock "
               "(host_runs = \"identical\"), and these did not" if policy.host_runs == "identical" else
               "the stack's promotion policy does not count host runs (host_runs = \"refuse\")")
        check.problems.append(f"results of {', '.join(sorted(set(digests[None])))} were not measured in an image "
                              f"(no image digest recorded): {how}")
    real = sorted(d for d in digests if d)
    if len(real) > 1:
        check.problems.append("the results were measured on different images: " +
                              "; ".join(f"{d} ({', '.join(sorted(set(digests[d])))})" for d in real))
    elif len(real) == 1:
        check.digest = real[0]
    check.problems += driver_range_problems(
        policy.drivers, smokes, records, lambda s, r: r.smoke == s if catalogue is not None else matches(s, r.smoke),
        lambda r: r.status in accept and (r.image_digest == check.digest or counted_host_run(r)))
    # Clean runs count only on the image that would be promoted: a pass on image A and one on image B are
    # one clean run of B, not two.
    for smoke, where, matching in clean:
        runs = {r.run_id for r in matching if r.status in accept
                and (r.image_digest == check.digest or counted_host_run(r))}
        if len(runs) < policy.min_clean_runs:
            on = f" of {check.digest}" if check.digest else ""
            check.problems.append(f"smoke {smoke!r} has {len(runs)} clean run(s){on} on {where}, "
                                  f"the policy needs {policy.min_clean_runs}")
    if not check.evidence and not check.problems:
        check.problems.append("no required results")
    return check


def _dropped_note(smoke: str, dropped: Mapping[str, str] | None, exact: bool) -> str:
    """Why the recorded results of ``smoke`` (a selector, when not ``exact``) did not count, when they did not."""
    for name, why in (dropped or {}).items():
        if name == smoke if exact else matches(smoke, name):
            return f" (its recorded result does not count: {why})"
    return ""


# --------------------------------------------------------------------------------------------- promote


@dataclass
class Plan:
    cell: Cell
    source: ImageRef  # the cell's build tag
    digest: str
    target: ImageRef  # promoted repository (no tag/digest)
    tags: list[str]
    check: Check
    policy: PromotionPolicy
    signed: SignedResults | None = None  # under trusted_hosts: the host-signed results counted

    def host_attestations(self) -> list[HostAttestation]:
        """The host-signed attestations of the promoted digest: attached next to the project's evidence."""
        return [a for a in (self.signed.attestations if self.signed else []) if a.digest == self.digest]

    def describe(self) -> list[str]:
        ref = self.source.with_digest(self.digest)
        return [
            f"copy {ref} -> {self.target.name}@{self.digest} (by digest)",
            f"tag {self.target.name}:{self.tags[0]}",
            f"attach in-toto test-result attestation (and SBOM, SLSA provenance) to {self.target.name}@{self.digest}",
            *(f"attach the host-signed attestation of host {a.host.id} (key {a.keyid[:12]})"
              for a in self.host_attestations()),
            f"move {self.target.name}:{self.policy.tag} -> {self.digest}",
            f"record {self.cell.stack} {self.cell.id} in known-good.toml",
        ]


def promoted_repository(registry_prefix: str, stack: str, policy: PromotionPolicy) -> ImageRef:
    base = ImageRef.parse(f"{registry_prefix.rstrip('/')}/{policy.repository}/{stack}")
    return base


def plan_promotion(cell: Cell, policy: PromotionPolicy, records: Iterable[SmokeRecord], *, source: ImageRef,
                   registry_prefix: str, registry: Registry, stack_gpus: Sequence[str] = (),
                   catalogue: Sequence[str] | None = None, signed: SignedResults | None = None) -> Plan:
    """Check the policy and the registry; raise PromotionRefused with every reason, or return the plan. Under
    ``trusted_hosts``, ``records`` are ``signed.kept`` and ``signed.dropped`` says why the others do not count."""
    check = check_policy(cell, policy, records, stack_gpus, catalogue, signed.dropped if signed else None)
    if not check.ok:
        raise _refused(cell, *check.problems)
    if check.digest is None:  # only host runs the policy counts: promote the cell's image built from that lock
        built = registry.resolve(source)
        if built is None:
            raise _refused(cell, f"image {source} is not in the registry")
        check.digest = built
    # The image the smokes ran on must still exist (it is what gets copied) ...
    if registry.get_manifest(source.repository, check.digest) is None:
        raise _refused(cell, f"the tested image {source.name}@{check.digest} is no longer in the registry")
    # ... and still be what the cell's build tag names: a rebuilt image has no results yet.
    current = registry.resolve(source)
    if current is None:
        raise _refused(cell, f"image {source} is not in the registry")
    if current != check.digest:
        raise _refused(cell, f"digest no longer matches: {source} now names {current}, but the smokes ran on "
                             f"{check.digest}; run the smokes on the new image first")
    target = promoted_repository(registry_prefix, cell.stack, policy)
    if target.registry != source.registry:
        raise PromotionRefused(f"promoted repository {target.name} is on another registry than {source.name}")
    return Plan(cell=cell, source=source, digest=check.digest, target=target, tags=[f"cell-{cell.id}"],
                check=check, policy=policy, signed=signed)


@dataclass(frozen=True)
class Promotion:
    stack: str
    cell_id: str
    digest: str
    reference: str  # name@digest to pull
    attestation: str
    promoted_at: str
    sbom: str | None = None  # digest of the SBOM artifact
    provenance: str | None = None  # digest of the SLSA provenance artifact
    signed_by: str | None = None  # key id of the evidence's signature (None: unsigned)
    host_attestations: tuple[str, ...] = ()  # digests of the host-signed attestations attached


def execute(plan: Plan, registry: Registry, records: Iterable[SmokeRecord], known_good: Path, *,
            now: datetime | None = None, signer: Any = None, lock_text: str | None = None,
            debian: Sequence[DebianPackage] = (), requires: Mapping[str, Sequence[str]] | None = None,
            matrix_sha256: str | None = None) -> Promotion:
    """``signer`` (a securesystemslib signer, ``pinmatrix.release.signing.load_signer``) signs the evidence as DSSE
    envelopes; ``lock_text`` (the cell's lock) adds a CycloneDX SBOM to it, with ``debian`` (the base's
    ``DebianPackage`` records) and ``requires`` (the wheels' Requires-Dist: ``pinmatrix.release.attest.sbom_inputs``).
    The SLSA provenance (``release.provenance``) names the lock's files and ``matrix_sha256`` (the matrix.toml read)."""

    cell, policy = plan.cell, plan.policy
    moment = now or datetime.now(timezone.utc)
    stamp = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    bom = cell_bom(cell, lock_text, moment=moment, lock_source=f"lock of cell {cell.id}", debian=debian,
                   requires=requires) if lock_text else None
    digest = registry.copy(plan.source.with_digest(plan.digest), plan.target.repository, plan.tags)
    if digest != plan.digest:  # copy() verifies, this is the belt to its braces
        raise PromotionRefused(f"copied {digest}, expected {plan.digest}")
    promoted = plan.target.with_digest(digest)
    tested = [r for r in records if r.cell_id == cell.id and r.image_digest == digest]
    hosts = plan.host_attestations()
    host_artifacts = [attach_envelope(registry, promoted, a.envelope, TEST_RESULT_PREDICATE, now=moment) for a in hosts]
    statement = test_result_statement(promoted, cell, tested, policy=policy.model_dump(), signed_at=moment)
    if hosts:
        statement["predicate"]["configuration"] += host_key_descriptors(hosts, host_artifacts)
    provenance = provenance_statement(promoted, cell, image_facts(registry, promoted), matrix_sha256=matrix_sha256,
                                      lock_text=lock_text, started=moment,
                                      finished=moment if now is not None else datetime.now(timezone.utc),
                                      lock_source=f"lock of cell {cell.id}")
    published = publish(registry, promoted, statement, bom=bom, signer=signer, now=moment, provenance=provenance)
    attestation = published.attestation
    registry.copy(promoted, plan.target.repository, [policy.tag])
    entry = {
        "stack": cell.stack,
        "cell_id": cell.id,
        "cell_name": cell.name,
        "digest": digest,
        "reference": str(promoted),
        "tag": f"{plan.target.name}:{policy.tag}",
        "source": str(plan.source.with_digest(digest)),
        "attestation": f"{plan.target.name}@{attestation}",
        "sbom": f"{plan.target.name}@{published.sbom}" if published.sbom else None,
        "provenance": f"{plan.target.name}@{published.provenance}" if published.provenance else None,
        "signed_by": published.keyid,
        "promoted_at": stamp,
        "gpu_required": cell.gpu_required,
        "min_driver": cell.min_driver,
        "compute_capability": cell.compute_capability,
        "arch_flags": list(cell.arch_flags),
        "pins": dict(cell.pins),
        "policy": policy.model_dump(),
        "evidence": [
            {k: v for k, v in ev.__dict__.items() if v is not None} for ev in plan.check.evidence
        ],
    }
    record_promotion(known_good, entry)
    return Promotion(stack=cell.stack, cell_id=cell.id, digest=digest, reference=str(promoted),
                     attestation=attestation, promoted_at=stamp, sbom=published.sbom, signed_by=published.keyid,
                     provenance=published.provenance,
                     host_attestations=tuple(host_artifacts))
