"""A fresh machine's build of a stack's plain cell from a registry build cache (``build --cache-from``), side by side
in one run with its floor and with a cold cache, all against one private docker-registry:

- cold: a fresh cache folder and layout, the registry cache empty (``--cache-to``): the Debian base made by
  mmdebstrap, the wheels fetched from the index and laid out, every layer stored to the cache;
- warm: another fresh cache folder and layout, the cache now warm (``--cache-from``): each layer fetched, checked
  (signed entry, digest) and recorded; the layers it still built are counted;
- floor: the same blobs pulled from the same registry by a parallel client (8 at once, each hashed as it streams)
  into an empty folder (``floor.parallel_pull``): nothing can bring those bytes onto the machine faster.

Warm and floor are timed in turns, ``PINMATRIX_BENCH_ROUNDS`` rounds (default 3), which goes first alternating, each
on a fresh machine's folders and after whatever came before is written back (``floor.quiet``), the registry's blobs
read once before (untimed), so that the two start alike: timed once each, the warm machine right after the cold
build and the floor right after it, the order alone moved the ratio (docs/images.md). The medians are compared.

Then a case where the bytes dominate, without downloading a stack's wheels (``synthetic_*``): blobs of random bytes
shaped like an h200 cell's layers (``SHAPE``: its wheels' sizes, scaled to ``PINMATRIX_BENCH_BYTES`` in all, default
1e9), stored as signed entries, fetched by a fresh machine as a warm build fetches its layers
(``Assembler._prefetch``: the entries, then the blobs, each re-hashed and recorded) against the floor's pull of the
same blobs, in turns as above (at the smallest size, the 8 largest of them).

``PINMATRIX_BENCH_STACK`` (default h200; demo is small; none: only the synthetic case) picks the stack,
``PINMATRIX_BENCH_COMPRESSION`` (default gzip:1) the layers' compression. Target: warm <= 1.2x the floor, and no
layer built."""

from __future__ import annotations

import hashlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.floor import parallel_pull, quiet
from benchmarks.plaincell import SMALLEST, plain_cell, seeded
from pinmatrix.engine.services import start_registry
from pinmatrix.image.assembly.assemble import AssembledImage, Assembler, AssemblySettings, PlannedLayer
from pinmatrix.image.build_cache import BuildCache, CacheTrust
from pinmatrix.imageref import image_ref
from pinmatrix.oci.compression import LayerCompression
from pinmatrix.oci.layer import LayerDescriptor
from pinmatrix.oci.layout import OCILayout
from pinmatrix.project.lockfile import lock_path
from pinmatrix.registry.client import Registry
from pinmatrix.release.cache_signing import cache_trust
from pinmatrix.release.signing import generate_keypair, load_public_key

STACK = os.environ.get("PINMATRIX_BENCH_STACK", "h200")
COMPRESSION = LayerCompression.parse(os.environ.get("PINMATRIX_BENCH_COMPRESSION", "gzip:1"))
ROUNDS = max(1, int(os.environ.get("PINMATRIX_BENCH_ROUNDS", "3")))
SYNTHETIC_BYTES = int(float(os.environ.get("PINMATRIX_BENCH_BYTES", "1e9")))
TARGET_RATIO = 1.2
JOBS = 4
REPOSITORY = "bench/cache"
# The synthetic case's layers, in the plan's order (by name): an h200 cell's 61 wheels, their sizes in MB as the
# index declared them (the torch 2.15 / CUDA 13 candidate cell, 2026-12-07), 3,525 MB in all; scaled to
# PINMATRIX_BENCH_BYTES. A wheel layer (gzip:1) is about its wheel's size.
SHAPE: tuple[tuple[str, float], ...] = (
    ("apache-tvm-ffi", 3.31), ("certifi", 0.13), ("charset-normalizer", 0.26), ("click", 0.13), ("cuda-bindings", 6.93),
    ("cuda-core", 6.56), ("cuda-pathfinder", 0.06), ("cuda-python", 0.01), ("cuda-tile", 0.43), ("cuda-toolkit", 0.0),
    ("einops", 0.07), ("filelock", 0.24), ("flashinfer-python", 101.29), ("fsspec", 0.22), ("idna", 0.07),
    ("jinja2", 0.13), ("markupsafe", 0.02), ("mpmath", 0.54), ("nccl-extensions", 22.56), ("nccl4py", 3.69),
    ("networkx", 2.14), ("ninja", 0.18), ("numpy", 15.71), ("nvidia-cublas", 404.87), ("nvidia-cuda-cccl", 3.6),
    ("nvidia-cuda-crt", 0.13), ("nvidia-cuda-cupti", 11.99), ("nvidia-cuda-nvcc", 44.04), ("nvidia-cuda-nvrtc", 47.02),
    ("nvidia-cuda-runtime", 2.32), ("nvidia-cudnn-cu13", 519.15), ("nvidia-cudnn-frontend", 11.62),
    ("nvidia-cufft", 218.26), ("nvidia-cufile", 1.39), ("nvidia-curand", 59.95), ("nvidia-cusolver", 227.91),
    ("nvidia-cusparse", 151.0), ("nvidia-cusparselt-cu13", 170.15), ("nvidia-cutlass-dsl", 0.01),
    ("nvidia-cutlass-dsl-libs-base", 3.05), ("nvidia-cutlass-dsl-libs-core", 1.64),
    ("nvidia-cutlass-dsl-libs-cu12", 91.7), ("nvidia-cutlass-dsl-libs-cu13", 91.95), ("nvidia-ml-py", 0.06),
    ("nvidia-nccl-cu13", 215.97), ("nvidia-nvjitlink", 46.64), ("nvidia-nvshmem-cu13", 135.4), ("nvidia-nvtx", 0.15),
    ("nvidia-nvvm", 64.28), ("packaging", 0.14), ("protobuf", 0.34), ("requests", 0.07), ("setuptools", 0.88),
    ("sympy", 6.3), ("tabulate", 0.04), ("torch", 539.17), ("tqdm", 0.08), ("triton", 285.67),
    ("typing-extensions", 0.05), ("urllib3", 0.14), ("xformers", 3.26),
)


