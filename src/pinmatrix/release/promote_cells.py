"""Promotion of the selected cells, one after another: the policy checked against the results, then for each
cell that meets it the copy by digest, its evidence and its known-good entry (``release.promote``). What
happened to each cell is an ``PromotionOutcome``; the command only prints them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pinmatrix.cell import Cell
from pinmatrix.errors import PinmatrixError
from pinmatrix.hashing import sha256_bytes
from pinmatrix.imageref import ImageRef, image_ref
from pinmatrix.matrix.expand import Expansion
from pinmatrix.paths import SIGNING_KEY
from pinmatrix.project.known_good import read_known_good
from pinmatrix.project.lockfile import lock_path
from pinmatrix.project.matrix_toml import Matrix
from pinmatrix.project.policy import policy_for, trusted_host_keys
from pinmatrix.registry.client import Registry
from pinmatrix.release.attest import lock_for_sbom, sbom_inputs
from pinmatrix.release.hostsign import SignedResults, signed_only
from pinmatrix.release.promote import Plan, PromotionRefused, execute, plan_promotion
from pinmatrix.release.signing import load_public_key
from pinmatrix.results.signedfile import kept_envelopes
from pinmatrix.results.store import ResultsStore, SmokeRecord
from pinmatrix.results.storefile import ResultsError

UNSIGNED_WARNING = (f"warning: no signing key (--signing-key, PINMATRIX_SIGNING_KEY or {SIGNING_KEY} from "
                    "`pinmatrix keygen`): the evidence is unsigned, and `pinmatrix pull` and `verify` will refuse "
                    "these images")


@dataclass
class PromoteSettings:
    """What one ``promote`` run is asked for, from the command line over matrix.toml."""

    matrix: Matrix
    expansion: Expansion
    cells: Sequence[Cell]
    registry_prefix: str  # <registry>[/<path>]: the build tags and the promoted repositories are under it
    known_good: Path
    store: ResultsStore | None
    signer: Any | None  # a securesystemslib signer (release.signing.load_signer); None: unsigned evidence
    cache_dir: Path  # the wheel cache the SBOM's Requires-Dist graph is read from
    catalogue: list[str] | None
    force: bool = False
    dry_run: bool = False


@dataclass
class PromotionOutcome:
    """What happened to one cell: promoted, already-promoted, would-promote or refused (with its reasons)."""

    cell: Cell
    outcome: str
    digest: str | None = None
    reference: str | None = None
    attestation: str | None = None
    sbom: str | None = None
    provenance: str | None = None
    signed_by: str | None = None
    host_attestations: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    error: PromotionRefused | None = None

    def to_json(self) -> dict[str, object]:
        data = {k: v for k, v in asdict(self).items() if k not in ("cell", "error")}
        return {"cell": self.cell.id, "name": self.cell.name, "stack": self.cell.stack, **data}


def promote_cells(settings: PromoteSettings, on_outcome: Callable[[PromotionOutcome], None],
                  note: Callable[[str], None]) -> list[PromotionOutcome]:
    """Every selected cell's outcome, in order; ``on_outcome`` hears each one as it happens, ``note`` the
    warnings and notes (unsigned evidence, a lock the SBOM could not use). Stops at the first refusal when only
    one cell is selected: a refusal's outcome carries its error."""
    registry = Registry(settings.registry_prefix.split("/", 1)[0])
    already = {(e["cell_id"], e["digest"]) for e in read_known_good(settings.known_good)}
    outcomes: list[PromotionOutcome] = []
    warn_unsigned = settings.signer is None
    for cell in settings.cells:
        records = settings.store.query(cell_id=cell.id, probe_params={}) if settings.store else []  # no probes
        signed = _signed(settings, cell, records)
        if signed is not None:
            records = signed.kept  # under trusted_hosts: the host-signed copies, nothing else
        plan = _plan(settings, registry, cell, records, signed)
        if isinstance(plan, PromotionOutcome):
            outcome = plan
        elif (cell.id, plan.digest) in already and not settings.force:
            outcome = PromotionOutcome(cell, "already-promoted", digest=plan.digest)
        elif settings.dry_run:
            outcome = PromotionOutcome(cell, "would-promote", digest=plan.digest, steps=plan.describe())
        else:
            if warn_unsigned:
                warn_unsigned = False
                note(UNSIGNED_WARNING)
            outcome = _promote(settings, registry, plan, records, note)
        outcomes.append(outcome)
        on_outcome(outcome)
    return outcomes


def _signed(settings: PromoteSettings, cell: Cell, records: list[SmokeRecord]) -> SignedResults | None:
    """Under the stack's ``trusted_hosts``: which of ``records`` a trusted host signed (the envelopes
    ``results --import-signed`` kept beside the store); None when the policy does not ask for it."""
    policy = policy_for(settings.matrix, cell.stack)
    if policy.trusted_hosts is None:
        return None
    keys = [load_public_key(p) for p in trusted_host_keys(settings.matrix, cell.stack, policy)]
    try:
        envelopes = kept_envelopes(settings.store.path) if settings.store else []
    except ResultsError as err:
        raise PinmatrixError(str(err)) from None
    return signed_only(records, envelopes, keys)


def _plan(settings: PromoteSettings, registry: Registry, cell: Cell, records: list[SmokeRecord],
          signed: SignedResults | None = None) -> Plan | PromotionOutcome:
    policy = policy_for(settings.matrix, cell.stack)
    stack_gpus = sorted({c.pins["gpu"] for c in settings.expansion.cells if c.stack == cell.stack and "gpu" in c.pins})
    source = ImageRef.parse(image_ref(cell, settings.registry_prefix))  # the build tag, <registry>/<stack>:<cell id>
    try:
        return plan_promotion(cell, policy, records, source=source, registry_prefix=settings.registry_prefix,
                              registry=registry, stack_gpus=stack_gpus, catalogue=settings.catalogue,
                              signed=signed)
    except PromotionRefused as err:
        return PromotionOutcome(cell, "refused", reasons=err.reasons, error=err)


def _promote(settings: PromoteSettings, registry: Registry, plan: Plan, records: list[SmokeRecord],
             note: Callable[[str], None]) -> PromotionOutcome:
    cell = plan.cell
    tested = plan.source.with_digest(plan.digest)
    lock_text, why_not = lock_for_sbom(registry, tested, lock_path(cell, settings.matrix.root))
    matrix_sha = sha256_bytes(settings.matrix.text.encode())  # the matrix.toml read, named by the provenance
    if lock_text is None:
        note(f"note: cell {cell.id}: {why_not}")
        result = execute(plan, registry, records, settings.known_good, signer=settings.signer,
                         matrix_sha256=matrix_sha)
    else:
        inputs = sbom_inputs(registry, tested, lock_text, settings.cache_dir, lock_source=f"lock of cell {cell.id}")
        for line in inputs.notes:
            note(f"note: cell {cell.id}: {line}")
        result = execute(plan, registry, records, settings.known_good, signer=settings.signer, lock_text=lock_text,
                         debian=inputs.debian, requires=inputs.requires, matrix_sha256=matrix_sha)
    return PromotionOutcome(cell, "promoted", digest=result.digest, reference=result.reference,
                   attestation=result.attestation, sbom=result.sbom, provenance=result.provenance,
                   signed_by=result.signed_by,
                   host_attestations=list(result.host_attestations))
