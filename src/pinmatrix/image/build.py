"""Build every selected cell's image: assembled as data into the OCI layout (``assemble``), loaded into the
engine's store and pushed to the registry by digest (``load_push``). Cells that must compile (a source patch)
go through the Containerfile path. One failed cell never stops the others; results say why, in one line."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext

from pinmatrix import interrupt
from pinmatrix.cell import Cell
from pinmatrix.engine import OCIEngine
from pinmatrix.errors import PinmatrixError
from pinmatrix.image.assembly.assemble import Assembler
from pinmatrix.image.blobsahead import BlobsAhead
from pinmatrix.image.build_cache import BuildCache
from pinmatrix.image.containerfile.render import build_cell as containerfile_build
from pinmatrix.image.load_push import load_into_engine, push
from pinmatrix.image.settings import BuildSettings, CellBuildResult, cell_build, needs_containerfile
from pinmatrix.imageref import ImageRef, image_ref
from pinmatrix.index.wheel_index import IndexUnreachable
from pinmatrix.oci.layer import LayerDescriptor
from pinmatrix.project.lockfile import lock_path
from pinmatrix.registry.client import Registry

INTERRUPT_GRACE_S = 0.5
"""A cell whose step failed waits this long for the main thread to take a Ctrl-C: the terminal's SIGINT reaches the
tools in pinmatrix's own process group too, and one may end (failing the step) before the main thread notices."""


class CellBuilder:
    """Builds cells with one shared assembler (wheel cache, layer cache, layout)."""

    def __init__(self, settings: BuildSettings, engine: OCIEngine | None, registry: Registry | None,
                 jobs: int = 2, cache: BuildCache | None = None) -> None:
        self.settings = settings
        self.engine = engine
        self.registry = registry
        self.assembler = Assembler(settings.assembly(jobs=max(2, jobs * 2)))
        self.cache = cache  # build --cache-from/--cache-to: layers fetched from and stored to a registry
        self.assembler.remote = cache
        self.unreachable: dict[str, list[str]] = {}  # index URL -> cell ids it failed
        self._guard = threading.Lock()

    def build(self, cell: Cell, lock_text: str, on_step: Callable[[str], None] = lambda s: None) -> CellBuildResult:
        if needs_containerfile(cell):
            if self.engine is None:
                raise PinmatrixError(f"cell {cell.id}: a source patch is compiled in a container: choose an --engine")
            return containerfile_build(cell, lock_text, self.engine, self.settings, registry=self.registry,
                                       on_step=on_step)
        settings = self.settings
        ref = image_ref(cell, settings.registry)
        with cell_build(cell, settings, f"# pinmatrix assembly of cell {cell.id} ({cell.name}): {ref}") as (result, note):

            def step(what: str) -> None:
                note(f"# {what}")
                on_step(what)

            try:
                with self._ahead(ref, step) as ahead:
                    image = self.assembler.assemble(cell, lock_text, ref, result.log, on_step=step,
                                                    on_blob=self._on_blob(ahead, ref))
                    if ahead is not None and not image.cached:
                        note(f"# push: {ahead.finish().describe()}")
                result.assembled = image
                result.digest, result.image_id = image.digest, image.config_digest
                result.layers = [p.name for p in image.layers]
                result.status = "cached" if image.cached else "built"
                result.cached_in = "layout" if image.cached else None
                for p in image.layers:
                    size = f"{p.descriptor.size / 1e6:.1f} MB" if p.descriptor else "-"
                    how = "fetched from the build cache" if p.fetched else "cached" if p.cached else (
                        f"built in {p.seconds:.1f}s")
                    note(f"#   layer {p.name}: {how}, {size}")
                for patch in cell.patches:
                    if patch.status != "apply":
                        note(f"# patch {patch.id} skipped: contained upstream"
                             + (f" in {patch.contained_in}" if patch.contained_in else ""))
                note(f"# image {ref}@{image.digest} (config {image.config_digest})")
                stored = self.assembler.layout.image(ref)
                assert stored is not None
                if self.engine is not None and settings.load:
                    step(f"load into {self.engine.name}")
                    load_into_engine(self.assembler.layout, stored, self.engine, say=step)
                if settings.push and self.registry is not None:
                    step("push")
                    creds = self.registry.credentials(_repository(ref))
                    pushed = push(self.assembler.layout, stored, ref, tls_verify=self.registry.tls_verify,
                                  authfile=settings.authfile or (creds.source if creds else None), say=step)
                    note(f"# pushed {ref}@{pushed}")
            except IndexUnreachable as err:
                with self._guard:
                    self.unreachable.setdefault(err.url, []).append(cell.id)
                result.fail(str(err), note)
        return result

    def _on_blob(self, ahead: BlobsAhead | None, ref: str) -> Callable[[LayerDescriptor], None]:
        """Each layer as its blob reaches the layout: mounted from the build cache's repository when the cache is on
        the registry pushed to (no upload), then sent ahead (it finds the mounted ones there)."""
        if ahead is None:
            return lambda layer: None
        cache, registry = self.cache, self.registry

        def on_blob(layer: LayerDescriptor) -> None:
            if cache is not None and registry is not None:
                cache.mount_into(registry, _repository(ref), [layer])
            ahead.add(layer)

        return on_blob

    def _ahead(self, ref: str, say: Callable[[str], None]) -> AbstractContextManager[BlobsAhead | None]:
        """With --push, the layers go to the registry as they are built (the push then sends the rest); ``say``
        hears each upload's progress."""
        if not self.settings.push or self.registry is None:
            return nullcontext()
        return BlobsAhead(self.registry, _repository(ref), self.assembler.layout.blob_path, say=say,
                          clock=self.assembler.clock)


