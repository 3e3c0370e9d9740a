"""The demo stack (4 cells on one shared base), cold and warm, side by side with a baseline in the same run:
the hermetic assembler (into the OCI layout, loaded into a private podman store, pushed to a private
docker-registry) against the Containerfile path (buildah RUN steps with pip), the builder pinmatrix used
before. Figures: cold and warm seconds, registry bytes stored against the sum of image sizes (the sharing
ratio), and whether two clean assemblies give one digest."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.plaincell import SMALLEST, seeded
from pinmatrix.engine import get_engine
from pinmatrix.engine.services import podman_config, start_registry
from pinmatrix.image.build import build_all
from pinmatrix.image.containerfile.render import build_cell as containerfile_build
from pinmatrix.image.settings import BuildSettings
from pinmatrix.matrix.expand import select_cells
from pinmatrix.matrix.selection import expand_matrix
from pinmatrix.project.lockfile import lock_path
from pinmatrix.project.matrix_toml import load_matrix
from pinmatrix.registry.catalog import storage_stats
from pinmatrix.registry.client import Registry

STACK = "demo"
JOBS = 2
CELLS = 1 if SMALLEST else None  # --smallest: the first cell only, and no Containerfile baseline


def run() -> dict[str, Any]:
    root = Path(".").resolve()
    matrix = load_matrix(root / "matrix.toml")
    cells = select_cells(expand_matrix(matrix).cells, stack=STACK)[:CELLS]
    extra_ca = tuple(Path(p) for p in matrix.settings.ca_certificates if Path(p).exists())
    figures: dict[str, Any] = {"stack": STACK, "cells": len(cells), "jobs": JOBS}
    with tempfile.TemporaryDirectory(prefix="pinmatrix-bench-", dir=root / ".pinmatrix") as tmp:
        work = Path(tmp)
        registry_service = start_registry(work / "registry")
        store = podman_config(work / "podman")
        registry = Registry(registry_service.address)
        engine = get_engine("podman", store.env)
        try:
            settings = BuildSettings(root=root, cache_dir=seeded(work / "cache"), logs_dir=work / "logs",
                                     registry=f"{registry.host}/assembled", ca_certificates=extra_ca, push=True,
                                     layout_dir=work / "oci")
            t0 = time.perf_counter()
            first = build_all(cells[:1], engine, settings, registry, JOBS)
            figures["base_and_first_cell_s"] = round(time.perf_counter() - t0, 1)
            t0 = time.perf_counter()
            cold = build_all(cells, engine, settings, registry, JOBS)
            figures["assembler_other_cells_cold_s"] = round(time.perf_counter() - t0, 1)
            t0 = time.perf_counter()
            warm = build_all(cells, engine, settings, registry, JOBS)
            figures["assembler_warm_s"] = round(time.perf_counter() - t0, 2)
            figures["assembler_failed"] = [r.reason for r in first + cold if not r.ok]
            figures["assembler_warm_cached"] = sum(r.status == "cached" for r in warm)
            stats = storage_stats(registry, [f"assembled/{STACK}"])
            figures["assembler_registry"] = {"stored_bytes": stats.stored_bytes, "sum_of_image_bytes": stats.image_bytes,
                                             "sharing_ratio": round(stats.sharing_ratio, 2)}
            again = BuildSettings(root=root, cache_dir=seeded(work / "cache2"), logs_dir=work / "logs2", registry="again",
                                  ca_certificates=extra_ca, layout_dir=work / "oci2")
            second = build_all(cells, None, again, None, JOBS)
            figures["second_clean_same_digests"] = [a.digest for a in cold] == [b.digest for b in second]
            if SMALLEST:  # its pip runs inside buildah's RUN steps: a minute or two even for the demo cell
                figures["containerfile"] = "not run at the smallest size"
                return figures
            # baseline: the Containerfile path (buildah bud, pip inside RUN steps), same cells, same store
            base_settings = BuildSettings(root=root, cache_dir=work / "cache", logs_dir=work / "logs-cf",
                                          registry=f"{registry.host}/containerfile", ca_certificates=extra_ca,
                                          push=True, layout_dir=work / "oci")
            t0 = time.perf_counter()
            results = [containerfile_build(c, lock_path(c, root).read_text(), engine, base_settings, registry=registry)
                       for c in cells]
            figures["containerfile_cold_s_incl_base"] = round(time.perf_counter() - t0, 1)
            figures["containerfile_failed"] = [r.reason for r in results if not r.ok]
            stats = storage_stats(registry, [f"containerfile/{STACK}"])
            figures["containerfile_registry"] = {"stored_bytes": stats.stored_bytes,
                                                 "sum_of_image_bytes": stats.image_bytes,
                                                 "sharing_ratio": round(stats.sharing_ratio, 2)}
        finally:
            store.stop()
            registry_service.stop()
    return figures
