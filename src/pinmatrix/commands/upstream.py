"""``pinmatrix upstream``: each patch's and known issue's upstream state, and what to do about it."""

from __future__ import annotations

import argparse
import json
import os

from pinmatrix.commands._common import add_matrix_argument, examples
from pinmatrix.image.patch_probe import PatchFiles
from pinmatrix.matrix.selection import load
from pinmatrix.project.matrix_toml import require_stack
from pinmatrix.upgrade.forge import DEFAULT_FORGE, FORGE_DIR, TOKEN_ENV, ForgeCache, ForgeClient
from pinmatrix.upgrade.sources import UpgradeSources
from pinmatrix.upgrade.upstream import UpstreamRun, upstream_lines, upstream_report

HELP = "report each patch's and known issue's upstream PR or issue: merged or not, in a release's files or not"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "upstream", help=HELP,
        description="Ask the forge (a GitHub-REST-shaped API) for the state of each upstream pull request or issue "
                    "the matrix's patches and known issues name, and read the files each installed-tree patch "
                    "touches out of its package's newest wheel on the index: a patch whose change is already "
                    "there proposes dropping the patch, a known issue whose fix shipped proposes flipping its "
                    f"expectation. Answers are cached under {FORGE_DIR} with their date; --offline, or a forge "
                    f"that does not answer, uses them and says how old they are. ${TOKEN_ENV}, when set, is sent "
                    "to the forge URL only. Exit 0 with unknowns, unless --strict (then 1).",
        **examples("pinmatrix upstream",
                   "pinmatrix upstream --stack h200 --json",
                   "pinmatrix upstream --offline                 # the cached answers, with their age",
                   "pinmatrix upstream --forge-url http://127.0.0.2:8080   # a local forge"),
    )
    add_matrix_argument(p)
    p.add_argument("--stack", "-s", metavar="S", help="only the patches and known issues of stack S's cells")
    p.add_argument("--forge-url", default=DEFAULT_FORGE, metavar="URL", help=f"the forge's API (default {DEFAULT_FORGE})")
    p.add_argument("--offline", action="store_true", help="ask neither forge nor index: the caches only")
    p.add_argument("--timeout", type=float, default=20.0, metavar="S", help="seconds to wait for each answer")
    p.add_argument("--strict", action="store_true", help="exit 1 when a forge state is unknown")
    p.add_argument("--json", action="store_true", help="print a JSON list, one object per patch and known issue")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    matrix, expansion = load(args.matrix)
    only = None
    if args.stack is not None:
        require_stack(matrix, args.stack)
        cells = [c for c in expansion.cells if c.stack == args.stack]
        only = {p.id for c in cells for p in c.patches} | {k.id for c in cells for k in c.known_issues}
    sources = UpgradeSources.of(matrix, offline=args.offline, timeout=args.timeout)
    client = ForgeClient(args.forge_url, os.environ.get(TOKEN_ENV) or None, args.timeout)
    report = UpstreamRun(matrix, sources, client, ForgeCache(matrix.root / FORGE_DIR), PatchFiles(), args.offline)
    items = upstream_report(report, only)
    if args.json:
        print(json.dumps([i.to_dict() for i in items], indent=1))
    else:
        print("\n".join(upstream_lines(items, sources.now)))
    return 1 if args.strict and any(i.unknown for i in items) else 0
