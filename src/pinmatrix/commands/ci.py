"""``pinmatrix ci``: emit CI job definitions from the matrix (GitHub Actions matrix, Kubernetes Jobs) and
collect what Kubernetes smoke Jobs wrote back."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

from pinmatrix.atomic import atomic_write_text
from pinmatrix.commands._common import add_matrix_argument, add_selection_arguments, selected
from pinmatrix.errors import PinmatrixError
from pinmatrix.matrix.selection import load
from pinmatrix.results.store import DEFAULT_PATH, ResultsStore, write_json_atomic


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ci", help="emit CI jobs (GitHub Actions matrix, Kubernetes Jobs) and collect k8s results",
                       description="Generate CI job definitions from the matrix. See docs/ci.md.")
    ci = p.add_subparsers(dest="ci_command", metavar="TARGET", required=True)

    g = ci.add_parser("github", help="a GitHub Actions job matrix (JSON): one job per cell, runner labels per cell",
                      description="Print {\"include\": [...]} with one entry per cell: cell, name, stack, gpu, "
                                  "driver, gpu-required, smokes, image (the cell's build tag) and runs-on (self-hosted, linux, the architecture, "
                                  "gpu-<gpu>, nvidia-driver-<driver> for GPU cells; --cpu-runner for CPU-only "
                                  "cells). Use with strategy.matrix: ${{ fromJSON(needs.<job>.outputs.matrix) }}.")
    add_matrix_argument(g)
    add_selection_arguments(g)
    g.add_argument("--cpu-runner", action="append", metavar="LABEL",
                   help="runs-on labels of CPU-only cells (repeatable; default: ubuntu-latest)")
    g.add_argument("--registry", metavar="PREFIX", help="image prefix for each entry's `image` (default: [matrix].registry)")
    g.add_argument("--pretty", action="store_true", help="indent the JSON")
    g.add_argument("--json", action="store_true", help="JSON on stdout (what this command always prints)")
    g.set_defaults(func=run_github)

    k = ci.add_parser("k8s", help="Kubernetes Jobs, one per cell x GPU node pool, selected by GPU feature discovery labels",
                      description="Emit a ConfigMap with the smoke catalogue and one batch/v1 Job per cell and fitting "
                                  "node pool (nodeSelector: nvidia.com/gpu.product, nvidia.com/cuda.driver.*, "
                                  "nvidia.com/gpu.compute.*). Each Job runs the cell's smokes in the cell's image, "
                                  "by digest, and writes raw results under the results volume; `pinmatrix ci collect` "
                                  "turns them into result records. The manifests are validated against the Kubernetes "
                                  "JSON schemas (kubernetes-validate, strict) before they are printed.")
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
    k.add_argument("--kube-version", default="1.37.0", help="Kubernetes version to validate against (default 1.37.0)")
    k.add_argument("--no-validate", action="store_true", help="skip schema validation")
    k.set_defaults(func=run_k8s)

    c = ci.add_parser("collect", help="turn what k8s smoke Jobs wrote (run.json + logs) into result records",
                      description="Read every pod output directory (a run.json written by the pod runner) under the "
                                  "given paths, classify each smoke and apply known issues as `pinmatrix smoke` does, "
                                  "and record the results in the store and/or a JSON file for `pinmatrix results "
                                  "--import` or `pinmatrix report --from-json`.")
    c.add_argument("paths", nargs="+", type=Path, metavar="DIR", help="pod output directories, or folders holding them")
    c.add_argument("--matrix", type=Path, default=Path("matrix.toml"), help="the matrix file (default: ./matrix.toml)")
    c.add_argument("--results", type=Path, default=None, metavar="PATH",
                   help=f"record into this results store (default: {DEFAULT_PATH} unless --json is given)")
    c.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                   help="print the records as JSON on stdout (the summary goes to stderr), or write them to FILE")
    c.set_defaults(func=run_collect)


def run_github(args: argparse.Namespace) -> int:
    from pinmatrix.ci.github import github_matrix

    matrix, expansion = load(args.matrix)
    cells = selected(matrix, expansion, args)
    data = github_matrix(cells, cpu_runner=args.cpu_runner or ["ubuntu-latest"],
                         registry=args.registry or matrix.settings.registry)
    print(json.dumps(data, indent=2 if args.pretty else None, separators=None if args.pretty else (",", ":")))
    return 0


def _images(cells, prefix: str) -> dict[str, str]:  # noqa: ANN001
    from pinmatrix.image.settings import image_ref
    from pinmatrix.registry.client import Registry
    from pinmatrix.registry.ref import ImageRef, RegistryError

    ImageRef.parse(prefix + "/x")
    registry = Registry(prefix.split("/", 1)[0])
    images = {}
    for cell in cells:
        ref = ImageRef.parse(image_ref(cell, prefix))
        try:
            digest = registry.resolve(ref)
        except RegistryError as err:
            raise PinmatrixError(f"ci k8s: cannot look up cell images: {err}") from None
        if digest:
            images[cell.id] = str(ref.with_digest(digest))
    return images


def run_k8s(args: argparse.Namespace) -> int:
    from pinmatrix.ci.k8s import k8s_manifests, load_pools, validate
    from pinmatrix.smoke.catalogue import find_smoke_dir

    matrix, expansion = load(args.matrix)
    cells = selected(matrix, expansion, args)
    pools = load_pools(args.pools)
    smoke_dir = find_smoke_dir(args.smoke_dir)
    run_id = args.run_id or datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    images = _images(cells, (args.registry or matrix.settings.registry).rstrip("/"))
    emitted = k8s_manifests(cells, pools, images, smoke_dir=smoke_dir, namespace=args.namespace,
                            results_claim=args.results_claim, run_id=run_id)
    for line in emitted.skipped:
        print(f"skipped {line}", file=sys.stderr)
    if not emitted.jobs:
        raise PinmatrixError("ci k8s: no Job to emit (see the skipped lines above)")
    if not args.no_validate:
        problems = validate(emitted.documents, args.kube_version)
        if problems:
            raise PinmatrixError(f"ci k8s: generated manifests fail schema validation: {problems[0]}")
    import yaml

    if args.format == "json":
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": emitted.documents}, indent=2, sort_keys=True)
    else:
        text = yaml.safe_dump_all(emitted.documents, sort_keys=False, width=120)
    if args.output:
        atomic_write_text(args.output, text + ("\n" if not text.endswith("\n") else ""))
        print(f"wrote {len(emitted.jobs)} Job(s) and 1 ConfigMap to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def run_collect(args: argparse.Namespace) -> int:
    from pinmatrix.ci.k8s import collect

    _, expansion = load(args.matrix)
    cells = {c.id: c for c in expansion.cells}
    dirs: list[Path] = []
    for path in args.paths:
        if not path.exists():
            raise PinmatrixError(f"{path}: no such directory")
        dirs += sorted(p.parent for p in ([path / "run.json"] if (path / "run.json").is_file() else path.rglob("run.json")))
    if not dirs:
        raise PinmatrixError(f"no run.json under {', '.join(str(p) for p in args.paths)}")
    records = [r for d in dirs for r in collect(d, cells)]
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
