"""``pinmatrix build``: assemble one OCI image per selected cell (tag = cell id) as data, load it into the
engine's store, push it by digest. The work lives in ``pinmatrix.image``; this module is the command line."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from pinmatrix import names
from pinmatrix.atomic import atomic_write_text
from pinmatrix.cell import Cell
from pinmatrix.commands._common import add_matrix_argument, add_selection_arguments, examples, selected
from pinmatrix.commands._registry import pushing
from pinmatrix.engine import ENGINE_NAMES, OCIEngine
from pinmatrix.engine.select import choose_engine
from pinmatrix.errors import PinmatrixError
from pinmatrix.image.annotations import image_origin
from pinmatrix.image.assembly.assemble import describe
from pinmatrix.image.assembly.merge import DEFAULT_MERGE_BELOW
from pinmatrix.image.build import CellBuilder, build_all
from pinmatrix.image.build_cache import BuildCache
from pinmatrix.image.settings import BuildSettings, CellBuildResult, needs_containerfile
from pinmatrix.imageref import image_ref
from pinmatrix.lock.resolve import lock_cells
from pinmatrix.lock.settings import LockSettings
from pinmatrix.matrix.selection import load
from pinmatrix.oci.compression import LayerCompression, choose, for_consumer, requested
from pinmatrix.paths import BUILD_LOGS_DIR, CACHE_DIR, OCI_DIR, public_key, signing_key
from pinmatrix.project.lockfile import lock_path
from pinmatrix.project.matrix_toml import Settings
from pinmatrix.registry.client import Registry
from pinmatrix.release.cache_signing import project_cache_trust
from pinmatrix.report.github_actions import build_annotations
from pinmatrix.report.tables import TableData, add_format_argument, console, output_format, print_table, table_format
from pinmatrix.sizes import parse_size


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "build",
        help="assemble one OCI image per cell (tag = cell id), skipping cells already built",
        description=(
            "Assemble each selected cell's image without running a container: a Debian base made by mmdebstrap "
            "(or a base image pinned by digest), one layer per locked wheel (fetched for the cell's platform and "
            "Python, checked against the lock's sha256, installed without running package code), installed-tree "
            "patches, the smoke harness, and a config written as data. Images go to an OCI layout "
            f"({OCI_DIR}), then into the engine's store and, with --push, to the registry with the same "
            "digest. A cell whose image already has the same inputs is not rebuilt, so an interrupted run "
            "resumes. Cells with a source patch are compiled through images/Containerfile.j2 with the engine. "
            "One failed cell does not stop the others; the exit code is 1 when any cell failed."
        ),
        **examples("pinmatrix build --stack demo --engine podman --push",
                   "pinmatrix build --stack h200 --print     # the plan: layers, keys, what is cached",
                   "pinmatrix build --stack demo --engine none --metadata-file built.json   # OCI layout only",
                   "pinmatrix build --stack demo --set six=1.15.0 --engine podman          # a one-off cell",
                   "pinmatrix build --stack h200 --cache-from 127.0.0.1:5000/cache --cache-to 127.0.0.1:5000/cache"),
    )
    add_matrix_argument(p)
    add_selection_arguments(p)
    p.add_argument("--engine", "-e", choices=("auto", "none", *ENGINE_NAMES), default=None,
                   help="engine whose store receives the images (default: matrix.engine; auto = podman if usable, "
                        "else docker; none = the OCI layout only)")
    p.add_argument("--jobs", "-j", type=int, default=2, help="cells built at once (default 2)")
    p.add_argument("--push", action="store_true",
                   help="push each image to the registry by digest, straight from the OCI layout; the images are "
                        "not loaded into an engine unless --engine or matrix.engine names one, or --load")
    p.add_argument("--load", action=argparse.BooleanOptionalAction, default=None,
                   help="load the images into the engine's store (default: yes, but not with --push when the "
                        "engine is only the default 'auto': the GPU hosts pull from the registry)")
    p.add_argument("--compression", default="auto", metavar="FORMAT[:LEVEL]",
                   help="the layers' compression: gzip (every engine reads it), zstd (podman, Docker >= 23; "
                        "faster to build and pull), none, each with an optional :LEVEL (gzip:6, zstd:9); auto "
                        "(default): zstd when the images are loaded into an engine that reads it, else gzip. "
                        "Part of each layer's inputs: another choice is another image digest")
    p.add_argument("--merge-below", default=f"{DEFAULT_MERGE_BELOW >> 20}MiB", metavar="SIZE",
                   help="wheels smaller than SIZE (as their index declares them: 4MiB, 8MB) share one layer, shown "
                        "in --print: fewer layers to pull; cells with the same small wheels share it, each bigger "
                        f"wheel keeps a layer of its own. Default {DEFAULT_MERGE_BELOW >> 20}MiB; 0: one layer per "
                        "wheel. Part of the image's inputs")
    p.add_argument("--registry", metavar="HOST/PREFIX",
                   help="image prefix and registry (default: matrix.registry, e.g. 127.0.0.1:5000/pinmatrix)")
    p.add_argument("--no-lock", action="store_true",
                   help="do not lock cells that have no lock; they fail with 'no lock' (fast for large matrices)")
    p.add_argument("--print", dest="print_plan", action="store_true",
                   help="print the plan (cells, layers, what is cached) as JSON and build nothing")
    p.add_argument("--metadata-file", type=Path, metavar="FILE",
                   help="write what was built as JSON to FILE: an object keyed by cell id, each with its ref, "
                        "manifest digest, layers, status and log")
    p.add_argument("--cache-from", metavar="HOST/REPOSITORY",
                   help="a build cache in a registry: each layer stored there under its key (signed with a trusted "
                        "key, re-hashed to its digest) is fetched instead of built; a cache that is down is one line "
                        "(default: matrix.cache_from)")
    p.add_argument("--cache-to", metavar="HOST/REPOSITORY",
                   help="store each layer built here in that build cache, its entry signed with the project's key "
                        "(pinmatrix keygen, or PINMATRIX_SIGNING_KEY) (default: matrix.cache_to)")
    p.add_argument("--no-build-cache", action="store_true",
                   help="use no registry build cache, whatever matrix.cache_from / cache_to say")
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    add_format_argument(p)
    p.add_argument("--cache-dir", type=Path, default=None,
                   help=f"wheels, layer records, rootfs (default: {CACHE_DIR} next to the matrix)")
    p.add_argument("--layout", type=Path, default=None, help=f"the OCI layout (default: {OCI_DIR})")
    p.add_argument("--logs-dir", type=Path, default=None,
                   help=f"per-cell build logs (default: {BUILD_LOGS_DIR} next to the matrix)")
    p.set_defaults(func=run, registry_need=pushing)


def _ensure_locks(cells: list[Cell], settings: LockSettings, console: Console) -> dict[str, str]:
    """Lock the cells that have no lock yet, as `pinmatrix lock` would; return cell id -> reason for those that
    cannot be locked."""
    missing = [c for c in cells if not lock_path(c, settings.root).is_file()]
    problems: dict[str, str] = {}
    if missing:
        console.print(f"locking {len(missing)} cell(s) without a lock first (pinmatrix lock)")
        for res in lock_cells(missing, settings):
            if not res.ok:
                problems[res.cell.id] = f"cannot lock: {res.reason} (see `pinmatrix lock -k {res.cell.id}`)"
    return problems


def settings_for(args: argparse.Namespace, matrix_root: Path, registry: str | None, matrix: Settings) -> BuildSettings:
    cache = args.cache_dir or matrix_root / CACHE_DIR
    return BuildSettings(
        root=matrix_root, cache_dir=cache, logs_dir=args.logs_dir or matrix_root / BUILD_LOGS_DIR,
        registry=registry, ca_certificates=tuple(Path(p) for p in matrix.ca_certificates),
        ca_in_images=bool(getattr(matrix, "ca_certificates_in_images", False)),
        push=args.push, layout_dir=args.layout or matrix_root / OCI_DIR,
        merge_below=parse_size(args.merge_below, "--merge-below", minimum=0),
        origin=image_origin(matrix_root, matrix.source),  # a bad SOURCE_DATE_EPOCH is refused before any lock
    )


def _print_plan(cells: list[Cell], settings: BuildSettings, lock_problems: dict[str, str]) -> int:
    builder = CellBuilder(settings, None, None)
    plan: list[dict[str, object]] = []
    for cell in cells:
        entry: dict[str, object] = {"cell": cell.id, "name": cell.name, "ref": image_ref(cell, settings.registry),
                                    "compression": str(settings.compression)}
        if cell.id in lock_problems:
            entry["error"] = lock_problems[cell.id]
        elif needs_containerfile(cell):
            entry["path"] = "containerfile (source patch)"
        else:
            try:
                image, _ = builder.assembler.plan(cell, lock_path(cell, settings.root).read_text(encoding="utf-8"),
                                                  settings.logs_dir / f"{cell.id}.plan.log", dry=True)
                image.ref = entry["ref"]  # type: ignore[assignment]
                stored = builder.assembler.layout.image(image.ref)
                image.cached = bool(stored and stored.annotations.get("io.pinmatrix.inputs") == image.inputs)
                entry.update(describe([image])[0])
            except PinmatrixError as err:
                entry["error"] = str(err)
        plan.append(entry)
    print(json.dumps(plan, indent=1))
    return 0


def run(args: argparse.Namespace) -> int:
    matrix, expansion = load(args.matrix)
    cells = selected(matrix, expansion, args)
    if args.jobs < 1:
        raise PinmatrixError("--jobs must be at least 1")
    wanted = requested(args.compression)  # a bad --compression is refused before any lock or build
    root = Path(matrix.root)
    err = console(sys.stderr)
    registry_setting = args.registry or matrix.settings.registry or None
    settings = settings_for(args, root, registry_setting, matrix.settings)
    cache = None if args.print_plan else _build_cache(args, root, matrix.settings)  # bad input: before any work
    if args.no_lock:
        lock_problems = {c.id: f"no lock: run `pinmatrix lock -k {c.id}`" for c in cells
                         if not lock_path(c, root).is_file()}
    else:
        lock_problems = _ensure_locks(cells, LockSettings.of(matrix), err)
    if args.print_plan:
        # auto without starting an engine: zstd for podman, which always reads it, else gzip
        plan_compression = wanted or for_consumer((args.engine or matrix.settings.engine) == "podman")
        return _print_plan(cells, replace(settings, compression=plan_compression), lock_problems)
    settings, engine, registry = _targets(args, wanted, matrix.settings.engine, registry_setting, settings, cells,
                                          err)
    where = f"into {engine.name}" if engine and settings.load else "into the OCI layout only"
    err.print(f"building {len(cells)} cell(s) {where}, {args.jobs} at once, {settings.compression} layers; "
                  f"logs in {settings.logs_dir}")
    results = _with_progress(cells, engine, settings, registry, args.jobs, err, lock_problems, cache)
    print_table(summary_table(results), table_format(args, sys.stderr), sys.stderr)  # JSON goes to stdout
    failed = [r for r in results if not r.ok]
    built = sum(r.status == "built" for r in results)
    cached = sum(r.status == "cached" for r in results)
    print(f"{built} built, {cached} cached, {len(failed)} failed", file=sys.stderr)
    data = [r.to_json() for r in results]
    if args.metadata_file:  # keyed by cell id, as `docker buildx bake --metadata-file` keys by target
        atomic_write_text(args.metadata_file, json.dumps({r["cell"]: r for r in data}, indent=1) + "\n")
    if output_format(args) == "json":
        print(json.dumps(data, indent=1))
    for line in build_annotations(failed, str(args.matrix)):  # under GitHub Actions only
        print(line, file=sys.stderr)
    return 1 if failed else 0


def _targets(args: argparse.Namespace, wanted: LayerCompression | None, matrix_engine: str,
             registry_setting: str | None, settings: BuildSettings, cells: list[Cell],
             console: Console) -> tuple[BuildSettings, OCIEngine | None, Registry | None]:
    """Where the images go: the engine they are loaded into (none when they are only pushed, unless --load or a
    cell builds from a Containerfile) and the registry they are pushed to."""
    engine_name = args.engine or matrix_engine
    load_images = args.load if args.load is not None else not (args.push and engine_name == "auto")
    compiles = any(needs_containerfile(c) for c in cells)
    engine = choose_engine(engine_name) if load_images or compiles else None
    settings = replace(settings, load=load_images, compression=_compression(wanted, engine, load_images))
    if args.push and not load_images:
        console.print("--push: images go to the registry from the OCI layout; nothing is loaded into an engine "
                      "(--load loads them too)")
    registry = Registry.from_setting(registry_setting) if registry_setting else None
    if args.push and registry is None:
        raise PinmatrixError("--push needs a registry: set matrix.registry or pass --registry")
    if args.push and registry is not None and not registry.ping():
        raise PinmatrixError(f"registry {registry.host} is not reachable; start it or drop --push")
    return settings, engine, registry


def _cache_ref(flag: str, given: str | None, setting: str | None) -> str | None:
    """The cache repository of ``flag``, else of its matrix setting (checked when the matrix was loaded)."""
    if given is None:
        return setting
    try:
        return names.check_cache_repository(given)
    except ValueError as err:
        raise PinmatrixError(f"{flag}: {err}") from None


def _build_cache(args: argparse.Namespace, root: Path, matrix_settings: Settings) -> BuildCache | None:
    """--cache-from / --cache-to (else matrix.cache_from / cache_to, unless --no-build-cache): the build cache, its
    entries checked with the trusted keys, signed with ours."""
    if args.no_build_cache:
        if args.cache_from or args.cache_to:
            raise PinmatrixError("--no-build-cache contradicts --cache-from / --cache-to")
        return None
    cache_from = _cache_ref("--cache-from", args.cache_from, matrix_settings.cache_from)
    cache_to = _cache_ref("--cache-to", args.cache_to, matrix_settings.cache_to)
    if not cache_from and not cache_to:
        return None
    trust = project_cache_trust(reading=bool(cache_from), writing=bool(cache_to),
                                private=signing_key(root), public=public_key(root))
    return BuildCache(trust, cache_from=cache_from, cache_to=cache_to)


def _compression(wanted: LayerCompression | None, engine: OCIEngine | None, load_images: bool) -> LayerCompression:
    """``--compression`` for the engine that loads the images (asked whether it reads zstd only then)."""
    loading = engine if engine is not None and load_images else None
    return choose(wanted, loading.name if loading else None, loading.reads_zstd_layers() if loading else False)


def _with_progress(cells: list[Cell], engine: OCIEngine | None, settings: BuildSettings, registry: Registry | None,
                   jobs: int, console: Console, lock_problems: dict[str, str],
                   cache: BuildCache | None = None) -> list[CellBuildResult]:
    """``build_all`` with a progress display: cells done / cached / failed and what each running cell does."""
    counts = {"built": 0, "cached": 0, "failed": 0}
    guard = threading.Lock()
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(),
                        console=console, transient=False)
    overall = progress.add_task("", total=len(cells))
    tasks: dict[str, TaskID] = {}

    def headline() -> str:
        return (f"cells {sum(counts.values())}/{len(cells)}: {counts['built']} built, {counts['cached']} cached, "
                f"{counts['failed']} failed")

    def on_step(cell: Cell, what: str) -> None:
        with guard:
            if cell.id not in tasks:
                tasks[cell.id] = progress.add_task("", total=None)
        progress.update(tasks[cell.id], description=f"  {cell.id} {cell.name}: {what}")

    def on_result(result: CellBuildResult) -> None:
        with guard:
            task = tasks.pop(result.cell.id, None)
            counts[result.status] += 1
        if task is not None:
            progress.remove_task(task)
        progress.update(overall, advance=1, description=headline())
        mark = {"built": "built ", "cached": "cached", "failed": "FAILED"}[result.status]
        progress.console.print(f"{mark} {result.cell.id} {result.cell.name} ({result.seconds:.1f}s)"
                               + (f": {result.reason}" if result.reason else ""))

    progress.update(overall, description=headline())
    with progress:
        results = build_all(cells, engine, settings, registry, jobs, console, lock_problems,
                            on_result=on_result, on_step=on_step, cache=cache)
    if cache is not None:
        console.print(cache.report.describe())
    return results


def summary_table(results: list[CellBuildResult]) -> TableData:
    table = TableData(f"{len(results)} cells", ("cell", "name", "status", "time", "image / reason"),
                      right=frozenset({"time"}))
    for r in results:
        status = r.status + (f" ({r.cached_in})" if r.cached_in else "")
        detail = f"{r.reason} (log: {r.log})" if r.reason else (r.digest or r.image_id or "")[:19]
        style = "red" if r.status == "failed" else ("green" if r.status == "built" else None)
        table.add(r.cell.id, r.cell.name, status, f"{r.seconds:.1f}s", detail, style=style)
    return table
