"""``pinmatrix propose``: coherent candidate cells moving coupled pins together, each locked or pruned."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pinmatrix.commands._common import add_matrix_argument, examples
from pinmatrix.matrix.selection import load
from pinmatrix.project.matrix_toml import require_stack
from pinmatrix.upgrade.candidates import CandidateTarget, candidates
from pinmatrix.upgrade.matrix_edit import write_proposals
from pinmatrix.upgrade.propose import proposal_lines, propose
from pinmatrix.upgrade.sources import UpgradeSources

HELP = "propose coherent candidate cells that move coupled pins together, each locked or pruned with the reason"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "propose", help=HELP,
        description="For each stack, candidates read from the packages' own metadata: each newer vLLM release "
                    "with the torch and FlashInfer it pins (and FlashInfer's sibling wheels), or each newer torch "
                    "with the triton it pins and the newest xFormers and FlashInfer that accept it; and the "
                    "'newest of each'. Each candidate's cells are expanded as any cell is, then locked with uv "
                    "as the index stands now, or pruned with the reason. --write appends the locked candidates "
                    "to their stacks' include lists in matrix.toml (comments kept; refused if an existing cell "
                    "would change).",
        **examples("pinmatrix propose --stack h200-vllm",
                   "pinmatrix propose --stack h200 --limit 2 --lock-dir /tmp/candidates   # keep the locks",
                   "pinmatrix propose --stack h200 --write     # the locked candidates as include entries"),
    )
    add_matrix_argument(p)
    p.add_argument("--stack", "-s", metavar="S", help="only stack S")
    p.add_argument("--limit", type=int, default=3, metavar="N", help="at most N newer releases per stack (default 3)")
    p.add_argument("--lock-dir", type=Path, metavar="DIR", help="write the candidates' locks under DIR/locks")
    p.add_argument("--timeout", type=float, default=30.0, metavar="S", help="seconds to wait for each index answer")
    p.add_argument("--write", action="store_true", help="append the locked candidates to matrix.toml")
    p.add_argument("--json", action="store_true", help="print the proposals as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    matrix, _ = load(args.matrix)
    if args.stack is not None:
        require_stack(matrix, args.stack)
    sources = UpgradeSources.of(matrix, timeout=args.timeout)
    cands = []
    for name, stack in matrix.stacks.items():
        if args.stack in (None, name):
            platform = stack.platform or matrix.settings.platform
            target = CandidateTarget(name, platform.split("-", 1)[0], stack.python or matrix.settings.python)
            cands += candidates(sources, target, stack, args.limit)
    proposals = propose(matrix, cands, sources.now, args.lock_dir)
    if args.json:
        print(json.dumps([p.to_dict() for p in proposals], indent=1))
    else:
        print("\n".join(proposal_lines(proposals)))
    if args.write:
        write_proposals(matrix, proposals)
        print(f"{matrix.path}: {sum(p.status == 'locked' for p in proposals)} candidates written as include entries")
    return 0
