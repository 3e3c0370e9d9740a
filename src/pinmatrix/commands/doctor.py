"""``pinmatrix doctor``: what this GPU host can run of the project, and which known issues hit it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pinmatrix.commands._common import examples, existing_dir
from pinmatrix.doctor.checkup import DoctorSettings, run_checkup
from pinmatrix.doctor.leak_check import DEFAULT_LEAK_SECONDS, MAX_SECONDS
from pinmatrix.doctor.render import checkup_lines
from pinmatrix.paths import KNOWN_GOOD_FILE, MATRIX_FILE, RESULTS_FILE, known_good_file, project_root

EXIT_STATUS = ("exit status: 0 nothing in the way; 1 a known issue hits this host (or a --cell on it), no promoted "
               "image fits this GPU host, the --bundle does not fit, or --leak-check found a leak; 2 bad input (a file that is not what it "
               "should be, an unknown --cell); 3 no NVIDIA GPU here (nvidia-smi missing, failing or listing none), "
               "unless --allow-no-gpu")



def _leak_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and {MAX_SECONDS:g} seconds")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor", help="check this GPU host: GPUs, driver, the known issues that hit it, a sandbox's prerequisites, "
                       "the promoted images that fit",
        description="Look at this host through nvidia-smi and the project's files, without a network or a CUDA "
                    "library: GPUs, compute capability and arch, MIG mode, driver and CUDA driver API, unified or "
                    "discrete memory; the matrix's known issues that match it (driver ranges, GPU, the packages of "
                    "this Python), each with its source; whether the sandbox runtime (smoke --runtime sandbox) can "
                    "start here and what it lacks (a user namespace, bubblewrap, the GPU's wiring); "
                    "which promoted images (known-good.toml) fit and on which drivers their evidence was gathered "
                    "(the results store's host records); per --cell what would compile at first use on this GPU "
                    "(from an arch scan); with --bundle, a shipped bundle's manifest against this host before "
                    "anything is unpacked; with --leak-check, a few seconds of allocate / free rounds in a child "
                    "process (torch or cupy in this Python) and whether MemAvailable fell by more than RSS, "
                    f"AnonPages, Slab and the CUDA allocator account for. {EXIT_STATUS}.",
        **examples("pinmatrix doctor                       # the host, its known issues, the images that fit",
                   "pinmatrix doctor --json > doctor.json  # the same as JSON (pinmatrix-doctor/1)",
                   "pinmatrix doctor --cell 0e749e61e75a --arch-scan scan/arch-scan.json",
                   "pinmatrix doctor --bundle /root/ship/plain   # before unbundle.py unpacks it",
                   "pinmatrix doctor --allow-no-gpu || exit 1     # a CPU runner: exit 0 unless an issue hits",
                   "pinmatrix doctor --leak-check --leak-seconds 10  # a GB10: does this driver leak unified memory?"),
    )
    p.add_argument("--matrix", type=Path, default=None, metavar="PATH",
                   help=f"the matrix whose known issues are read (default: {MATRIX_FILE} in the project root; "
                   "skipped when there is none)")
    p.add_argument("--known-good", type=Path, default=None, metavar="PATH",
                   help=f"the promotion record (default: {KNOWN_GOOD_FILE} in the project root)")
    p.add_argument("--results", type=Path, default=None, metavar="PATH",
                   help=f"the results store whose host records say each promotion's drivers (default: {RESULTS_FILE} "
                   "in the project root; read only, never made)")
    p.add_argument("--cell", "-c", action="append", default=[], metavar="ID",
                   help="also check this cell (its id or name; repeatable): the known issues that hit it on this host "
                   "and what of it would compile at first use on this GPU")
    p.add_argument("--arch-scan", action="append", type=Path, default=[], metavar="FILE",
                   help="an arch scan (`pinmatrix arch-scan --out DIR` writes DIR/arch-scan.json) read for --cell; "
                   "without one a cell's first use is 'not scanned'")
    p.add_argument("--bundle", type=existing_dir, metavar="DIR",
                   help="check the bundle in DIR (its manifest.json and parts) against this host; nothing is unpacked")
    p.add_argument("--allow-no-gpu", action="store_true",
                   help="on a host without an NVIDIA GPU, check the rest and exit 0 unless something else is found "
                   "(default: exit status 3)")
    p.add_argument("--leak-check", action="store_true",
                   help="also run the unified-memory leak measurement (issue 44; smoke unified-memory-leak) for a few "
                   "seconds in a child process with this Python's torch or cupy: the drop of MemAvailable that "
                   "RSS, AnonPages, Slab and the CUDA allocator do not explain; a leak makes the exit status 1, "
                   "neither torch nor cupy makes the section 'not run'")
    p.add_argument("--leak-seconds", type=_leak_seconds, default=DEFAULT_LEAK_SECONDS, metavar="N",
                   help=f"how long --leak-check allocates and frees (default {DEFAULT_LEAK_SECONDS:g}; at most "
                   f"{MAX_SECONDS:g}), on top of the child's start (importing torch, a CUDA context)")
    p.add_argument("--json", action="store_true", help="print the findings as JSON (pinmatrix-doctor/1)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    root = project_root()
    settings = DoctorSettings(
        matrix=args.matrix or root / MATRIX_FILE, matrix_required=args.matrix is not None,
        known_good=args.known_good or known_good_file(root), results=args.results or root / RESULTS_FILE,
        cells=tuple(args.cell), arch_scans=tuple(args.arch_scan), bundle=args.bundle, allow_no_gpu=args.allow_no_gpu,
        leak_seconds=args.leak_seconds if args.leak_check else None)
    checkup = run_checkup(settings)
    if args.json:
        print(json.dumps(checkup.to_dict(), indent=2))
    else:
        print("\n".join(checkup_lines(checkup)))
    return checkup.exit_status()
