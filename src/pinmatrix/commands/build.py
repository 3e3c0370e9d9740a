"""``pinmatrix build``: build one OCI image per selected cell, tagged with the cell id."""

from __future__ import annotations

import argparse
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from pinmatrix.cell import Cell
from pinmatrix.commands._common import add_matrix_argument, add_selection_arguments, load, selected
from pinmatrix.engine import ENGINE_NAMES, OCIEngine, detect_engines, get_engine
from pinmatrix.errors import EngineError, PinmatrixError
from pinmatrix.imagebuild import BuildSettings, CellBuildResult, build_cell, image_ref
from pinmatrix.lock import lock_cells, lock_path
from pinmatrix.registry import Registry


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "build",
        help="build one OCI image per cell (tag = cell id), skipping cells already built",
        description=(
            "Render images/Containerfile.j2 for each selected cell (layers from images/layers.toml, packages "
            "from locks/<cell-id>.txt with hashes, patches, smoke harness) and build it with docker or "
            "podman/buildah. A cell whose tag already exists with the same inputs, in the local store or the "
            "registry, is not rebuilt, so an interrupted run resumes where it stopped. One failed cell does "
            "not stop the others; the exit code is 1 when any cell failed. Cells without a lock are locked "
            "first. Per-cell build logs go to --logs-dir."
        ),
    )
    add_matrix_argument(p)
    add_selection_arguments(p)
    p.add_argument("--engine", "-e", choices=("auto", *ENGINE_NAMES), default=None,
                   help="container engine (default: matrix.engine; auto = podman if usable, else docker)")
    p.add_argument("--jobs", "-j", type=int, default=2, help="cells built at once (default 2)")
    p.add_argument("--push", action="store_true", help="push each image to the registry and record its digest")
    p.add_argument("--registry", metavar="HOST/PREFIX",
                   help="image prefix and registry (default: matrix.registry, e.g. 127.0.0.1:5000/pinmatrix)")
    p.add_argument("--no-registry-check", action="store_true",
                   help="do not count an image found in the registry as built")
    p.add_argument("--cache-dir", type=Path, default=None, help="cache for base rootfs, patches, contexts "
                   "(default: .pinmatrix/cache next to the matrix)")
    p.add_argument("--logs-dir", type=Path, default=None,
                   help="per-cell build logs (default: .pinmatrix/logs/build next to the matrix)")
    p.set_defaults(func=run)


def choose_engine(name: str) -> OCIEngine:
    if name != "auto":
        engine = get_engine(name)
        engine.ensure_running()
        return engine
    status = detect_engines()
    for candidate in ("podman", "docker"):
        if status[candidate] == "ok":
            return get_engine(candidate)
    raise EngineError("no container engine is usable: " + "; ".join(status.values()))


def _ensure_locks(cells: list[Cell], root: Path, exclude_newer: str | None, console: Console) -> dict[str, str]:
    """Lock the cells that have no lock yet; return cell id -> reason for those that cannot be locked."""
    missing = [c for c in cells if not lock_path(c, root).is_file()]
    problems: dict[str, str] = {}
    if missing:
        console.print(f"locking {len(missing)} cell(s) without a lock first (pinmatrix lock)")
        for res in lock_cells(missing, root=root, exclude_newer=exclude_newer):
            if not res.ok:
                problems[res.cell.id] = f"cannot lock: {res.reason} (see `pinmatrix lock -k {res.cell.id}`)"
    return problems


def run(args: argparse.Namespace) -> int:
    matrix, expansion = load(args.matrix)
    cells = selected(matrix, expansion, args)
    if not cells:
        raise PinmatrixError("no cell matches the selection (--stack / -k)")
    if args.jobs < 1:
        raise PinmatrixError("--jobs must be at least 1")
    root = Path(matrix.root)
    console = Console(stderr=True, highlight=False, markup=False)
    engine = choose_engine(args.engine or matrix.settings.engine)
    registry_setting = args.registry or matrix.settings.registry or None
    registry = Registry.from_setting(registry_setting) if registry_setting else None
    if args.push and registry is None:
        raise PinmatrixError("--push needs a registry: set matrix.registry or pass --registry")
    if args.push and registry is not None and not registry.ping():
        raise PinmatrixError(f"registry {registry.host} is not reachable; start it or drop --push")
    settings = BuildSettings(
        root=root,
        cache_dir=args.cache_dir or root / ".pinmatrix" / "cache",
        logs_dir=args.logs_dir or root / ".pinmatrix" / "logs" / "build",
        registry=registry_setting,
        ca_certificates=tuple(Path(p) for p in matrix.settings.ca_certificates),
        push=args.push,
        check_registry=not args.no_registry_check and registry is not None and registry.ping(),
    )
    lock_problems = _ensure_locks(cells, root, matrix.settings.exclude_newer, console)
    console.print(f"building {len(cells)} cell(s) with {engine.name}, {args.jobs} at once; logs in {settings.logs_dir}")
    results = build_all(cells, engine, settings, registry, args.jobs, console, lock_problems)
    console.print(summary_table(results))
    failed = [r for r in results if not r.ok]
    built = sum(r.status == "built" for r in results)
    cached = sum(r.status == "cached" for r in results)
    print(f"{built} built, {cached} cached, {len(failed)} failed", file=sys.stderr)
    return 1 if failed else 0


