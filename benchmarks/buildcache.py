"""A fresh machine's build of a stack's plain cell from a registry build cache (``build --cache-from``), side by side
in one run with its floor and with a cold cache, all against one private docker-registry:

- cold: a fresh cache folder and layout, the registry cache empty (``--cache-to``): the Debian base made by
  mmdebstrap, the wheels fetched from the index and laid out, every layer stored to the cache;
- warm: another fresh cache folder and layout, the cache now warm (``--cache-from``): each layer fetched, checked
  (signed entry, digest) and recorded; the layers it still built are counted;
- floor: the same blobs pulled from the same registry by a parallel client (8 at once, each hashed as it streams)
  into an empty folder: nothing can bring those bytes onto the machine faster.

``PINMATRIX_BENCH_STACK`` (default h200; demo is small) picks the stack, ``PINMATRIX_BENCH_COMPRESSION`` (default
gzip:1) the layers' compression. Target: warm <= 1.2x the floor, and no layer built."""

from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.plaincell import plain_cell, seeded
from pinmatrix.engine.services import start_registry
from pinmatrix.image.assembly.assemble import Assembler, AssemblySettings, PlannedLayer
from pinmatrix.image.build_cache import BuildCache
from pinmatrix.imageref import image_ref
from pinmatrix.oci.compression import LayerCompression
from pinmatrix.project.lockfile import lock_path
from pinmatrix.registry.client import Registry
from pinmatrix.release.cache_signing import cache_trust
from pinmatrix.release.signing import generate_keypair, load_public_key

STACK = os.environ.get("PINMATRIX_BENCH_STACK", "h200")
COMPRESSION = LayerCompression.parse(os.environ.get("PINMATRIX_BENCH_COMPRESSION", "gzip:1"))
TARGET_RATIO = 1.2
PULLERS = 8
JOBS = 4


def _pull(registry: Registry, repository: str, digests: list[str], into: Path) -> float:
    """Seconds to pull ``digests`` from ``repository``, ``PULLERS`` at once, each hashed as it streams to a file."""
    into.mkdir(parents=True)

    def one(digest: str) -> None:
        with registry.another().open_blob(repository, digest) as reader, \
                open(into / digest.split(":")[1], "wb") as out:
            for chunk in iter(reader.read, b""):
                out.write(chunk)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(PULLERS) as pool:
        list(pool.map(one, digests))
    return time.perf_counter() - t0


def _machine(root: Path, work: Path, name: str, extra_ca: tuple[Path, ...], cache: BuildCache) -> Assembler:
    """A machine that starts empty: its own cache folder and layout."""
    assembler = Assembler(AssemblySettings(root=root, cache_dir=seeded(work / name / "cache"), layout_dir=work / name / "oci",
                                           extra_ca=extra_ca, jobs=JOBS, compression=COMPRESSION))
    assembler.remote = cache
    return assembler


def _built_layers(assembler: Assembler) -> list[str]:
    """The names of the layers ``assembler`` makes from now on (not found in a cache)."""
    built: list[str] = []
    original = assembler._cached_or_build

    def counted(planned: PlannedLayer, build: Any, epoch: int, on_step: Any = None) -> None:
        def counting(writer: Any) -> None:
            built.append(planned.name)
            build(writer)
        original(planned, counting, epoch, on_step)

    assembler._cached_or_build = counted  # type: ignore[method-assign]
    return built


def run() -> dict[str, Any]:
    target = plain_cell(STACK)
    root, cell, extra_ca, work_root = target.root, target.cell, target.extra_ca, target.work_root
    lock_text = lock_path(cell, root).read_text()
    figures: dict[str, Any] = {"stack": STACK, "cell": cell.name, "compression": str(COMPRESSION)}
    with tempfile.TemporaryDirectory(prefix="buildcache-", dir=work_root) as tmp:
        work = Path(tmp)
        private, public, _ = generate_keypair(work / "keys" / "signing")
        trust = cache_trust([load_public_key(public)], private)
        service = start_registry(work / "registry")
        try:
            cache_ref = f"{service.address}/bench/cache"
            cold = _machine(root, work, "cold", extra_ca, BuildCache(trust, cache_to=cache_ref))
            t0 = time.perf_counter()
            cold.assemble(cell, lock_text, image_ref(cell, "bench"), work / "cold.log")
            figures["cold_cache_s"] = round(time.perf_counter() - t0, 2)
            cache = BuildCache(trust, cache_from=cache_ref)
            warm = _machine(root, work, "warm", extra_ca, cache)
            built = _built_layers(warm)
            t0 = time.perf_counter()
            image = warm.assemble(cell, lock_text, image_ref(cell, "bench"), work / "warm.log")
            figures["warm_cache_s"] = round(time.perf_counter() - t0, 2)
            figures["warm_layers_built"] = built
            figures["warm_cache"] = cache.report.describe()
            stored = warm.layout.image(image.ref)
            assert stored is not None
            digests = sorted({d["digest"] for d in stored.manifest["layers"]})
            figures["blobs"] = len(digests)
            figures["blob_bytes"] = sum(int(d["size"]) for d in stored.manifest["layers"])
            figures["floor_parallel_pull_s"] = round(_pull(Registry(service.address), "bench/cache", digests,
                                                           work / "pulled"), 2)
        finally:
            service.stop()
    figures["ratio_warm_to_floor"] = round(figures["warm_cache_s"] / max(figures["floor_parallel_pull_s"], 1e-3), 2)
    figures["target"] = f"fresh machine, warm registry cache <= {TARGET_RATIO}x a parallel pull of the same bytes; " \
                        "no layer built"
    figures["target_met"] = figures["ratio_warm_to_floor"] <= TARGET_RATIO and not built
    return figures
