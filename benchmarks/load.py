"""Loading a stack's images into a fresh podman store, the plain cell first and then each cell that differs from
it by a patch, two ways in the same run: skopeo to ``containers-storage:`` (what ``pinmatrix build`` does: only
the layers the store lacks are copied) against ``podman load`` of a whole oci-archive (what it did before, and
its fallback without skopeo). ``PINMATRIX_BENCH_STACK`` (default h200; demo is small and quick) picks the stack,
``PINMATRIX_BENCH_COMPRESSION`` (default zstd:3, which podman reads) the layers' compression.
Target: a cell after the plain one loads in <= 1 s."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.plaincell import seeded
from pinmatrix.cell import Cell
from pinmatrix.engine import get_engine
from pinmatrix.engine.services import podman_config
from pinmatrix.image.assembly.assemble import Assembler, AssemblySettings
from pinmatrix.image.assembly.rootfs import debian_base
from pinmatrix.image.load_push import load_into_engine
from pinmatrix.imageref import image_ref
from pinmatrix.matrix.expand import select_cells
from pinmatrix.matrix.selection import expand_matrix
from pinmatrix.oci.compression import LayerCompression
from pinmatrix.oci.layout import StoredImage
from pinmatrix.project.lockfile import lock_path
from pinmatrix.project.matrix_toml import load_matrix

STACK = os.environ.get("PINMATRIX_BENCH_STACK", "h200")
COMPRESSION = LayerCompression.parse(os.environ.get("PINMATRIX_BENCH_COMPRESSION", "zstd:3"))
JOBS = 2


def _pair(cells: list[Cell]) -> tuple[Cell, Cell]:
    """The plain cell and one that differs from it: a patched one where the stack has one, else the next."""
    plain = next((c for c in cells if not c.patches_to_apply), cells[0])
    other = next((c for c in cells if c.patches_to_apply), next(c for c in cells if c is not plain))
    return plain, other


def run() -> dict[str, Any]:
    root = Path(".").resolve()
    matrix = load_matrix(root / "matrix.toml")
    plain, other = _pair(select_cells(expand_matrix(matrix).cells, stack=STACK))
    extra_ca = tuple(Path(p) for p in matrix.settings.ca_certificates if Path(p).exists())
    figures: dict[str, Any] = {"stack": STACK, "first": plain.name, "then": other.name,
                               "compression": str(COMPRESSION)}
    work_root = root / ".pinmatrix" / "bench"
    work_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="load-", dir=work_root) as tmp:
        work = Path(tmp)
        assembler = Assembler(AssemblySettings(root=root, cache_dir=seeded(work / "cache"), layout_dir=work / "oci",
                                               extra_ca=extra_ca, jobs=JOBS, compression=COMPRESSION))
        debian_base(plain.base, plain.platform, assembler.layout, assembler.settings.cache_dir, work / "base.log")
        images: list[StoredImage] = []
        for cell in (plain, other):
            built = assembler.assemble(cell, lock_path(cell, root).read_text(), image_ref(cell, "bench"),
                                       work / f"{cell.id}.log")
            stored = assembler.layout.image(built.ref)
            assert stored is not None, built.ref
            images.append(stored)
        first, then = images
        first_layers = {d["digest"]: int(d["size"]) for d in first.manifest["layers"]}
        then_layers = {d["digest"]: int(d["size"]) for d in then.manifest["layers"]}
        figures.update({"layers": len(then_layers), "layers_shared": len(then_layers.keys() & first_layers.keys()),
                        "bytes_first": sum(first_layers.values()),
                        "bytes_new_in_then": sum(s for d, s in then_layers.items() if d not in first_layers)})
        for way, reuse in (("skopeo_storage", True), ("podman_load", False)):
            store = podman_config(work / f"podman-{way}")
            try:
                engine = get_engine("podman", store.env)
                for label, image in (("first", first), ("then", then)):
                    t0 = time.perf_counter()
                    load_into_engine(assembler.layout, image, engine, reuse_layers=reuse)
                    figures[f"{way}_{label}_s"] = round(time.perf_counter() - t0, 2)
            finally:
                store.stop()
    figures["ratio_then_skopeo_to_podman_load"] = round(
        figures["skopeo_storage_then_s"] / max(figures["podman_load_then_s"], 1e-3), 3)
    figures["target"] = "the cell after the plain one loads in <= 1 s"
    figures["target_met"] = figures["skopeo_storage_then_s"] <= 1.0
    return figures
