"""``pinmatrix outdated``: the newer releases of every pinned package axis, per stack, with their dates."""

from __future__ import annotations

import argparse
import json

from pinmatrix.commands._common import add_matrix_argument, examples
from pinmatrix.matrix.selection import load
from pinmatrix.paths import CACHE_DIR
from pinmatrix.project.matrix_toml import require_stack
from pinmatrix.upgrade.outdated import outdated, outdated_lines
from pinmatrix.upgrade.sources import UpgradeSources

HELP = "list the newer releases of every pinned package axis per stack, with their upload dates"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "outdated", help=HELP,
        description="Read each pinned package axis's page on the matrix's default index (PEP 691 JSON, PEP 700 "
                    "versions and upload times) and list the releases newer than the newest pin. The pages are "
                    f"cached under {CACHE_DIR} with the date they were read; --offline answers from that cache "
                    "and says how old each answer is.",
        **examples("pinmatrix outdated --stack h200-vllm",
                   "pinmatrix outdated --min-age 14            # releases younger than 14 days are held back",
                   "pinmatrix outdated --offline --json"),
    )
    add_matrix_argument(p)
    p.add_argument("--stack", "-s", metavar="S", help="only stack S")
    p.add_argument("--min-age", type=float, default=0.0, metavar="DAYS",
                   help="hold back releases uploaded fewer than DAYS days ago (default 0)")
    p.add_argument("--offline", action="store_true", help="answer from the cached index pages only")
    p.add_argument("--timeout", type=float, default=30.0, metavar="S", help="seconds to wait for each answer")
    p.add_argument("--json", action="store_true", help="print a JSON list, one object per stack and axis")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    matrix, _ = load(args.matrix)
    if args.stack is not None:
        require_stack(matrix, args.stack)
    sources = UpgradeSources.of(matrix, offline=args.offline, timeout=args.timeout)
    rows = outdated(matrix, sources, args.stack, args.min_age)
    if args.json:
        print(json.dumps([r.model_dump(mode="json") for r in rows], indent=1))
    else:
        print("\n".join(outdated_lines(rows, sources.now)))
    return 0
