"""``pinmatrix promote``: check results against the stack's promotion policy, then promote by digest."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

from pinmatrix.commands._common import add_matrix_argument, add_selection_arguments, examples, existing_file, selected
from pinmatrix.commands._registry import pushing
from pinmatrix.errors import PinmatrixError
from pinmatrix.imageref import ImageRef
from pinmatrix.matrix.selection import load
from pinmatrix.paths import CACHE_DIR, KNOWN_GOOD_FILE, SIGNING_KEY
from pinmatrix.project.catalogue import SmokeError, find_smoke_dir, load_catalogue
from pinmatrix.release.promote import PromotionRefused
from pinmatrix.release.promote_cells import PromoteSettings, PromotionOutcome, promote_cells
from pinmatrix.release.signing import load_signer, signing_key_path
from pinmatrix.results.store import DEFAULT_PATH, ResultsStore


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "promote", help="promote cells whose results meet the stack's policy: copy by digest, attest, tag known-good",
        description="Check the results store against the promotion policy ([matrix.promotion] and "
                    "[stacks.<name>.promotion] in matrix.toml: required smokes, hosts, clean runs), then copy the "
                    "image the smokes ran on BY DIGEST to <registry>/<repository>/<stack>, attach an in-toto "
                    "test-result attestation, the SBOM and the SLSA provenance, move the known-good tag and record the decision in known-good.toml. "
                    "Refuses, with every reason, when the policy is not met or the cell's tag no longer names the "
                    "tested digest. Exit status: 0 promoted (or already promoted), 1 refused, 2 bad input.",
        **examples("pinmatrix promote --stack demo --dry-run --json   # what would be promoted; each refusal's reason",
                   f"pinmatrix promote --stack demo                     # signs with {SIGNING_KEY}",
                   "PINMATRIX_SIGNING_KEY=ci.key pinmatrix promote --cell 0123456789ab --json"),
    )
    add_matrix_argument(p)
    add_selection_arguments(p, one_off=False)
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
                   help=f"the build's cache (default: {CACHE_DIR} next to the matrix): the SBOM's dependency "
                   "graph reads each locked wheel's Requires-Dist from DIR/wheels")
    p.add_argument("--json", action="store_true",
                   help="print one {cell, name, stack, outcome, digest, reference, attestation, sbom, provenance, "
                   "signed_by, steps, reasons} per cell as JSON on stdout (outcome: promoted, would-promote, already-promoted, refused)")
    p.set_defaults(func=run, registry_need=pushing)


def _catalogue(root: Path) -> list[str] | None:
    """The smoke catalogue's names (required smokes may name groups that expand to several smokes): the
    project's smoke/ next to the matrix, else ./smoke, else $PINMATRIX_SMOKE_DIR; None without a catalogue
    (the cell's own smoke list is then matched as written, groups against recorded results)."""

    explicit = root / "smoke"
    try:
        return [s.name for s in load_catalogue(find_smoke_dir(explicit if explicit.is_dir() else None))]
    except SmokeError:
        return None


def run(args: argparse.Namespace) -> int:
    settings = _settings(args)
    say = functools.partial(print, file=sys.stderr if args.json else sys.stdout)
    single = len(settings.cells) == 1

    def show(o: PromotionOutcome) -> None:
        if o.outcome == "refused" and not single:
            say(f"refused  {o.cell.id} {o.cell.name}: {'; '.join(o.reasons)}")
        elif o.outcome == "already-promoted":
            say(f"already promoted {o.cell.id} {o.cell.name} ({o.digest})")
        elif o.outcome == "would-promote":
            say(f"would promote {o.cell.id} {o.cell.name}:", *(f"\n  - {step}" for step in o.steps), sep="")
        elif o.outcome == "promoted":
            say(f"promoted {o.cell.id} {o.cell.name}: {o.reference} (attestation {o.attestation}"
                + "".join(f", host-signed {d}" for d in o.host_attestations) + ")")

    outcomes = promote_cells(settings, show, functools.partial(print, file=sys.stderr))
    if args.json:
        print(json.dumps([o.to_json() for o in outcomes], indent=2))
    if single and outcomes[0].error is not None:
        raise outcomes[0].error
    if not any(o.outcome != "refused" for o in outcomes):
        raise PromotionRefused(f"no cell promoted ({len(outcomes)} refused)")
    return 0


def _settings(args: argparse.Namespace) -> PromoteSettings:
    """The run's settings: the command line over matrix.toml."""
    matrix, expansion = load(args.matrix)
    if not (args.cell or args.stack or args.keyword):
        raise PinmatrixError("promote: name the cells: --cell ID, --stack S or -k EXPR")
    cells = selected(matrix, expansion, args)
    prefix = (args.registry or matrix.settings.registry).rstrip("/")
    ImageRef.parse(prefix + "/x")  # validates the prefix: one clear line when malformed
    key_path = signing_key_path(args.signing_key, matrix.root / SIGNING_KEY)
    return PromoteSettings(
        matrix=matrix, expansion=expansion, cells=cells, registry_prefix=prefix,
        known_good=args.known_good or (matrix.root / KNOWN_GOOD_FILE),
        store=ResultsStore(args.results) if args.results.exists() else None,
        signer=load_signer(key_path) if key_path is not None else None,
        cache_dir=(args.cache_dir or matrix.root / CACHE_DIR) / "wheels",
        catalogue=_catalogue(matrix.root), force=args.force, dry_run=args.dry_run)
