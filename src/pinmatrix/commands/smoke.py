"""``pinmatrix smoke``: run the smoke kernels of cells on this host and record the results."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pinmatrix.cell import Cell
from pinmatrix.commands._common import add_limit_argument, examples, existing_dir
from pinmatrix.commands._registry import smoking_images
from pinmatrix.errors import PinmatrixError
from pinmatrix.results.store import DEFAULT_PATH, HostFingerprint, ResultsStore, write_json_atomic


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "smoke",
        help="run smoke kernels per cell on this host and record the results",
        description=(
            "Run each selected smoke in its own process (python -X faulthandler) with a timeout, so a device "
            "fault, a segfault or a hang fails that smoke only. Logs go to --logs/<run>/<cell>/<smoke>.log, "
            "results to the results store. Without --cell/--stack the current environment is smoked as the "
            "synthetic cell 'host' (every smoke in the catalogue). Smokes already recorded for the same cell, "
            "host and image digest are skipped unless --rerun: a rebuilt or pushed image is smoked again. With "
            "--runtime docker/podman, cells whose image is not in the engine's store are listed and passed "
            "over; the others are smoked, and the exit status is 1. --runtime chroot needs no engine: the cell's "
            "image is taken from an OCI layout (--layout), unpacked once per manifest digest under --roots, and "
            "each smoke runs inside it (own mount namespace, the host's /dev GPU nodes, /proc, /sys and NVIDIA "
            "driver libraries bound in, the image's Env, User and WorkingDir, the image's own Python); run as root "
            "or where user namespaces are allowed."
        ),
        **examples("pinmatrix smoke --stack demo --rerun                      # the host's own environment",
                   "pinmatrix smoke --stack demo --runtime chroot             # in each cell's image, no engine",
                   "pinmatrix smoke --cell 'h200[xformers=0.0.35-int64]' --runtime chroot --layout /data/oci "
                   "--json out.json",
                   "pinmatrix smoke --stack h200 --runtime chroot --kernel-cache cold --rerun   # a cold-cache run"),
    )
    p.add_argument("matrix", nargs="?", type=Path, default=Path("matrix.toml"),
                   help="the matrix file (default: ./matrix.toml); read only with --cell/--stack")
    add_limit_argument(p)
    p.add_argument("--cell", action="append", metavar="ID", help="a cell id or name (repeatable)")
    p.add_argument("--stack", "-s", metavar="S", help="every cell of stack S")
    p.add_argument("-k", dest="keyword", metavar="EXPR",
                   help="only smokes whose name matches EXPR, pytest-style: 'xformers and not fwd'")
    p.add_argument("--runtime", choices=("host", "docker", "podman", "chroot"), default="host",
                   help="host: the current Python environment (plus --wheels/patch overlay); docker/podman: "
                   "a fresh container of the cell's image per smoke; chroot: the cell's image unpacked from an OCI "
                   "layout and entered without an engine")
    p.add_argument("--image", metavar="REF", help="image to run (docker/podman; default: the cell's image "
                   "reference in the matrix registry; chroot: a reference or manifest digest in --layout)")
    p.add_argument("--layout", type=Path, metavar="DIR", default=None,
                   help="chroot: the OCI image layout holding the cells' images (default: .pinmatrix/oci next to "
                   "the matrix, where `pinmatrix build` writes them)")
    p.add_argument("--roots", type=Path, metavar="DIR", default=None,
                   help="chroot: where images are unpacked, one root per manifest digest, reused (default: "
                   ".pinmatrix/roots next to the matrix)")
    p.add_argument("--kernel-cache", choices=("keep", "cold", "off"), default=None,
                   help="image runtimes: a folder per image digest (under --roots for chroot, else "
                   ".pinmatrix/kernel-cache) mounted into each smoke for Triton's, FlashInfer's, TorchInductor's, "
                   "vLLM's and the driver's compile caches: keep (default) keeps it across smokes and runs, cold "
                   "empties it before the image's first smoke, off mounts none")
    p.add_argument("--wheels", type=existing_dir, metavar="DIR",
                   help="host runtime: the cells' extra wheels, installed into a per-cell overlay on PYTHONPATH")
    p.add_argument("--overlay", type=Path, metavar="DIR", default=Path(".pinmatrix/overlay"),
                   help="host runtime: where per-cell overlays (wheels + installed-tree patches) are made "
                   "(default: .pinmatrix/overlay)")
    p.add_argument("--python", default=sys.executable, help="interpreter that runs the smokes (host runtime)")
    p.add_argument("--rerun", action="store_true", help="run smokes already recorded for this cell and host")
    p.add_argument("--timeout", type=float, metavar="S", help="cap every smoke's timeout at S seconds")
    p.add_argument("--results", type=Path, default=DEFAULT_PATH, metavar="PATH",
                   help=f"the results store (default: {DEFAULT_PATH})")
    p.add_argument("--logs", type=Path, default=Path(".pinmatrix/logs"), metavar="DIR", help="log directory")
    p.add_argument("--log-cap", type=float, default=8.0, metavar="MIB",
                   help="keep at most MIB MiB of each smoke's log: the first and the last half, with a line "
                        "saying how much was left out between them (default 8)")
    p.add_argument("--smoke-dir", type=Path, metavar="DIR", help="the smoke catalogue (default: ./smoke)")
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                   help="print this run's records as JSON on stdout (progress goes to stderr), or write them "
                   "to FILE")
    p.add_argument("--list", action="store_true", help="list the catalogue (and each cell's selection) and exit")
    p.set_defaults(func=run, registry_need=smoking_images)


def _cells(args: argparse.Namespace) -> tuple[list[Any], Any]:
    from pinmatrix.smoke.runner import HostCell

    if not args.cell and not args.stack:
        return [HostCell()], None

    from pinmatrix.matrix.selection import load, select

    matrix, expansion = load(args.matrix)
    cells = select(matrix, expansion, stack=args.stack)
    if args.cell:
        wanted: list[Cell] = []
        for key in args.cell:
            hit = [c for c in cells if key in (c.id, c.name)]
            if not hit:
                raise PinmatrixError(f"{args.matrix}: no cell with id or name {key!r}"
                                     + (f" in stack {args.stack!r}" if args.stack else ""))
            wanted.extend(c for c in hit if c not in wanted)
        cells = wanted
    return cells, matrix


def run(args: argparse.Namespace) -> int:
    from pinmatrix.project.catalogue import load_catalogue
    from pinmatrix.smoke.runner import RunOptions, new_run_id, plan_smokes, run_cells

    catalogue = load_catalogue(args.smoke_dir)
    cells, matrix = _cells(args)
    if args.list:
        for s in catalogue:
            need = ", ".join(f"{k}={v}" for k, v in s.needs.items()) or "nothing"
            print(f"{s.name:40} {s.module.name:20} timeout {s.timeout_s:>4}s  needs {need}")
        for cell in cells:
            names = [s.name for s in plan_smokes(cell, catalogue, args.keyword)]
            print(f"cell {cell.id} {getattr(cell, 'name', '')}: {' '.join(names)}")
        return 0
    if args.runtime == "host" and args.image:
        raise PinmatrixError("--image needs --runtime docker, podman or chroot")
    if args.runtime != "chroot" and (args.layout or args.roots):
        raise PinmatrixError("--layout and --roots need --runtime chroot")
    if args.runtime == "host" and args.kernel_cache:
        raise PinmatrixError("--kernel-cache needs --runtime docker, podman or chroot (the host runtime uses the "
                             "host user's own caches)")
    options = RunOptions(
        smoke_dir=args.smoke_dir, keyword=args.keyword, rerun=args.rerun, timeout_s=args.timeout,
        python=args.python, logs_dir=args.logs, overlay_dir=args.overlay, wheels_dir=args.wheels,
        repo_root=(args.matrix.resolve().parent if matrix is not None else Path.cwd()), runtime=args.runtime,
        log_cap=int(args.log_cap * 1024 * 1024),
        kernel_cache=None if args.runtime == "host" else (args.kernel_cache or "keep"),
    )
    if args.wheels is not None and not args.wheels.is_dir():
        raise PinmatrixError(f"--wheels {args.wheels}: not a directory")
    store = ResultsStore(args.results)
    store.prepare_write()  # a damaged or foreign store is named now, before any smoke runs
    host = HostFingerprint.detect()
    run_id = new_run_id()
    to_stdout = args.json == "-"
    echo = _stderr_echo if to_stdout else print
    no_image: list[str] = []
    if args.runtime == "host":
        runs = run_cells(cells, store, options, host=host, run_id=run_id, echo=echo)
    elif args.runtime == "chroot":
        runs = _run_in_roots(cells, matrix, store, options, args, host, run_id, echo, no_image)
    else:
        runs = _run_in_images(cells, matrix, store, options, args, host, run_id, echo, no_image)
    records = [r for run in runs for r in run.records]
    if to_stdout:
        json.dump([r.to_dict() for r in records], sys.stdout, indent=2, sort_keys=True)
        print()
    elif args.json:
        write_json_atomic(Path(args.json), [r.to_dict() for r in records])
    counts: dict[str, int] = {}
    for r in records:
        counts[r.status] = counts.get(r.status, 0) + 1
    skipped = sum(len(run.skipped_recorded) for run in runs)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "nothing run"
    echo(f"run {run_id}: {summary}" + (f"; {skipped} already recorded" if skipped else "")
         + (f"; {len(no_image)} cell(s) without an image" if no_image else ""))
    for line in no_image:
        print(f"no image: {line}", file=sys.stderr)
    xpass = [r for r in records if r.status == "xpass"]
    for r in xpass:
        print(f"note: {r.smoke} on cell {r.cell_id} passed although known issue {r.known_issue} expects it "
              "to fail: the issue may be gone", file=sys.stderr)
    for r in (r for r in records if r.status == "error"):
        print(f"infrastructure error: {r.smoke} on cell {r.cell_id}: {r.reason} (not counted against the cell)",
              file=sys.stderr)
    return 1 if counts.get("fail") or counts.get("error") or no_image else 0


def _stderr_echo(line: str) -> None:
    print(line, file=sys.stderr)


def _run_in_images(cells: list[Any], matrix: Any, store: ResultsStore, options: Any, args: argparse.Namespace,
                   host: HostFingerprint, run_id: str, echo: Any, no_image: list[str]) -> list[Any]:
    """Smoke each cell in its image; a cell whose image is not in the engine's store is appended to
    ``no_image`` (one line naming the cell and the reference) and passed over."""
    from dataclasses import replace

    from pinmatrix.engine import get_engine
    from pinmatrix.project.catalogue import find_smoke_dir, load_catalogue
    from pinmatrix.smoke.container import ContainerSmokes, image_digest
    from pinmatrix.smoke.runner import run_cell

    engine = get_engine(args.runtime)
    engine.ensure_running()
    catalogue = load_catalogue(args.smoke_dir)
    smoke_dir = find_smoke_dir(args.smoke_dir)
    runs = []
    echo(f"run {run_id} on {host.label()} (host {host.id}), runtime {args.runtime}")
    for cell in cells:
        ref = _cell_image_ref(cell, matrix, args)
        digest = image_digest(engine, ref)
        if digest is None:
            no_image.append(f"cell {cell.id} {getattr(cell, 'name', '')}: {ref} is not in the {args.runtime} "
                            "store (build it with `pinmatrix build`, or pull it)")
            echo(f"cell {cell.id} {getattr(cell, 'name', '')}: no image {ref} in the {args.runtime} store; "
                 "passed over")
            continue
        cache, image_env = _container_cache(engine, ref, digest, options.repo_root, options.kernel_cache, echo)
        opts = replace(options, image_digest=digest, kernel_cache=options.kernel_cache if cache else "off",
                       container=ContainerSmokes(engine, ref, smoke_dir, log_cap=options.log_cap, cache=cache,
                                                 image_env=image_env))
        runs.append(run_cell(cell, catalogue, store, opts, host=host, run_id=run_id, echo=echo))
    return runs


def _container_cache(engine: Any, ref: str, digest: str, root: Path, mode: str | None,
                     echo: Any) -> tuple[Any, dict[str, str]]:
    """The image's kernel cache for docker/podman and the image's own Env: none for an image that runs as
    another user than root (its folder would not be writable there)."""
    from pinmatrix.smoke.kernel_cache import prepare_cache

    info = engine.inspect(ref)
    image_env = dict(e.split("=", 1) for e in (info.env if info else ()) if "=" in e)
    user = info.user if info else ""
    if user not in ("", "root", "0", "0:0", "root:root"):
        echo(f"  kernel cache off: the image runs as {user!r}, not root")
        return None, image_env
    cache = prepare_cache(root / ".pinmatrix" / "kernel-cache", digest, mode or "keep")
    if cache is not None:
        echo(f"  kernel cache {cache.folder}{' (emptied)' if mode == 'cold' else ''}")
    return cache, image_env


def _cell_image_ref(cell: Any, matrix: Any, args: argparse.Namespace) -> str:
    """The image a container or chroot run smokes for ``cell``: --image, else the cell's reference in the matrix's
    registry (the build's tag)."""
    if args.image:
        return str(args.image)
    if matrix is None:
        raise PinmatrixError(f"--runtime {args.runtime} without --cell/--stack needs --image REF")
    from pinmatrix.image.settings import image_ref

    return image_ref(cell, matrix.settings.registry)


def _run_in_roots(cells: list[Any], matrix: Any, store: ResultsStore, options: Any, args: argparse.Namespace,
                  host: HostFingerprint, run_id: str, echo: Any, no_image: list[str]) -> list[Any]:
    """Smoke each cell inside its image unpacked from the OCI layout (the chroot runtime); a cell whose image the
    layout lacks is appended to ``no_image`` and passed over."""
    from dataclasses import replace

    from pinmatrix.project.catalogue import find_smoke_dir, load_catalogue
    from pinmatrix.smoke.chroot import find_image, prepare
    from pinmatrix.smoke.runner import plan_smokes, run_cell

    root = args.matrix.resolve().parent if matrix is not None else Path.cwd()
    layout = args.layout or root / ".pinmatrix" / "oci"
    roots = args.roots or root / ".pinmatrix" / "roots"
    catalogue = load_catalogue(args.smoke_dir)
    smoke_dir = find_smoke_dir(args.smoke_dir)
    runs = []
    echo(f"run {run_id} on {host.label()} (host {host.id}), runtime chroot, layout {layout}")
    for cell in cells:
        ref = _cell_image_ref(cell, matrix, args)
        digest = find_image(layout, ref)
        if digest is None:
            no_image.append(f"cell {cell.id} {getattr(cell, 'name', '')}: {ref} is not in the OCI layout {layout} "
                            "(build it with `pinmatrix build --engine none`, or unpack its bundle there)")
            echo(f"cell {cell.id} {getattr(cell, 'name', '')}: no image {ref} in {layout}; passed over")
            continue
        echo(f"cell {cell.id} {getattr(cell, 'name', '')}: image {digest}")
        runtime = prepare(layout, digest, roots, smoke_dir, smokes=plan_smokes(cell, catalogue, args.keyword),
                          gpu_required=bool(getattr(cell, "gpu_required", False)),
                          log_dir=options.logs_dir / run_id / "chroot" / digest[7:19],
                          kill_grace_s=options.kill_grace_s, log_cap=options.log_cap, echo=echo,
                          kernel_cache=options.kernel_cache or "keep")
        opts = replace(options, image_digest=digest, container=runtime)
        runs.append(run_cell(cell, catalogue, store, opts, host=host, run_id=run_id, echo=echo))
    return runs
