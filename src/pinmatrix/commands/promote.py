"""``pinmatrix promote``: check results against the stack's promotion policy, then promote by digest."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

from pinmatrix.cell import Cell
from pinmatrix.commands._common import add_matrix_argument, examples, existing_file
from pinmatrix.commands._registry import pushing
from pinmatrix.errors import PinmatrixError
from pinmatrix.image.settings import image_ref
from pinmatrix.imageref import ImageRef
from pinmatrix.matrix.selection import load, select
from pinmatrix.paths import KNOWN_GOOD_FILE, SIGNING_KEY
from pinmatrix.project.known_good import read_known_good
from pinmatrix.project.policy import policy_for
from pinmatrix.registry.client import Registry
from pinmatrix.release.promote import PromotionRefused, execute, plan_promotion
from pinmatrix.results.store import DEFAULT_PATH, ResultsStore


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "promote", help="promote cells whose results meet the stack's policy: copy by digest, attest, tag known-good",
        description="Check the results store against the promotion policy ([matrix.promotion] and "
                    "[stacks.<name>.promotion] in matrix.toml: required smokes, hosts, clean runs), then copy the "
                    "image the smokes ran on BY DIGEST to <registry>/<repository>/<stack>, attach an in-toto "
                    "test-result attestation, move the known-good tag and record the decision in known-good.toml. "
                    "Refuses, with every reason, when the policy is not met or the cell's tag no longer names the "
                    "tested digest. Exit status: 0 promoted (or already promoted), 1 refused, 2 bad input.",
        **examples("pinmatrix promote --stack demo --dry-run --json   # what would be promoted; each refusal's reason",
                   "pinmatrix promote --stack demo                     # signs with .pinmatrix/keys/signing.key",
                   "PINMATRIX_SIGNING_KEY=ci.key pinmatrix promote --cell 0123456789ab --json"),
    )
    add_matrix_argument(p)
    p.add_argument("--cell", "-c", action="append", default=[], metavar="ID", help="promote this cell (repeatable)")
    p.add_argument("--stack", "-s", metavar="S", help="consider every cell of stack S")
    p.add_argument("-k", dest="keyword", metavar="EXPR", help="consider cells whose name or id matches EXPR")
    p.add_argument("--results", type=Path, default=DEFAULT_PATH, metavar="PATH",
                   help=f"the results store (default: {DEFAULT_PATH})")
    p.add_argument("--known-good", type=Path, default=None, metavar="PATH",
                   help=f"the promotion record (default: {KNOWN_GOOD_FILE} next to the matrix)")
    p.add_argument("--registry", metavar="PREFIX", help="registry prefix (default: [matrix].registry)")
    p.add_argument("--dry-run", "-n", action="store_true", help="check and show what would happen; change nothing")
    p.add_argument("--force", action="store_true", help="promote again a cell already recorded with the same digest")
    p.add_argument("--signing-key", type=existing_file, default=None, metavar="FILE.key",
                   help="sign the evidence (test-result attestation and SBOM) as DSSE envelopes with this PEM private "
                   f"key (default: PINMATRIX_SIGNING_KEY, else the project's {SIGNING_KEY} when `pinmatrix keygen` "
                   "made it). Unsigned evidence is never accepted by `pinmatrix pull` or `verify`")
    p.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                   help="the build's cache (default: .pinmatrix/cache next to the matrix): the SBOM's dependency "
                   "graph reads each locked wheel's Requires-Dist from DIR/wheels")
    p.add_argument("--json", action="store_true",
                   help="print one {cell, name, stack, outcome, digest, reference, attestation, sbom, signed_by, steps, "
                   "reasons} per cell as JSON on stdout (outcome: promoted, would-promote, already-promoted, refused)")
    p.set_defaults(func=run, registry_need=pushing)


def _catalogue(root: Path) -> list[str] | None:
    """The smoke catalogue's names (required smokes may name groups that expand to several smokes): the
    project's smoke/ next to the matrix, else ./smoke, else $PINMATRIX_SMOKE_DIR; None without a catalogue
    (the cell's own smoke list is then matched as written, groups against recorded results)."""
    from pinmatrix.project.catalogue import SmokeError, find_smoke_dir, load_catalogue

    explicit = root / "smoke"
    try:
        return [s.name for s in load_catalogue(find_smoke_dir(explicit if explicit.is_dir() else None))]
    except SmokeError:
        return None


def run(args: argparse.Namespace) -> int:
    matrix, expansion = load(args.matrix)
    if not (args.cell or args.stack or args.keyword):
        raise PinmatrixError("promote: name the cells: --cell ID, --stack S or -k EXPR")
    cells = select(matrix, expansion, stack=args.stack, keyword=args.keyword)
    if args.cell:
        by_id = {c.id: c for c in expansion.cells}
        missing = [c for c in args.cell if c not in by_id]
        if missing:
            raise PinmatrixError(f"{matrix.path.name}: no cell with id {missing[0]!r} (see `pinmatrix cells`)")
        cells = [c for c in cells if c.id in args.cell] if (args.stack or args.keyword) else [by_id[c] for c in args.cell]
    if not cells:
        raise PinmatrixError("promote: no cell matches the selection")
    prefix = (args.registry or matrix.settings.registry).rstrip("/")
    ImageRef.parse(prefix + "/x")  # validates the prefix: one clear line when malformed
    registry = Registry(prefix.split("/", 1)[0])
    known_good = args.known_good or (matrix.root / KNOWN_GOOD_FILE)
    store = ResultsStore(args.results) if args.results.exists() else None
    already = {(e["cell_id"], e["digest"]) for e in read_known_good(known_good)}
    single = len(cells) == 1
    catalogue = _catalogue(matrix.root)
    from pinmatrix.project.lockfile import lock_path
    from pinmatrix.release.attest import lock_for_sbom, sbom_inputs
    from pinmatrix.release.signing import load_signer, signing_key_path

    key_path = signing_key_path(args.signing_key, matrix.root / SIGNING_KEY)
    signer = load_signer(key_path) if key_path is not None else None
    unsigned_warning = signer is None

    promoted = refused = 0
    outcomes: list[dict[str, object]] = []
    say = functools.partial(print, file=sys.stderr if args.json else sys.stdout)

    def outcome(cell: Cell, what: str, **fields: object) -> None:
        outcomes.append({"cell": cell.id, "name": cell.name, "stack": cell.stack, "outcome": what, "digest": None,
                         "reference": None, "attestation": None, "sbom": None, "signed_by": None, "steps": [],
                         "reasons": [], **fields})

    def emit() -> None:
        if args.json:
            print(json.dumps(outcomes, indent=2))

    for cell in cells:
        policy = policy_for(matrix, cell.stack)
        records = store.query(cell_id=cell.id, probe_params={}) if store else []  # plain runs, no bisect probes
        stack_gpus = sorted({c.pins["gpu"] for c in expansion.cells if c.stack == cell.stack and "gpu" in c.pins})
        source = ImageRef.parse(image_ref(cell, prefix))  # the build tag, <registry>/<stack>:<cell id>
        try:
            plan = plan_promotion(cell, policy, records, source=source, registry_prefix=prefix, registry=registry,
                                  stack_gpus=stack_gpus, catalogue=catalogue)
        except PromotionRefused as err:
            outcome(cell, "refused", reasons=str(err).split(": ", 1)[1].split("; "))
            if single:
                emit()
                raise
            refused += 1
            say(f"refused  {cell.id} {cell.name}: {str(err).split(': ', 1)[1]}")
            continue
        if (cell.id, plan.digest) in already and not args.force:
            promoted += 1
            outcome(cell, "already-promoted", digest=plan.digest)
            say(f"already promoted {cell.id} {cell.name} ({plan.digest})")
            continue
        if args.dry_run:
            promoted += 1
            outcome(cell, "would-promote", digest=plan.digest, steps=plan.describe())
            say(f"would promote {cell.id} {cell.name}:")
            for step in plan.describe():
                say(f"  - {step}")
            continue
        if unsigned_warning:
            unsigned_warning = False
            print(f"warning: no signing key (--signing-key, PINMATRIX_SIGNING_KEY or {SIGNING_KEY} from `pinmatrix "
                  "keygen`): the evidence is unsigned, and "
                  "`pinmatrix pull` and `verify` will refuse these images", file=sys.stderr)
        lock_text, why_not = lock_for_sbom(registry, plan.source.with_digest(plan.digest), lock_path(cell, matrix.root))
        if lock_text is None:
            print(f"note: cell {cell.id}: {why_not}", file=sys.stderr)
            result = execute(plan, registry, records, known_good, signer=signer)
        else:
            inputs = sbom_inputs(registry, plan.source.with_digest(plan.digest), lock_text,
                                 (args.cache_dir or matrix.root / ".pinmatrix" / "cache") / "wheels",
                                 lock_source=f"lock of cell {cell.id}")
            for note in inputs.notes:
                print(f"note: cell {cell.id}: {note}", file=sys.stderr)
            result = execute(plan, registry, records, known_good, signer=signer, lock_text=lock_text,
                             debian=inputs.debian, requires=inputs.requires)
        promoted += 1
        outcome(cell, "promoted", digest=result.digest, reference=result.reference,
                attestation=result.attestation, sbom=result.sbom, signed_by=result.signed_by)
        say(f"promoted {cell.id} {cell.name}: {result.reference} (attestation {result.attestation})")
    emit()
    if not promoted:
        raise PromotionRefused(f"no cell promoted ({refused} refused)")
    return 0