def build_all(
    cells: list[Cell],
    engine: OCIEngine,
    settings: BuildSettings,
    registry: Registry | None,
    jobs: int,
    console: Console,
    lock_problems: dict[str, str] | None = None,
) -> list[CellBuildResult]:
    """Build every cell with a progress display: cells done / cached / failed and each running cell's layer."""
    lock_problems = lock_problems or {}
    counts = {"built": 0, "cached": 0, "failed": 0}
    guard = threading.Lock()
    progress = Progress(
        SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(), console=console, transient=False
    )
    overall = progress.add_task("", total=len(cells))

    def headline() -> str:
        return f"cells {sum(counts.values())}/{len(cells)}: {counts['built']} built, {counts['cached']} cached, {counts['failed']} failed"

    progress.update(overall, description=headline())

    def one(cell: Cell) -> CellBuildResult:
        task = progress.add_task(f"  {cell.id} {cell.name}: queued", total=None)
        settings.logs_dir.mkdir(parents=True, exist_ok=True)
        if cell.id in lock_problems:
            log = settings.logs_dir / f"{cell.id}.log"
            log.write_text(f"# FAILED: {lock_problems[cell.id]}\n", encoding="utf-8")
            result = CellBuildResult(cell, image_ref(cell, settings.registry), "failed", log, reason=lock_problems[cell.id])
        else:
            lock_text = lock_path(cell, settings.root).read_text(encoding="utf-8")
            result = build_cell(
                cell, lock_text, engine, settings, registry=registry,
                on_step=lambda layer: progress.update(task, description=f"  {cell.id} {cell.name}: {layer}"),
            )
        progress.remove_task(task)
        with guard:
            counts[result.status] += 1
            progress.update(overall, advance=1, description=headline())
        mark = {"built": "built ", "cached": "cached", "failed": "FAILED"}[result.status]
        progress.console.print(f"{mark} {cell.id} {cell.name} ({result.seconds:.1f}s)"
                               + (f": {result.reason}" if result.reason else ""))
        return result

    # Cells with the same base, Python and indexes share the first layers. Build one of each such group
    # first, so the others find those layers cached instead of building them again at the same time
    # (docker's builder would make them differ, and the images would no longer share them).
    leaders: dict[tuple[object, ...], Cell] = {}
    for cell in cells:
        leaders.setdefault((cell.base, cell.python, cell.indexes), cell)
    leader_ids = {c.id for c in leaders.values()}
    first = [c for c in cells if c.id in leader_ids]
    pool = ThreadPoolExecutor(max_workers=jobs)
    with progress:
        try:
            done = {cell.id: future.result() for cell, future in [(c, pool.submit(one, c)) for c in first]}
            rest = [(c, pool.submit(one, c)) for c in cells if c.id not in done]
            done.update({cell.id: future.result() for cell, future in rest})
            results = [done[cell.id] for cell in cells]
        except BaseException:
            # Ctrl-C: queued cells never start; running builds die with the same SIGINT (same process
            # group). Finished cells are tagged, so the next run finds them cached and resumes.
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    pool.shutdown()
    return results


def summary_table(results: list[CellBuildResult]) -> Table:
    table = Table(title=f"{len(results)} cells")
    table.add_column("cell", no_wrap=True)
    table.add_column("name", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    table.add_column("image / reason", overflow="fold")
    for r in results:
        status = r.status + (f" ({r.cached_in})" if r.cached_in else "")
        if r.reason:
            detail = f"{r.reason} (log: {r.log})"
        else:
            detail = (r.digest or r.image_id or "")[:19]
        style = "red" if r.status == "failed" else ("green" if r.status == "built" else None)
        table.add_row(*(Text(v) for v in (r.cell.id, r.cell.name, status, f"{r.seconds:.1f}s", detail)), style=style)
    return table