def _in_turns(warm: Callable[[int], float], floor: Callable[[int], float]) -> dict[str, Any]:
    """``ROUNDS`` rounds of the warm machine and the floor (round ``r`` given to each), the first of each round
    alternating, each timed phase started quiet; the medians, their ratio and each round's. The floor pulls once
    before, untimed, so that neither is the first to read the registry's blobs after the cold build."""
    floor(-1)
    times: dict[str, list[float]] = {"warm": [], "floor": []}
    for r in range(ROUNDS):
        for name, timed in ((("warm", warm), ("floor", floor)) if r % 2 == 0 else (("floor", floor), ("warm", warm))):
            if not SMALLEST:  # a sync waits for every job's writes on the machine; at the smallest size nothing is judged
                quiet()
            times[name].append(timed(r))
    warm_s, floor_s = statistics.median(times["warm"]), statistics.median(times["floor"])
    return {"warm_s": round(warm_s, 2), "floor_s": round(floor_s, 2), "ratio": round(warm_s / max(floor_s, 1e-3), 2),
            "rounds": [f"{w:.2f}/{f:.2f}" for w, f in zip(times["warm"], times["floor"], strict=True)]}


def _machine(root: Path, folder: Path, extra_ca: tuple[Path, ...], cache: BuildCache, *, seed: bool = False) -> Assembler:
    """A machine that starts empty: its own cache folder and layout under ``folder``; ``seed``: holding the Debian
    bases kept under ``PINMATRIX_BENCH_BASE_CACHE`` (the cold machine only: a warm one fetches its base)."""
    cache_dir = seeded(folder / "cache") if seed else folder / "cache"
    assembler = Assembler(AssemblySettings(root=root, cache_dir=cache_dir, layout_dir=folder / "oci",
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


def _cell(work: Path, trust: CacheTrust, address: str) -> dict[str, Any]:
    """The stack's plain cell: cold, then warm and floor in turns."""
    target = plain_cell(STACK)
    root, cell, extra_ca = target.root, target.cell, target.extra_ca
    lock_text = lock_path(cell, root).read_text()
    figures: dict[str, Any] = {"stack": STACK, "cell": cell.name, "compression": str(COMPRESSION)}
    cache_ref = f"{address}/{REPOSITORY}"
    cold = _machine(root, work / "cold", extra_ca, BuildCache(trust, cache_to=cache_ref), seed=True)
    t0 = time.perf_counter()
    cold.assemble(cell, lock_text, image_ref(cell, "bench"), work / "cold.log")
    figures["cold_cache_s"] = round(time.perf_counter() - t0, 2)
    stored = cold.layout.image(image_ref(cell, "bench"))
    assert stored is not None
    digests = sorted({d["digest"] for d in stored.manifest["layers"]})
    figures["blobs"], figures["blob_bytes"] = len(digests), sum(int(d["size"]) for d in stored.manifest["layers"])
    built: list[str] = []

    def warm(r: int) -> float:
        cache = BuildCache(trust, cache_from=cache_ref)
        machine = _machine(root, work / f"warm-{r}", extra_ca, cache)
        counted = _built_layers(machine)
        t0 = time.perf_counter()
        image = machine.assemble(cell, lock_text, image_ref(cell, "bench"), work / f"warm-{r}.log")
        seconds = time.perf_counter() - t0
        assert image.digest == stored.digest, "the warm machine's image is not the cold one's"
        built.extend(counted)
        figures["warm_cache"] = cache.report.describe()
        shutil.rmtree(work / f"warm-{r}")
        return seconds

    turns = _in_turns(warm, _floor(address, digests, work / "pulled"))
    figures.update({"warm_cache_s": turns["warm_s"], "floor_parallel_pull_s": turns["floor_s"],
                    "ratio_warm_to_floor": turns["ratio"], "rounds_warm_floor_s": turns["rounds"],
                    "warm_layers_built": sorted(set(built))})
    return figures


def _floor(address: str, digests: list[str], folder: Path) -> Callable[[int], float]:
    def floor(r: int) -> float:
        seconds = parallel_pull(Registry(address), REPOSITORY, digests, folder / str(r))
        shutil.rmtree(folder / str(r))
        return seconds
    return floor


def _shape() -> list[tuple[str, float]]:
    """``SHAPE``; at the smallest size (``--smallest``) only its 8 largest layers, in the plan's order: each entry
    stored costs a dozen requests, and the figures are not judged there."""
    if not SMALLEST:
        return list(SHAPE)
    largest = set(sorted(SHAPE, key=lambda layer: -layer[1])[:8])
    return [layer for layer in SHAPE if layer in largest]


def _synthetic_entries(work: Path, trust: CacheTrust, address: str) -> list[tuple[str, str, str]]:
    """``_shape()``'s blobs (random bytes, scaled to ``SYNTHETIC_BYTES``) stored as signed entries: (name, key,
    digest) of each, in the plan's order."""
    shape = _shape()
    total = sum(mb for _, mb in shape)
    source = OCILayout(work / "synthetic-source").init()
    cache = BuildCache(trust, cache_to=f"{address}/{REPOSITORY}")
    entries = []
    for name, mb in shape:
        data = os.urandom(max(1, int(SYNTHETIC_BYTES * mb / total)))
        layer = LayerDescriptor(source.put_blob(data), len(data), "sha256:" + hashlib.sha256(data).hexdigest(),
                                COMPRESSION.media_type)
        key = hashlib.sha256(f"synthetic\0{name}".encode()).hexdigest()
        cache.store(key, layer, f"wheel:{name}", source)
        entries.append((name, key, layer.digest))
    assert cache.report.stored == len(shape), cache.report.describe()
    shutil.rmtree(work / "synthetic-source")
    return entries


def _synthetic(work: Path, trust: CacheTrust, address: str) -> dict[str, Any]:
    """The blobs of ``SHAPE`` fetched as a warm machine fetches its layers, against the floor, in turns."""
    entries = _synthetic_entries(work, trust, address)
    reports: list[str] = []

    def warm(r: int) -> float:
        folder = work / f"synthetic-{r}"
        cache = BuildCache(trust, cache_from=f"{address}/{REPOSITORY}")
        machine = Assembler(AssemblySettings(root=Path(".").resolve(), cache_dir=folder / "cache",
                                             layout_dir=folder / "oci", jobs=JOBS, compression=COMPRESSION))
        machine.remote = cache
        planned = [PlannedLayer("base", "")] + [PlannedLayer(f"wheel:{name}", key) for name, key, _ in entries]
        t0 = time.perf_counter()
        machine._prefetch(AssembledImage(cell=None, ref="", layers=planned))  # type: ignore[arg-type]
        seconds = time.perf_counter() - t0
        assert all(p.fetched for p in planned[1:]), cache.report.describe()
        reports.append(cache.report.describe())
        shutil.rmtree(folder)
        return seconds

    turns = _in_turns(warm, _floor(address, sorted(d for _, _, d in entries), work / "synthetic-pulled"))
    return {"synthetic_blobs": len(entries), "synthetic_bytes": SYNTHETIC_BYTES, "synthetic_warm_s": turns["warm_s"],
            "synthetic_floor_s": turns["floor_s"], "synthetic_ratio": turns["ratio"],
            "synthetic_rounds_warm_floor_s": turns["rounds"], "synthetic_cache": reports[-1]}


def run() -> dict[str, Any]:
    work_root = Path(".").resolve() / ".pinmatrix" / "bench"
    work_root.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {"rounds": ROUNDS}
    with tempfile.TemporaryDirectory(prefix="buildcache-", dir=work_root) as tmp:
        work = Path(tmp)
        private, public, _ = generate_keypair(work / "keys" / "signing")
        trust = cache_trust([load_public_key(public)], private)
        service = start_registry(work / "registry", port=None)
        try:
            if STACK != "none":
                figures.update(_cell(work, trust, service.address))
            figures.update(_synthetic(work, trust, service.address))
        finally:
            service.stop()
    met = figures["synthetic_ratio"] <= TARGET_RATIO
    if STACK != "none":
        met = met and figures["ratio_warm_to_floor"] <= TARGET_RATIO and not figures["warm_layers_built"]
    figures["target"] = f"fresh machine, warm registry cache <= {TARGET_RATIO}x a parallel pull of the same bytes " \
                        "(the medians of the rounds); no layer built"
    figures["target_met"] = met
    return figures