def _repository(ref: str) -> str:
    """The repository of ``HOST/REPOSITORY:TAG`` (imageref's parser, where references are defined once)."""
    return ImageRef.parse(ref).repository


def build_all(cells: list[Cell], engine: OCIEngine | None, settings: BuildSettings, registry: Registry | None,
              jobs: int, console: object | None = None, lock_problems: dict[str, str] | None = None,
              *, on_result: Callable[[CellBuildResult], None] = lambda r: None,
              on_step: Callable[[Cell, str], None] = lambda c, s: None,
              builder: CellBuilder | None = None, cache: BuildCache | None = None) -> list[CellBuildResult]:
    """Build every cell, ``jobs`` at a time; cells that cannot be locked fail with the lock's reason. ``cache``:
    the build cache in a registry that layers are fetched from and stored to."""
    lock_problems = lock_problems or {}
    builder = builder or CellBuilder(settings, engine, registry, jobs, cache=cache)

    def one(cell: Cell) -> CellBuildResult:
        if cell.id in lock_problems:
            settings.logs_dir.mkdir(parents=True, exist_ok=True)
            log = settings.logs_dir / f"{cell.id}.log"
            log.write_text(f"# FAILED: {lock_problems[cell.id]}\n", encoding="utf-8")
            result = CellBuildResult(cell, image_ref(cell, settings.registry), "failed", log,
                                     reason=lock_problems[cell.id])
        else:
            lock_text = lock_path(cell, settings.root).read_text(encoding="utf-8")
            with guard:
                running[cell.id] = cell.name
            try:
                result = builder.build(cell, lock_text, on_step=lambda s: on_step(cell, s))
            finally:
                with guard:
                    running.pop(cell.id, None)
            if not result.ok and interrupt.pending(INTERRUPT_GRACE_S):
                return result  # stopped by Ctrl-C, not failed: the interrupt names it (below), nothing else
        on_result(result)
        return result

    # Cells that share a base go one per base first, so the others find the base layer made.
    leaders: dict[object, Cell] = {}
    for cell in cells:
        leaders.setdefault((cell.base, cell.platform), cell)
    first = list(leaders.values())
    running: dict[str, str] = {}  # cell id -> name, while its build runs
    guard = threading.Lock()
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))  # not `with`: Ctrl-C must not wait for a running step
    try:
        done = {c.id: f.result() for c, f in [(c, pool.submit(one, c)) for c in first]}
        rest = [(c, pool.submit(one, c)) for c in cells if c.id not in done]
        done.update({c.id: f.result() for c, f in rest})
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        with guard:
            stopped = ", ".join(f"{cid} ({name})" for cid, name in sorted(running.items()))
        raise KeyboardInterrupt(f"cell {stopped} interrupted, not failed" if stopped else "") from None
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    builder_unreachable = builder.unreachable
    results = [done[c.id] for c in cells]
    for r in results:
        for url, ids in builder_unreachable.items():
            if r.cell.id in ids:
                r.reason = f"index {url} unreachable (affects {len(ids)} cell(s))"
    return results
