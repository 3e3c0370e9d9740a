"""``pinmatrix ci``: emit CI job definitions from the matrix (GitHub Actions matrix, Kubernetes Jobs, Slurm job
arrays) and collect what Kubernetes smoke Jobs and Slurm array tasks wrote back."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import yaml

from pinmatrix.atomic import atomic_write_text
from pinmatrix.ci import k8s, slurm_collect
from pinmatrix.ci.dispatch import dispatch, read_dispatch, write_dispatch
from pinmatrix.ci.github import github_dispatch, github_matrix
from pinmatrix.ci.k8s import k8s_manifests, validate
from pinmatrix.ci.pools import load_pools
from pinmatrix.ci.slurm import (
    CHECK_REFUSED,
    ScriptSettings,
    checked_name,
    layout_images,
    node_refusal,
    plan,
    prepare,
    render_script,
    submit,
)
from pinmatrix.ci.summary import skipped_summary
from pinmatrix.commands._common import add_matrix_argument, add_selection_arguments, examples, selected
from pinmatrix.commands._registry import Need, pushing
from pinmatrix.commands.canary import register_ci as register_canary_workflow
from pinmatrix.errors import PinmatrixError
from pinmatrix.imageref import ImageRef, RegistryError, image_ref
from pinmatrix.matrix.selection import load
from pinmatrix.paths import OCI_DIR, SLURM_DIR
from pinmatrix.project.catalogue import find_smoke_dir
from pinmatrix.registry.client import Registry
from pinmatrix.results.store import DEFAULT_PATH, ResultsStore, write_json_atomic


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ci", help="emit CI jobs (GitHub Actions matrix, Kubernetes Jobs, Slurm arrays) and collect "
                                  "their results",
                       description="Generate CI job definitions from the matrix. See docs/ci.md.",
                       **examples("pinmatrix ci github --stack demo --pretty", "pinmatrix ci k8s --pools pools.toml -o jobs.yaml",
                                  "pinmatrix ci collect results/ --json results.json"))
    ci = p.add_subparsers(dest="ci_command", metavar="TARGET", required=True)

    _register_github(ci)
    register_canary_workflow(ci)

    k = ci.add_parser("k8s", help="Kubernetes Jobs, one per cell x GPU node pool, selected by GPU feature discovery labels",
                      description="Emit a ConfigMap with the smoke catalogue and one batch/v1 Job per cell and fitting "
                                  "node pool (nodeSelector: nvidia.com/gpu.product, nvidia.com/cuda.driver.*, "
                                  "nvidia.com/gpu.compute.*). Each Job runs the cell's smokes in the cell's image, "
                                  "by digest, and writes raw results under the results volume; `pinmatrix ci collect` "
                                  "turns them into result records. The manifests are validated against the Kubernetes "
                                  "JSON schemas (kubernetes-validate, strict) before they are printed.",
                      **examples("pinmatrix ci k8s --pools pools.toml --stack h200 -o jobs.yaml && kubectl apply -f jobs.yaml",
                                 "pinmatrix ci k8s --pools pools.toml --json"))
    add_matrix_argument(k)
    add_selection_arguments(k)
    k.add_argument("--pools", type=Path, required=True, metavar="FILE",
                   help="node pools: [[pool]] name, gpu_product, driver, capability, gpus (TOML)")
    k.add_argument("--namespace", default="default")
    k.add_argument("--results-claim", default="pinmatrix-results", metavar="PVC",
                   help="the PersistentVolumeClaim the Jobs write results to (default: pinmatrix-results)")
    k.add_argument("--run-id", default=None, help="names this round of Jobs (default: UTC timestamp)")
    k.add_argument("--registry", metavar="PREFIX", help="registry prefix (default: [matrix].registry)")
    k.add_argument("--smoke-dir", type=Path, default=None, metavar="DIR", help="the smoke catalogue (default: ./smoke)")
    k.add_argument("--format", choices=["yaml", "json"], default="yaml")
    k.add_argument("--json", dest="format", action="store_const", const="json", help="the same as --format json")
    k.add_argument("--output", "-o", type=Path, metavar="FILE", help="write here instead of stdout")
    k.add_argument("--dispatch", type=Path, metavar="FILE",
                   help="write the dispatch record (each Job's cell, image digest and smokes) here "
                        "(default: FILE.dispatch.json beside --output); `ci collect --dispatch` binds results to it")
    k.add_argument("--kube-version", default="1.37.0", help="Kubernetes version to validate against (default 1.37.0)")
    k.add_argument("--no-validate", action="store_true", help="skip schema validation")
    k.add_argument("--verbose", "-v", action="store_true",
                   help="a line per skipped cell x pool (default: one summary line of them)")
    k.set_defaults(func=run_k8s, registry_need=pushing)

    _register_slurm(ci)

    c = ci.add_parser("collect", help="turn what k8s smoke Jobs wrote (run.json + logs) into result records",
                      description="Read every pod output directory (a run.json written by the pod runner) under the "
                                  "given paths, classify each smoke and apply known issues as `pinmatrix smoke` does, "
                                  "and record the results in the store and/or a JSON file for `pinmatrix results "
                                  "--import` or `pinmatrix report --from-json`.",
                      **examples("pinmatrix ci collect /mnt/results/RUN-ID            # into the results store",
                                 "pinmatrix ci collect /mnt/results --json results.json"))
    c.add_argument("paths", nargs="+", type=Path, metavar="DIR", help="pod output directories, or folders holding them")
    c.add_argument("--matrix", type=Path, default=Path("matrix.toml"), help="the matrix file (default: ./matrix.toml)")
    c.add_argument("--results", type=Path, default=None, metavar="PATH",
                   help=f"record into this results store (default: {DEFAULT_PATH} unless --json is given)")
    c.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                   help="print the records as JSON on stdout (the summary goes to stderr), or write them to FILE")
    c.add_argument("--dispatch", type=Path, metavar="FILE",
                   help="the dispatch record `ci k8s` wrote: keep only records whose cell, digest and smoke the Job "
                        "was given; what a Job was given and did not record is said as not run")
    c.set_defaults(func=run_collect)


def _register_github(ci: argparse._SubParsersAction) -> None:
    g = ci.add_parser("github", help="a GitHub Actions job matrix (JSON): one job per cell, runner labels per cell",
                      description="Print {\"include\": [...]} with one entry per cell: cell, name, stack, gpu, "
                                  "driver, gpu-required, smokes, image-tag (the tag build --push pushes to), "
                                  "with --digests image (the pushed image by digest) and runs-on (self-hosted, linux, the architecture, "
                                  "gpu-<gpu>, nvidia-driver-<driver> for GPU cells; --cpu-runner for CPU-only "
                                  "cells). Use with strategy.matrix: ${{ fromJSON(needs.<job>.outputs.matrix) }}.",
                      **examples("pinmatrix ci github --pretty", "pinmatrix ci github --stack h200 -k int64"))
    add_matrix_argument(g)
    add_selection_arguments(g)
    g.add_argument("--cpu-runner", action="append", metavar="LABEL",
                   help="runs-on labels of CPU-only cells (repeatable; default: ubuntu-latest)")
    g.add_argument("--registry", metavar="PREFIX", help="image prefix for each entry's `image` (default: [matrix].registry)")
    g.add_argument("--digests", action="store_true",
                   help="name each cell's image by digest (looked up in the registry, after the build) as `image`; "
                        "cells whose image the registry lacks are left out, said in one line")
    g.add_argument("--pretty", action="store_true", help="indent the JSON")
    g.add_argument("--json", action="store_true", help="JSON on stdout (what this command always prints)")
    g.add_argument("--dispatch", type=Path, metavar="FILE",
                   help="also write the dispatch record (each cell's image digest, looked up in the registry, and "
                        "smokes) for `pinmatrix results --import --dispatch FILE`")
    g.add_argument("--smoke-dir", type=Path, default=None, metavar="DIR",
                   help="the smoke catalogue the dispatch record names smokes from (default: ./smoke)")
    g.add_argument("--run-id", default=None, help="names the dispatch record (default: UTC timestamp)")
    g.set_defaults(func=run_github, registry_need=_looking_up)


def _register_slurm(ci: argparse._SubParsersAction) -> None:
    s = ci.add_parser(
        "slurm", help="submit each stack's smokes as Slurm job arrays (one task per cell x GPU node pool)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Submit one job array per stack and node pool with sbatch: one task per cell x fitting pool, "
                    "routed by the pool's [pool.slurm] partition and features (--constraint) and the smokes' "
                    "needs (--gres=gpu:N, a time limit from their timeouts). Each task runs `pinmatrix smoke "
                    "--cell ID` (host runtime with --wheels; the cell image by digest through podman/docker; or "
                    "through the sandbox runtime from an OCI layout the nodes read, as the submitting user, after "
                    "`ci slurm-node-check` asked the node whether it can start the sandbox) "
                    "and writes its results under the submission directory; `pinmatrix ci slurm-collect DIR` "
                    "reads them back. Cell x pool tasks whose every smoke already has a result for the same image "
                    "digest in --results are not submitted again (--rerun submits them). See docs/ci.md.",
        epilog="Examples:\n"
               "  pinmatrix ci slurm --stack h200 --pools pools.toml --layout /shared/oci --roots /scratch\n"
               "  pinmatrix ci slurm --stack h200 --pools pools.toml --runtime podman\n"
               "  pinmatrix ci slurm --stack demo --wheels wheels/ --print\n"
               f"  pinmatrix ci slurm-collect {SLURM_DIR}/20261201-140000 --wait --json results.json\n"
               "  pinmatrix results --import results.json")
    add_matrix_argument(s)
    add_selection_arguments(s)
    s.add_argument("--pools", type=Path, metavar="FILE", help="node pools (the file `ci k8s` reads; GPU cells need it)")
    s.add_argument("--runtime", choices=("sandbox", "host", "podman", "docker"), default=None,
                   help="sandbox: the cell image by digest from --layout, behind bubblewrap, as the submitting "
                        "user; host: the node's Python with --wheels; podman/docker: the cell image, pulled by "
                        "digest (default: sandbox, or host when --wheels is given)")
    s.add_argument("--layout", type=Path, metavar="DIR",
                   help=f"sandbox: the OCI layout holding the cells' images, on a filesystem the nodes read "
                        f"(default: {OCI_DIR} next to the matrix, where `build --engine none` writes them)")
    s.add_argument("--roots", type=Path, metavar="DIR",
                   help="sandbox: a node-local folder; each user's images are unpacked (and kernel caches kept) "
                        "under DIR/pinmatrix-roots-<uid>, which only that user or root may own the way to "
                        "(default: each task's own folder, unpacked per task)")
    s.add_argument("--wheels", type=Path, metavar="DIR",
                   help="host runtime: the cells' wheels (DIR/<cell id>/ when it exists, else DIR)")
    s.add_argument("--registry", metavar="PREFIX", help="image runtimes: registry prefix (default: [matrix].registry)")
    s.add_argument("--out", type=Path, default=SLURM_DIR, metavar="DIR",
                   help="submissions go to DIR/<submission id>/ on a filesystem the nodes share (default: "
                        f"{SLURM_DIR})")
    s.add_argument("--submission-id", metavar="ID", help="names the submission (default: UTC timestamp)")
    s.add_argument("--cpu-partition", metavar="NAME", help="partition of CPU-only cells (default: the cluster's)")
    s.add_argument("--cpus-per-task", type=int, default=2, metavar="N", help="CPUs per task (default 2)")
    s.add_argument("--time-limit", type=int, metavar="MIN",
                   help="every task's time limit in minutes, instead of its smokes' timeouts plus a margin")
    s.add_argument("--pinmatrix", metavar="PATH",
                   help="the pinmatrix the nodes run (default: this interpreter with -m pinmatrix)")
    s.add_argument("--smoke-dir", type=Path, default=None, metavar="DIR",
                   help="the smoke catalogue (default: smoke/ beside the matrix, else ./smoke)")
    s.add_argument("--smokes", dest="smoke_keyword", metavar="EXPR",
                   help="only smokes whose name matches EXPR (passed to `pinmatrix smoke --smoke`)")
    s.add_argument("--results", type=Path, default=DEFAULT_PATH, metavar="PATH",
                   help=f"the store whose results a rerun skips (default: {DEFAULT_PATH})")
    s.add_argument("--rerun", action="store_true", help="submit every cell x pool, recorded or not")
    s.add_argument("--print", dest="print_only", action="store_true",
                   help="print the scripts; write nothing (no submission folder) and submit nothing")
    s.add_argument("--verbose", "-v", action="store_true", help="a line per skipped or recorded cell x pool")
    s.set_defaults(func=run_slurm)

    _register_slurm_node_check(ci)

    c = ci.add_parser(
        "slurm-collect", help="read back a Slurm submission's results; dead, timed-out or preempted tasks as failures",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="For every task of the submissions: its smokes' records (the task's --json, else its own "
                    "store), with the Slurm job, array task, node and pool in environment.slurm and the node as "
                    "the host name; every planned smoke without a record becomes a failure classed by how the "
                    "task ended (slurm-timeout, slurm-cancelled, slurm-preempted, slurm-node-fail, "
                    "slurm-task-failed, ...), or an infrastructure error (sandbox-unavailable) where the task's "
                    "node could not start the sandbox. Tasks still pending or running are listed and left for later.",
        epilog="Examples:\n"
               f"  pinmatrix ci slurm-collect {SLURM_DIR}/20261201-140000 --wait\n"
               "  pinmatrix ci slurm-collect DIR --json results.json && pinmatrix results --import results.json")
    c.add_argument("paths", nargs="+", type=Path, metavar="DIR", help="submission directories (submission.json)")
    c.add_argument("--wait", action="store_true", help="first wait until no task is pending or running")
    c.add_argument("--wait-timeout", type=float, default=6 * 3600.0, metavar="S", help="give up waiting after S s")
    c.add_argument("--results", type=Path, default=None, metavar="PATH",
                   help=f"record into this results store (default: {DEFAULT_PATH} unless --json is given)")
    c.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                   help="print the records as JSON on stdout (the summary goes to stderr), or write them to FILE")
    c.set_defaults(func=run_slurm_collect)


def _register_slurm_node_check(ci: argparse._SubParsersAction) -> None:
    n = ci.add_parser(
        "slurm-node-check", help="what each sandbox task of `ci slurm` runs first: can this node start the sandbox",
        description="The sandbox runtime's own checks on this node, as this user: bubblewrap, the kernel's user "
                    "namespaces, and --roots (made 0700, on a way only this user or root own). Exit status 0 when "
                    f"the sandbox can start; else one line saying why and what the node needs, on stderr and in "
                    f"--refused FILE, and exit status {CHECK_REFUSED}.",
        **examples("pinmatrix ci slurm-node-check --roots /scratch/pinmatrix-roots-$UID || echo no sandbox here"))
    n.add_argument("--runtime", choices=("sandbox",), default="sandbox")
    n.add_argument("--roots", type=Path, metavar="DIR", help="the folder the task unpacks images into")
    n.add_argument("--refused", type=Path, metavar="FILE", help="write the refusal line here as well")
    n.set_defaults(func=run_slurm_node_check)


def run_github(args: argparse.Namespace) -> int:

    matrix, expansion = load(args.matrix)
    cells = selected(matrix, expansion, args)
    prefix = args.registry or matrix.settings.registry
    images = _images(cells, prefix.rstrip("/"), "ci github") if args.digests or args.dispatch else None
    if args.digests and images is not None and len(images) < len(cells):
        missing = [c.id for c in cells if c.id not in images]
        print(f"ci github: {len(missing)} of {len(cells)} cell(s) left out, no image in the registry: "
              + " ".join(missing), file=sys.stderr)
    data = github_matrix(cells, cpu_runner=args.cpu_runner or ["ubuntu-latest"], registry=prefix,
                         images=images if args.digests else None)
    if args.dispatch and images is not None:
        run_id = checked_name(args.run_id or datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S"), "--run-id")
        write_dispatch(github_dispatch(cells, images, find_smoke_dir(args.smoke_dir), run_id), args.dispatch)
        print(f"wrote the dispatch record {args.dispatch}", file=sys.stderr)
    print(json.dumps(data, indent=2 if args.pretty else None, separators=None if args.pretty else (",", ":")))
    return 0


def _looking_up(args: argparse.Namespace) -> Need:
    """``ci github --digests`` and ``--dispatch`` ask the matrix's registry (or ``--registry``) for digests."""
    return pushing(args) if args.digests or args.dispatch else None


