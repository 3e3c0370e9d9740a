"""Image builds of the demo stack (>= 4 cells on one shared base), per engine: cold build time (empty
store; the base rootfs tarball may come from the cache, its own time is reported when it is made), warm
build time (everything cached), and in the registry the bytes stored against the sum of the image sizes
(the layer sharing ratio). Services are private: a dockerd and a podman store in a temp dir, Debian's
docker-registry on 127.0.0.1."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from pinmatrix.base import build_rootfs, rootfs_inputs
from pinmatrix.commands.build import build_all
from pinmatrix.engine import get_engine
from pinmatrix.expand import expand_matrix, select_cells
from pinmatrix.imagebuild import BuildSettings
from pinmatrix.matrix import load_matrix
from pinmatrix.registry import Registry
from pinmatrix.services import directory_bytes, podman_config, start_dockerd, start_registry

STACK = "demo"
JOBS = 2


def run() -> dict[str, Any]:
    root = Path(".").resolve()
    matrix = load_matrix(root / "matrix.toml")
    cells = select_cells(expand_matrix(matrix).cells, stack=STACK)
    cache = root / ".pinmatrix" / "cache"
    figures: dict[str, Any] = {"stack": STACK, "cells": len(cells), "jobs": JOBS}
    start = time.perf_counter()
    existed = (cache / "rootfs" / f"{rootfs_inputs(cells[0].base).key()}.tar").exists()
    build_rootfs(rootfs_inputs(cells[0].base), cache)
    figures["base_rootfs_s"] = "cached" if existed else round(time.perf_counter() - start, 1)
    console = Console(stderr=True)
    with tempfile.TemporaryDirectory(prefix="pinmatrix-bench-") as tmp:
        registry_service = start_registry(Path(tmp) / "registry")
        registry = Registry(registry_service.address)
        try:
            for name in ("podman", "docker"):
                if name == "docker" and shutil.which("dockerd") is None:
                    figures["docker"] = "dockerd not installed"
                    continue
                service = (podman_config if name == "podman" else start_dockerd)(Path(tmp) / name)
                try:
                    engine = get_engine(name, service.env)
                    engine.ensure_running()
                    settings = BuildSettings(
                        root=root, cache_dir=cache, logs_dir=Path(tmp) / f"logs-{name}",
                        registry=f"{registry.host}/bench-{name}",
                        ca_certificates=tuple(Path(p) for p in matrix.settings.ca_certificates if Path(p).exists()),
                        push=True,
                    )
                    t0 = time.perf_counter()
                    cold = build_all(cells, engine, settings, registry, JOBS, console)
                    cold_s = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    warm = build_all(cells, engine, settings, registry, JOBS, console)
                    warm_s = time.perf_counter() - t0
                    stats = registry.storage([f"bench-{name}/{STACK}"])
                    local = sum((engine.inspect(r.ref).size if engine.inspect(r.ref) else 0) for r in cold)
                    figures[name] = {
                        "cold_build_s": round(cold_s, 1),
                        "cold_built": sum(r.status == "built" for r in cold),
                        "cold_failed": [f"{r.cell.id}: {r.reason}" for r in cold if not r.ok],
                        "warm_build_s": round(warm_s, 2),
                        "warm_cached": sum(r.status == "cached" for r in warm),
                        "registry_images": stats.images,
                        "registry_stored_bytes": stats.stored_bytes,
                        "sum_of_image_bytes": stats.image_bytes,
                        "layer_sharing_ratio": round(stats.sharing_ratio, 2),
                        "local_image_sizes_bytes": local,
                    }
                finally:
                    service.stop()
            figures["registry_dir_bytes"] = directory_bytes(Path(tmp) / "registry" / "data")
        finally:
            registry_service.stop()
    return figures
