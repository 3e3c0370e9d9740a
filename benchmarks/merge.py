"""The first pull of a cell with its small wheels merged into one layer (``build --merge-below``) against the same
cell with one layer per wheel, side by side in one run: both assembled from one wheel cache, pushed to one private
docker-registry, then pulled by digest with podman into a fresh store each time, in turns (apart, merged, apart,
merged, ...), so a slow moment of the machine falls on both. ``PINMATRIX_BENCH_STACK`` (default h200) picks the
stack, ``PINMATRIX_BENCH_COMPRESSION`` (default zstd:3) the layers' compression, ``PINMATRIX_BENCH_MERGE_BELOW``
(default 16MiB) the bound, ``PINMATRIX_BENCH_ROUNDS`` (default 2) the pulls of each, and
``PINMATRIX_BENCH_CACHE`` a builder cache to start from (default: a new one; the assembly is not what is timed).
Target: the merged image's median pull <= the per-wheel image's (fewer layers must not cost time)."""

from __future__ import annotations

import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.assembly import _progress, _pull_fresh
from benchmarks.plaincell import SMALLEST, plain_cell, seeded
from pinmatrix.engine.services import start_registry
from pinmatrix.image.assembly.assemble import Assembler, AssemblySettings
from pinmatrix.image.assembly.rootfs import debian_base
from pinmatrix.image.load_push import push
from pinmatrix.imageref import image_ref
from pinmatrix.oci.compression import LayerCompression
from pinmatrix.project.lockfile import lock_path
from pinmatrix.sizes import parse_size

STACK = os.environ.get("PINMATRIX_BENCH_STACK", "h200")
COMPRESSION = LayerCompression.parse(os.environ.get("PINMATRIX_BENCH_COMPRESSION", "zstd:3"))
MERGE_BELOW = parse_size(os.environ.get("PINMATRIX_BENCH_MERGE_BELOW", "16MiB"), "PINMATRIX_BENCH_MERGE_BELOW")
ROUNDS = int(os.environ.get("PINMATRIX_BENCH_ROUNDS", "2"))
CACHE = os.environ.get("PINMATRIX_BENCH_CACHE")
JOBS = 4


def run() -> dict[str, Any]:
    target = plain_cell(STACK)
    root, cell, extra_ca, work_root = target.root, target.cell, target.extra_ca, target.work_root
    figures: dict[str, Any] = {"stack": STACK, "cell": cell.name, "compression": str(COMPRESSION),
                               "merge_below_bytes": MERGE_BELOW, "rounds": ROUNDS}
    with tempfile.TemporaryDirectory(prefix="merge-", dir=work_root) as tmp:
        work = Path(tmp)
        apart_settings = AssemblySettings(root=root, cache_dir=Path(CACHE) if CACHE else seeded(work / "cache"),
                                          layout_dir=work / "oci",
                                          extra_ca=extra_ca, jobs=JOBS, compression=COMPRESSION)
        debian_base(cell.base, cell.platform, Assembler(apart_settings).layout, apart_settings.cache_dir,
                    work / "base.log")
        refs: dict[str, str] = {}
        registry = start_registry(work / "registry")
        try:
            for way, settings in (("apart", apart_settings),
                                  ("merged", dataclasses.replace(apart_settings, merge_below=MERGE_BELOW))):
                assembler = Assembler(settings)
                t0 = time.perf_counter()
                image = assembler.assemble(cell, lock_path(cell, root).read_text(), image_ref(cell, way),
                                           work / f"{way}.log")
                figures[f"{way}_assembly_s"] = round(time.perf_counter() - t0, 1)
                figures[f"{way}_blob_bytes"] = image.size
                stored = assembler.layout.image(image.ref)
                assert stored is not None, image.ref
                figures[f"{way}_manifest_layers"] = len(stored.manifest["layers"])
                pushed = push(assembler.layout, stored, f"{registry.address}/bench/{way}-{STACK}:{cell.id}",
                              tls_verify=False)
                refs[way] = f"{registry.address}/bench/{way}-{STACK}@{pushed}"
                _progress(figures)
            # the merged image (built last): how many wheels its merged layer holds, and its bytes
            merged_layer = next((p for p in image.layers if p.name.startswith("wheels:")), None)
            figures["merged_wheels"] = merged_layer.name.count(",") + 1 if merged_layer else 0
            figures["merged_layer_bytes"] = merged_layer.descriptor.size if merged_layer and merged_layer.descriptor \
                else 0
            pulls: dict[str, list[float]] = {"apart": [], "merged": []}
            if SMALLEST:  # a pull by digest into a fresh store is assembly's step too, which runs it at this size
                figures["pulls"] = "not run at the smallest size (python -m benchmarks assembly pulls the same way)"
                return figures
            for _ in range(ROUNDS):
                for way in ("apart", "merged"):
                    took, _, _ = _pull_fresh(refs[way], work / "podman-pull")
                    pulls[way].append(took)
                    _progress({**figures, "pulls": pulls})
        finally:
            registry.stop()
    figures["pulls_s"] = pulls
    for way, times in pulls.items():
        figures[f"{way}_pull_median_s"] = round(statistics.median(times), 1)
    figures["ratio_merged_pull_to_apart"] = round(figures["merged_pull_median_s"] / max(figures["apart_pull_median_s"], 0.01), 2)
    figures["target"] = "the merged image's median pull <= the per-wheel image's"
    figures["target_met"] = figures["ratio_merged_pull_to_apart"] <= 1.0
    return figures