def _images(cells, prefix: str, command: str = "ci k8s") -> dict[str, str]:  # noqa: ANN001

    ImageRef.parse(prefix + "/x")
    registry = Registry(prefix.split("/", 1)[0])
    images = {}
    for cell in cells:
        ref = ImageRef.parse(image_ref(cell, prefix))
        try:
            digest = registry.resolve(ref)
        except RegistryError as err:
            raise PinmatrixError(f"{command}: cannot look up cell images: {err}") from None
        if digest:
            images[cell.id] = str(ref.with_digest(digest))
    return images


def run_k8s(args: argparse.Namespace) -> int:

    matrix, expansion = load(args.matrix)
    cells = selected(matrix, expansion, args)
    pools = load_pools(args.pools)
    smoke_dir = find_smoke_dir(args.smoke_dir)
    run_id = args.run_id or datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    images = _images(cells, (args.registry or matrix.settings.registry).rstrip("/"))
    emitted = k8s_manifests(cells, pools, images, smoke_dir=smoke_dir, namespace=args.namespace,
                            results_claim=args.results_claim, run_id=run_id)
    for line in emitted.skipped if args.verbose else filter(None, [skipped_summary("ci k8s", emitted.skipped)]):
        print(f"skipped {line}" if args.verbose else line, file=sys.stderr)
    if not emitted.jobs:
        raise PinmatrixError("ci k8s: no Job to emit (see the skipped line above)")
    if not args.no_validate:
        problems = validate(emitted.documents, args.kube_version)
        if problems:
            raise PinmatrixError(f"ci k8s: generated manifests fail schema validation: {problems[0]}")

    if args.format == "json":
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": emitted.documents}, indent=2, sort_keys=True)
    else:
        text = yaml.safe_dump_all(emitted.documents, sort_keys=False, width=120)
    record_path = args.dispatch or (args.output.with_name(args.output.name + ".dispatch.json") if args.output else None)
    if record_path is not None:
        write_dispatch(dispatch("k8s", run_id, emitted.dispatched), record_path)
        print(f"wrote the dispatch record {record_path} (collect with --dispatch {record_path})", file=sys.stderr)
    if args.output:
        atomic_write_text(args.output, text + ("\n" if not text.endswith("\n") else ""))
        print(f"wrote {len(emitted.jobs)} Job(s) and 1 ConfigMap to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def run_collect(args: argparse.Namespace) -> int:

    _, expansion = load(args.matrix)
    cells = {c.id: c for c in expansion.cells}
    dirs: list[Path] = []
    for path in args.paths:
        if not path.exists():
            raise PinmatrixError(f"{path}: no such directory")
        dirs += sorted(p.parent for p in ([path / "run.json"] if (path / "run.json").is_file() else path.rglob("run.json")))
    if not dirs:
        raise PinmatrixError(f"no run.json under {', '.join(str(p) for p in args.paths)}")
    if args.dispatch:
        bound = k8s.collect_dispatched(dirs, cells, read_dispatch(args.dispatch))
        records = bound.kept
        for line in ([f"dropped: {bound.dropped}"] if bound.dropped else []) + _not_run(bound.not_run):
            print(line, file=sys.stderr)
    else:
        records = [r for d in dirs for r in k8s.collect(d, cells)]
        print("ci collect: no --dispatch record: results are not checked against what each Job was given",
              file=sys.stderr)
    if args.json == "-":
        print(json.dumps([r.to_dict() for r in records], indent=2, sort_keys=True))
    elif args.json:
        write_json_atomic(Path(args.json), [r.to_dict() for r in records])
    if args.results or not args.json:
        store = ResultsStore(args.results or DEFAULT_PATH)
        store.record_many(records)
    counts: dict[str, int] = {}
    for r in records:
        counts[r.status] = counts.get(r.status, 0) + 1
    print(f"collected {len(records)} result(s) from {len(dirs)} pod(s): "
          + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none"),
          file=sys.stderr if args.json == "-" else sys.stdout)
    return 0


def _not_run(pairs: list[tuple[str, str]]) -> list[str]:
    """One line per cell: the smokes it was dispatched and has no kept result for."""
    by_cell: dict[str, list[str]] = {}
    for cell, smoke in pairs:
        by_cell.setdefault(cell, []).append(smoke)
    return [f"not run: cell {c}: {len(s)} smoke(s): {', '.join(s)}" for c, s in sorted(by_cell.items())]


def run_slurm(args: argparse.Namespace) -> int:

    matrix, expansion = load(args.matrix)
    cells = selected(matrix, expansion, args)
    pools = load_pools(args.pools) if args.pools else []
    sub_id = args.submission_id or datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    checked_name(sub_id, "--submission-id")
    args.runtime = args.runtime or ("host" if args.wheels else "sandbox")
    if args.runtime != "host" and args.wheels:
        raise PinmatrixError("ci slurm: --wheels is for the host runtime")
    if args.runtime != "sandbox" and (args.layout or args.roots):
        raise PinmatrixError("ci slurm: --layout and --roots are for the sandbox runtime")
    sub_dir = args.out / sub_id
    if (sub_dir / "submission.json").exists():
        raise PinmatrixError(f"ci slurm: {sub_dir} already holds a submission (choose another --submission-id)")
    settings = _slurm_settings(args, sub_dir)
    registry = (args.registry or matrix.settings.registry).rstrip("/")
    images = (None if args.runtime == "host" else layout_images(cells, settings.layout, registry)
              if settings.layout is not None else _images(cells, registry, "ci slurm"))
    store = ResultsStore(args.results) if args.results.exists() and not args.rerun else None
    planned = plan(cells, pools, settings, images=images, wheels=args.wheels, store=store, rerun=args.rerun)
    for line in planned.said(args.verbose):
        print(line, file=sys.stderr)
    if not planned.arrays:
        if not planned.recorded:
            raise PinmatrixError("ci slurm: no task to submit (see the skipped line above)")
        print("ci slurm: nothing to submit: every task is recorded (--rerun submits them again)", file=sys.stderr)
        return 0
    if args.print_only:  # the scripts as they would be written; nothing is written or submitted
        sys.stdout.write("".join(render_script(array, settings, settings.runtime) for array in planned.arrays))
        print(f"{len(planned.arrays)} script(s) for {sub_dir}; nothing written, nothing submitted", file=sys.stderr)
        return 0
    submission = prepare(planned, settings, sub_id)
    for array in submit(submission, settings).arrays:
        shown = " ".join(o for o in array.options if o.startswith(("--partition", "--constraint", "--gres", "--time")))
        print(f"submitted {array.name}: job {array.job_id}, {len(array.tasks)} task(s), {shown}")
    print(f"collect with: pinmatrix ci slurm-collect {sub_dir} --wait")
    return 0


def _slurm_settings(args: argparse.Namespace, sub_dir: Path) -> ScriptSettings:

    return ScriptSettings(
        matrix=args.matrix, submission_dir=sub_dir.resolve(), runtime=args.runtime,
        pinmatrix=(args.pinmatrix,) if args.pinmatrix else (sys.executable, "-m", "pinmatrix"),
        smoke_dir=find_smoke_dir(args.smoke_dir or _beside(args.matrix, "smoke")), cpus_per_task=args.cpus_per_task,
        cpu_partition=args.cpu_partition, time_limit_min=args.time_limit, keyword=args.smoke_keyword,
        layout=(args.layout or args.matrix.parent / OCI_DIR) if args.runtime == "sandbox" else None,
        roots=args.roots)


def run_slurm_node_check(args: argparse.Namespace) -> int:

    refused = node_refusal(args.runtime, args.roots)
    if refused is None:
        return 0
    print(f"pinmatrix: {refused}", file=sys.stderr)
    if args.refused:
        atomic_write_text(args.refused, refused + "\n")
    return CHECK_REFUSED


def _beside(matrix: Path, name: str) -> Path | None:
    """``name`` next to the matrix file, when it is a folder there (the project's smoke catalogue)."""
    path = matrix.parent / name
    return path if str(matrix) != "-" and path.is_dir() else None


def run_slurm_collect(args: argparse.Namespace) -> int:

    records = []
    waiting: list[str] = []
    dropped: list[str] = []
    tasks = 0
    for path in args.paths:
        if args.wait:
            slurm_collect.wait(path, timeout_s=args.wait_timeout, echo=lambda line: print(line, file=sys.stderr))
        got = slurm_collect.collect(path)
        records += got.records
        waiting += got.waiting
        dropped += got.dropped
        tasks += got.tasks
    if args.json == "-":
        print(json.dumps([r.to_dict() for r in records], indent=2, sort_keys=True))
    elif args.json:
        write_json_atomic(Path(args.json), [r.to_dict() for r in records])
    if args.results or not args.json:
        ResultsStore(args.results or DEFAULT_PATH).record_many(records)
    for line in waiting:
        print(f"not finished: {line}", file=sys.stderr)
    for line in dropped:
        print(f"dropped: {line}", file=sys.stderr)
    counts: dict[str, int] = {}
    for r in records:
        key = r.status + (f" [{r.failure_class}]" if r.failure_class and r.failure_class.startswith("slurm-") else "")
        counts[key] = counts.get(key, 0) + 1
    print(f"collected {len(records)} result(s) from {tasks - len(waiting)} of {tasks} task(s): "
          + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none"),
          file=sys.stderr if args.json == "-" else sys.stdout)
    return 1 if waiting else 0
