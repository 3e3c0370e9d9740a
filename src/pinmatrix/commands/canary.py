"""``pinmatrix canary``: build and smoke propose's locked candidates, then say per candidate what would change
against the stack's known-good cell; ``--compare-only`` compares results already in the store."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pinmatrix.atomic import atomic_write_text
from pinmatrix.ci.canary import CanaryRun, CanarySettings, compare_only, run_canary, set_cells
from pinmatrix.ci.canary_workflow import canary_workflow, workflow_text
from pinmatrix.commands._common import add_matrix_argument, examples
from pinmatrix.errors import PinmatrixError
from pinmatrix.matrix.selection import choose_cells, load
from pinmatrix.paths import RESULTS_FILE
from pinmatrix.project.matrix_toml import require_stack
from pinmatrix.smoke.session import LAYOUT_RUNTIMES
from pinmatrix.upgrade.canary import diff_lines

HELP = ("build and smoke the proposed candidates, then report per candidate what changes against the stack's "
        "known-good cell")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "canary", help=HELP,
        description="Lock propose's newest candidates (--limit per stack; or the one cell --stack and --set make) into "
                    "locks/, build each with the image builder (and the baseline cell, where the matrix makes it), "
                    "smoke them here (GPU smokes on a CPU host are skipped, never failures), then compare each with "
                    "its stack's known-good cell (the promoted cell nearest it; with none promoted, the matrix's "
                    "cell nearest it, said so): moved pins, smokes newly failing or passing, expectations that "
                    "flip, arch coverage (--arch-scan), image size and build time, and for a newly failing smoke "
                    "where one axis moved the bisect that finds the first failing release (run with --bisect). "
                    "--compare-only builds and runs nothing: it compares results in the store, e.g. imported "
                    "from a GPU host with `pinmatrix results --import`.",
        **examples("pinmatrix canary --stack demo",
                   "pinmatrix canary --stack h200 --set torch=2.15.0 --set triton=3.9.0 --runtime sandbox",
                   "pinmatrix canary --compare-only --candidate 1a2b3c4d5e6f --lock-dir results/upgrade",
                   "pinmatrix canary --compare-only --candidate 1a2b3c4d5e6f --known-good 0e749e61e75a --json"),
    )
    add_matrix_argument(p)
    p.add_argument("--stack", "-s", metavar="S", help="only stack S (needed with --set)")
    p.add_argument("--set", dest="set", action="append", default=[], metavar="AXIS=VALUE",
                   help="the candidate is the one-off cell of --stack these make, as `propose` prints them")
    p.add_argument("--limit", type=int, default=1, metavar="N", help="at most N candidates per stack (default 1)")
    p.add_argument("--compare-only", action="store_true", help="build and run nothing; compare --candidate's results")
    p.add_argument("--candidate", metavar="CELL_ID", help="with --compare-only: the candidate cell's id")
    p.add_argument("--known-good", metavar="CELL_ID", help="compare with this cell instead of the nearest promoted one")
    p.add_argument("--known-good-file", type=Path, metavar="PATH", help="the promotion record (default: known-good.toml)")
    p.add_argument("--lock-dir", type=Path, action="append", default=[], metavar="DIR",
                   help="where a candidate's lock may be (DIR/locks/<id>.txt, as `propose --lock-dir` writes it)")
    p.add_argument("--arch-scan", type=Path, action="append", default=[], metavar="FILE",
                   help="an arch-scan.json (`pinmatrix arch-scan --out DIR`) for the arch coverage (repeatable)")
    p.add_argument("--build-record", type=Path, action="append", default=[], metavar="FILE",
                   help="a `pinmatrix build --metadata-file` record for build times (repeatable)")
    p.add_argument("--engine", "-e", choices=("none", "auto", "podman", "docker"), default="none",
                   help="where the images are loaded (default none: the OCI layout only)")
    p.add_argument("--runtime", choices=("podman", "docker", *LAYOUT_RUNTIMES), default="sandbox",
                   help="where they are smoked, each in its own image, as `smoke --runtime` (default sandbox; podman "
                        "and docker need --engine to load the images)")
    p.add_argument("--results", type=Path, default=RESULTS_FILE, metavar="PATH", help="the results store")
    p.add_argument("--timeout", type=float, default=30.0, metavar="S", help="seconds to wait for each index answer")
    p.add_argument("--smoke-timeout", type=float, metavar="S", help="cap every smoke's timeout at S seconds")
    p.add_argument("--bisect", action="store_true", help="run each one-axis bisect of a newly failing smoke")
    p.add_argument("--json", action="store_true", help="print the comparisons as JSON")
    p.set_defaults(func=run)


def _settings(args: argparse.Namespace) -> CanarySettings:
    matrix, expansion = load(args.matrix)
    if args.stack is not None:
        require_stack(matrix, args.stack)
    if args.set and args.stack is None:
        raise PinmatrixError("--set needs --stack: the candidate is a cell of one stack")
    one_off = tuple(set_cells(matrix, args.stack, args.set)) if args.set and args.compare_only else ()
    return CanarySettings(matrix, list(expansion.cells), args.stack, args.limit, tuple(args.set), args.engine,
                          args.runtime, args.results, args.known_good_file, args.known_good, tuple(args.arch_scan),
                          tuple(args.build_record), tuple(args.lock_dir), args.timeout, args.smoke_timeout,
                          args.bisect, one_off)


def run(args: argparse.Namespace) -> int:
    if args.compare_only != bool(args.candidate):
        raise PinmatrixError("--compare-only and --candidate CELL_ID go together")
    if args.limit < 1:
        raise PinmatrixError("--limit must be at least 1")
    if args.runtime in ("podman", "docker") and args.engine not in (args.runtime, "auto"):
        raise PinmatrixError(f"--runtime {args.runtime} smokes the images {args.runtime} holds: add --engine "
                             f"{args.runtime}")
    settings = _settings(args)
    if args.compare_only:
        run_ = CanaryRun([], [compare_only(settings, args.candidate)])
    else:
        run_ = run_canary(settings, lambda line: print(line, file=sys.stderr))
    if args.json:
        print(json.dumps({"comparisons": [d.to_dict() for d in run_.diffs], "notes": run_.notes}, indent=1))
    else:
        print("\n".join(line for d in run_.diffs for line in diff_lines(d)))
        for note in run_.notes:
            print(note)
    return 1 if any(d.of("newly failing") for d in run_.diffs) or any(not b.ok for b in run_.builds) else 0


def register_ci(ci: argparse._SubParsersAction) -> None:
    """``pinmatrix ci canary``: the scheduled workflow that runs this command (registered by commands/ci.py)."""
    c = ci.add_parser("canary", help="a GitHub Actions workflow that runs the canary on a schedule, one job per stack",
                      description="Print (or write with -o) a workflow that runs `nox -s canary -- --stack S` on a "
                                  "schedule, one job per stack on a runner its cells can be smoked on (as `ci github` "
                                  "labels them: GPU stacks on self-hosted runners with their GPU and driver labels), "
                                  "and uploads each stack's comparison as JSON.",
                      **examples("pinmatrix ci canary --stack h200 --cron '17 4 * * 1'",
                                 "pinmatrix ci canary -o .github/workflows/canary.yml"))
    add_matrix_argument(c)
    c.add_argument("--stack", "-s", action="append", default=[], metavar="S", help="only stack S (repeatable)")
    c.add_argument("--cron", default="17 4 * * 1", help="when it runs, five cron fields (default Mondays 04:17 UTC)")
    c.add_argument("--limit", type=int, default=1, metavar="N", help="candidates per stack (default 1)")
    c.add_argument("--cpu-runner", action="append", metavar="LABEL",
                   help="runs-on labels of CPU-only stacks (repeatable; default: ubuntu-latest)")
    c.add_argument("-o", "--output", type=Path, metavar="FILE", help="write the workflow to FILE")
    c.set_defaults(func=run_ci)


def run_ci(args: argparse.Namespace) -> int:
    matrix, expansion = load(args.matrix)
    cells = [c for stack in (args.stack or [None]) for c in choose_cells(matrix, expansion, stack=stack)]
    text = workflow_text(canary_workflow(cells, cron=args.cron, limit=args.limit,
                                         cpu_runner=args.cpu_runner or ["ubuntu-latest"]))
    if args.output:
        atomic_write_text(args.output, text)
        print(f"wrote {args.output}")
    else:
        print(text, end="")
    return 0
