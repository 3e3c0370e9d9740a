"""Assembly of the real GPU cells (stack h200: torch 2.11.0 cu130, triton 3.6.0, xformers 0.0.35 plain and
with the int64 patch, flashinfer-python 0.6.8.post1), side by side with the floor and the peer measured in the
same run (benchmarks/floor.py).

- floor (a lower bound): max(a parallel fetch of the wheels, one plain tar of their unpacked tree to disk) plus
  one compression pass on every core with the cheapest compressor of each layer format (pigz -1, zstd -3);
- cold: assemble the plain cell from an empty wheel cache and layer store (the Debian base is made first and
  timed on its own), then the int64 cell (only its patch layer is new);
- peak disk during the cold build (the filesystem's use beyond its start, statvfs), against the image's size;
- the int64 cell's engine step: the plain image loaded into a fresh podman store, then the int64 cell assembled
  and loaded (skopeo copies only the layers the store lacks), timed together;
- push to a private docker-registry and pull back by digest with podman on a fresh store (image id = config
  digest), each image of the run pulled in turns, twice (``PINMATRIX_BENCH_PULL_ROUNDS``), the mean compared; when the layers are not gzip, the same cell assembled again with gzip:1 and one layer per wheel from the
  same wheel cache, pushed and pulled the same way (what a pull cost before zstd and the merged small wheels);
- the peer: a Containerfile FROM the same base with `uv pip install --require-hashes` of the same lock,
  `podman build` + `podman push` to the same registry, and its pull by digest on a fresh store;
- a warm no-op `pinmatrix build --engine none --no-lock` over the whole shipped matrix;
- a second clean build of the plain cell (fresh cache and layout, its base made apart), as `build --push` makes it:
  each layer sent to a fresh registry as soon as it is written, then the push of the rest, timed together: the
  same manifest digest, and the build + push that the peer's is measured against.
``PINMATRIX_BENCH_COMPRESSION`` (gzip:1 or zstd:3) sets the layers' compression; the floor is that format's.
``PINMATRIX_BENCH_WHOLE_MATRIX=0`` leaves out the whole shipped matrix (its gb10 cells take half an hour here).
Targets (ratios in this run): cold <= 1.3x the floor of its layer format; build + push (the second clean build, layers
sent ahead) <= 0.7x the peer's build + push;
the int64 cell after the plain one <= 1 s with its engine load; pull <= 0.8x the gzip pull and <= the peer's; peak
disk <= 1.5x image size; warm no-op < 2 s; the same digest."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.floor import honest_floor, peer_build
from benchmarks.plaincell import SMALLEST, seeded
from pinmatrix.cell import Cell
from pinmatrix.engine import get_engine
from pinmatrix.engine.services import podman_config, start_registry
from pinmatrix.image.assembly.assemble import Assembler, AssemblySettings
from pinmatrix.image.assembly.merge import DEFAULT_MERGE_BELOW
from pinmatrix.image.assembly.rootfs import debian_base
from pinmatrix.image.blobsahead import BlobsAhead
from pinmatrix.image.load_push import load_into_engine, push
from pinmatrix.imageref import image_ref
from pinmatrix.index.wheel_index import DEFAULT_INDEX
from pinmatrix.matrix.expand import select_cells
from pinmatrix.matrix.selection import expand_matrix
from pinmatrix.oci.compression import LayerCompression
from pinmatrix.project.lockfile import lock_path
from pinmatrix.project.matrix_toml import load_matrix
from pinmatrix.registry.client import Registry
from pinmatrix.sizes import parse_size

STACK = os.environ.get("PINMATRIX_BENCH_STACK", "h200")
# the layers' compression (`--compression`): gzip:1 (default) or zstd:3; the floor is that format's
COMPRESSION = LayerCompression.parse(os.environ.get("PINMATRIX_BENCH_COMPRESSION", "gzip:1"))
JOBS = 4
PULL_ROUNDS = int(os.environ.get("PINMATRIX_BENCH_PULL_ROUNDS", "2"))  # each image pulled this many times, in turns
# the small wheels' layer as `build` makes it by default (PINMATRIX_BENCH_MERGE_BELOW=0: one layer per wheel); the
# gzip image the pull is compared with is one layer per wheel, as every image was before
MERGE_BELOW = parse_size(os.environ.get("PINMATRIX_BENCH_MERGE_BELOW", f"{DEFAULT_MERGE_BELOW >> 20}MiB"),
                         "PINMATRIX_BENCH_MERGE_BELOW", minimum=0)
WHOLE_MATRIX = os.environ.get("PINMATRIX_BENCH_WHOLE_MATRIX", "1") != "0"


class DiskPeak:
    """The most disk the filesystem holding ``folder`` used beyond what it used at the start, sampled every half
    second from statvfs (constant time: a walk of the build's trees, 100k files in the AOT scratch root, would
    take a core and the GIL from the build it measures). Anything else writing to that filesystem meanwhile
    counts too, so run it on an otherwise idle machine."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.peak, self._stop = folder, 0, threading.Event()
        self._start = 0
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        self.peak = max(self.peak, shutil.disk_usage(self.folder).used - self._start)

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            self._sample()

    def __enter__(self) -> DiskPeak:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._start = shutil.disk_usage(self.folder).used
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def _progress(figures: dict[str, Any]) -> None:
    """Partial figures to stderr after each phase, so a long run that dies later still says what it measured."""
    print(json.dumps(figures, sort_keys=True), file=sys.stderr, flush=True)


def _pull_fresh(by_digest: str, store_dir: Path) -> tuple[float, str, int]:
    """``podman pull`` of ``by_digest`` into a store made for it (removed after): seconds, image id, size."""
    store = podman_config(store_dir)
    try:
        env = {**os.environ, **store.env}
        t0 = time.perf_counter()
        pulled = subprocess.run(["podman", "pull", "--tls-verify=false", "-q", by_digest], env=env,
                                capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        if pulled.returncode != 0:
            raise RuntimeError(f"podman pull {by_digest} failed: {pulled.stderr.strip()[-500:]}")
        out = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}} {{.Size}}", by_digest], env=env,
                             check=True, capture_output=True, text=True).stdout.split()
        return round(seconds, 1), f"sha256:{out[0]}", int(out[1])
    finally:
        store.stop()


def _pull_rounds(pulls: dict[str, str], store_dir: Path, figures: dict[str, Any]) -> tuple[str, int]:
    """Each image of ``pulls`` (figure name -> reference by digest) pulled on a fresh store, in turns, PULL_ROUNDS
    times: one pull each is at the mercy of what the machine does meanwhile. ``<name>_s`` is the mean of an
    image's pulls, ``<name>_each_s`` all of them. Returns the first pull's image id and size (``pull``)."""
    each: dict[str, list[float]] = {name: [] for name in pulls}
    first: tuple[str, int] = ("", 0)
    for _ in range(PULL_ROUNDS):
        for name, ref in pulls.items():
            seconds, pulled_id, size = _pull_fresh(ref, store_dir)
            each[name].append(seconds)
            if name == "pull" and not first[0]:
                first = (pulled_id, size)
    for name, times in each.items():
        figures[f"{name}_s"] = round(sum(times) / len(times), 1)
        figures[f"{name}_each_s"] = times
    return first


def _engine_step(cold: Assembler, image: Any, patched: list[Any], root: Path, work: Path,
                 figures: dict[str, Any]) -> None:
    """The plain image loaded into a fresh podman store, then each patched cell built and loaded."""
    load_store = podman_config(work / "podman-load")
    try:
        engine = get_engine("podman", load_store.env)
        stored_plain = cold.layout.image(image.ref)
        assert stored_plain is not None, image.ref
        t0 = time.perf_counter()
        load_into_engine(cold.layout, stored_plain, engine)
        figures["load_plain_s"] = round(time.perf_counter() - t0, 1)
        for cell in patched:
            t0 = time.perf_counter()
            other = cold.assemble(cell, lock_path(cell, root).read_text(), image_ref(cell, "bench"), work / "b.log")
            figures[f"cold_{cell.name}_s"] = round(time.perf_counter() - t0, 2)
            stored_other = cold.layout.image(other.ref)
            assert stored_other is not None, other.ref
            load_into_engine(cold.layout, stored_other, engine)
            figures[f"{cell.name}_with_load_s"] = round(time.perf_counter() - t0, 2)
    finally:
        load_store.stop()


def run() -> dict[str, Any]:
    root = Path(".").resolve()
    matrix = load_matrix(root / "matrix.toml")
    cells = select_cells(expand_matrix(matrix).cells, stack=STACK)
    plain = next(c for c in cells if not c.patches_to_apply)
    patched = [c for c in cells if c.patches_to_apply]
    extra_ca = tuple(Path(p) for p in matrix.settings.ca_certificates if Path(p).exists())
    figures: dict[str, Any] = {"stack": STACK, "cells": [c.name for c in cells], "compression": str(COMPRESSION),
                               "merge_below_bytes": MERGE_BELOW}
    work_root = root / ".pinmatrix" / "bench"
    work_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="assembly-", dir=work_root) as tmp:
        work = Path(tmp)
        figures.update(honest_floor(plain, lock_path(plain, root).read_text(), work / "floor", extra_ca, JOBS))
        shutil.rmtree(work / "floor")
        _progress(figures)

        def assembler(name: str) -> Assembler:
            return Assembler(AssemblySettings(root=root, cache_dir=seeded(work / name / "cache"), layout_dir=work / name / "oci",
                                              extra_ca=extra_ca, jobs=JOBS, compression=COMPRESSION,
                                              merge_below=MERGE_BELOW))

        cold = assembler("cold")
        t0 = time.perf_counter()
        base = debian_base(plain.base, plain.platform, cold.layout, cold.settings.cache_dir, work / "base.log")
        figures["base_s"] = round(time.perf_counter() - t0, 1)
        with DiskPeak(work / "cold") as disk:
            t0 = time.perf_counter()
            image = cold.assemble(plain, lock_path(plain, root).read_text(), image_ref(plain, "bench"), work / "a.log")
            figures["cold_plain_s"] = round(time.perf_counter() - t0, 1)
            # where the cold build went: the slowest layers (built several at once, so they overlap), and the
            # FlashInfer kernels compiled ahead of time, which neither the floor nor the peer makes
            slowest = sorted(image.layers, key=lambda p: -p.seconds)[:6]
            figures["cold_plain_slowest_layers_s"] = {p.name: round(p.seconds, 1) for p in slowest}
            aot_s = sum(p.seconds for p in image.layers if p.name == "flashinfer-aot")
            figures["cold_plain_flashinfer_aot_s"] = round(aot_s, 1)
            if SMALLEST:  # python -m benchmarks load measures the same step at this size
                figures["load_plain"] = "not run at the smallest size"
            else:
                _engine_step(cold, image, patched, root, work, figures)
            for cell in patched:
                other = cold.assemble(cell, lock_path(cell, root).read_text(), image_ref(cell, "bench"), work / "b.log")
                own = {p.descriptor.digest for p in other.layers if p.descriptor} - {
                    p.descriptor.digest for p in image.layers if p.descriptor}
                total = other.size
                new_bytes = sum(p.descriptor.size for p in other.layers if p.descriptor and p.descriptor.digest in own)
                figures[f"{cell.name}_new_layers"] = [p.name for p in other.layers
                                                      if p.descriptor and p.descriptor.digest in own]
                figures[f"{cell.name}_bytes_shared_of_total"] = f"{total - new_bytes}/{total}"
        unpacked = sum(p.descriptor.unpacked for p in image.layers if p.descriptor)
        base_unpacked = 0
        figures.update({
            "ratio_cold_to_gzip_floor": round(figures["cold_plain_s"] / max(figures["floor_gzip_s"], 0.01), 2),
            "ratio_cold_to_zstd_floor": round(figures["cold_plain_s"] / max(figures["floor_zstd_s"], 0.01), 2),
            "ratio_cold_to_own_floor": round(figures["cold_plain_s"] / max(figures[f"floor_{COMPRESSION.format}_s"], 0.01), 2),
            "ratio_cold_without_aot_to_own_floor": round(
                (figures["cold_plain_s"] - figures["cold_plain_flashinfer_aot_s"])
                / max(figures[f"floor_{COMPRESSION.format}_s"], 0.01), 2),
            "image_blob_bytes": image.size, "image_unpacked_bytes_without_base": unpacked + base_unpacked,
            "peak_disk_bytes": disk.peak, "peak_disk_to_unpacked": round(disk.peak / max(1, unpacked), 2),
            "layers": len(image.layers), "digest": image.digest,
        })
        _progress(figures)
        # push, pull back by digest
        registry = start_registry(work / "registry")
        try:
            stored = cold.layout.image(image.ref)
            assert stored is not None, image.ref
            ref = f"{registry.address}/bench/{STACK}:{plain.id}"
            t0 = time.perf_counter()
            pushed = push(cold.layout, stored, ref, tls_verify=False)
            figures["push_s"] = round(time.perf_counter() - t0, 1)
            pulls = {"pull": f"{registry.address}/bench/{STACK}@{pushed}"}
            figures["registry_digest_matches"] = pushed == image.digest
            _progress(figures)
            if COMPRESSION.format != "gzip":
                # the same cell as gzip layers (same wheel cache): what its pull cost before
                gzipped = Assembler(AssemblySettings(root=root, cache_dir=seeded(work / "cold" / "cache"),
                                                     layout_dir=work / "gzip" / "oci", extra_ca=extra_ca, jobs=JOBS,
                                                     compression=LayerCompression.parse("gzip:1")))
                t0 = time.perf_counter()
                as_gzip = gzipped.assemble(plain, lock_path(plain, root).read_text(), image_ref(plain, "bench"),
                                           work / "g.log")
                figures["gzip_assembly_warm_wheels_s"] = round(time.perf_counter() - t0, 1)
                stored_gzip = gzipped.layout.image(as_gzip.ref)
                assert stored_gzip is not None, as_gzip.ref
                figures["gzip_blob_bytes"] = as_gzip.size
                pushed_gzip = push(gzipped.layout, stored_gzip, f"{registry.address}/bench/gzip-{STACK}:{plain.id}",
                                   tls_verify=False)
                pulls["pull_gzip"] = f"{registry.address}/bench/gzip-{STACK}@{pushed_gzip}"
                shutil.rmtree(work / "gzip")
                _progress(figures)
            peer_store = podman_config(work / "podman-peer")
            try:
                figures.update(peer_build(cold.settings.cache_dir / "rootfs" / f"{base.key}.layer",
                                          lock_path(plain, root).read_text(),
                                          next((i.url for i in plain.indexes if i.default), DEFAULT_INDEX), work,
                                          {**os.environ, **peer_store.env},
                                          f"{registry.address}/bench/peer-{STACK}:{plain.id}", extra_ca))
                peer_ref = f"{registry.address}/bench/peer-{STACK}:{plain.id}"
                peer_digest = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}",
                                              f"docker://{peer_ref}"], check=True, capture_output=True,
                                             text=True).stdout.strip()
            finally:
                peer_store.stop()
            pulls["peer_pull"] = f"{registry.address}/bench/peer-{STACK}@{peer_digest}"
            pulled_id, pulled_size = _pull_rounds(pulls, work / "podman-pull", figures)
            figures["pulled_id_is_config_digest"] = pulled_id == stored.config_digest
            figures["pulled_image_size_bytes"] = pulled_size
            figures["peak_disk_to_image_size"] = round(disk.peak / pulled_size, 2)
            if "pull_gzip_s" in figures:
                figures["ratio_pull_to_gzip_pull"] = round(figures["pull_s"] / max(figures["pull_gzip_s"], 0.01), 2)
            figures["ratio_pull_to_peer_pull"] = round(figures["pull_s"] / max(figures["peer_pull_s"], 0.01), 2)
            ours = figures["cold_plain_s"] + figures["push_s"]
            figures["ratio_build_push_to_peer"] = round(ours / (figures["peer_build_s"] + figures["peer_push_s"]), 2)
            _progress(figures)
        finally:
            registry.stop()
        if WHOLE_MATRIX:
            _whole_matrix(root, work, figures)
        shutil.rmtree(work / "cold", ignore_errors=True)
        figures.update(_build_push_ahead(assembler("second"), plain, lock_path(plain, root).read_text(), work, figures))
        figures["second_clean_same_digest"] = figures.pop("second_digest") == image.digest
    patched_loads = [v for k, v in figures.items() if k.endswith("_with_load_s")]
    figures["target"] = ("cold <= 1.3x the floor of its layer format, build + push <= 0.7x the peer's, the int64 cell "
                         "after the plain one <= 1 s with its load, pull <= 0.8x the gzip pull and <= the peer's, "
                         "peak disk <= 1.5x image size, warm no-op < 2 s, same digest")
    figures["target_met"] = bool(figures["ratio_cold_to_own_floor"] <= 1.3
                                 and figures["ratio_build_push_ahead_to_peer"] <= 0.7
                                 and all(v <= 1.0 for v in patched_loads)
                                 and figures.get("ratio_pull_to_gzip_pull", 0.0) <= 0.8
                                 and figures["ratio_pull_to_peer_pull"] <= 1.0
                                 and figures["peak_disk_to_image_size"] <= 1.5
                                 and figures.get("warm_noop_whole_matrix_s", 0.0) < 2
                                 and figures["second_clean_same_digest"])
    return figures


def _build_push_ahead(second: Assembler, plain: Cell, lock_text: str, work: Path,
                      figures: dict[str, Any]) -> dict[str, Any]:
    """The second clean build (fresh cache and layout, its base made apart first as the cold one's was), as
    ``build --push`` makes it: each layer sent to a fresh registry as soon as it is in the layout (blobsahead), then
    the push of the rest; timed from the start of the assembly to the end of the push."""
    debian_base(plain.base, plain.platform, second.layout, second.settings.cache_dir, work / "base-second.log")
    fresh = start_registry(work / "registry-second")
    try:
        t0 = time.perf_counter()
        with BlobsAhead(Registry(fresh.address), f"bench/{STACK}", second.layout.blob_path) as ahead:
            again = second.assemble(plain, lock_text, image_ref(plain, "bench"), work / "c.log", on_blob=ahead.add)
            assembled_s = time.perf_counter() - t0
            report = ahead.finish()
        stored = second.layout.image(again.ref)
        assert stored is not None, again.ref
        pushed = push(second.layout, stored, f"{fresh.address}/bench/{STACK}:{plain.id}", tls_verify=False)
        total = time.perf_counter() - t0
    finally:
        fresh.stop()
    out = {"second_clean_s": round(assembled_s, 1), "build_push_ahead_s": round(total, 1),
           "build_push_ahead_sent": report.describe(), "build_push_ahead_digest_matches": pushed == again.digest,
           "second_digest": again.digest}
    if "peer_build_s" in figures:
        out["ratio_build_push_ahead_to_peer"] = round(total / (figures["peer_build_s"] + figures["peer_push_s"]), 2)
    return out


def _whole_matrix(root: Path, work: Path, figures: dict[str, Any]) -> None:
    """The whole shipped matrix built once (every cell that has a lock), then a timed warm no-op."""
    whole = [sys.executable, "-m", "pinmatrix", "build", "--engine", "none", "--no-lock",
             "--cache-dir", str(work / "cold" / "cache"), "--layout", str(work / "cold" / "oci"),
             "--logs-dir", str(work / "logs"), "--registry", "bench"]
    t0 = time.perf_counter()
    first = subprocess.run(whole, capture_output=True, text=True, cwd=root)
    figures["whole_matrix_first_build_s"] = round(time.perf_counter() - t0, 1)
    figures["whole_matrix_first_summary"] = (first.stderr.strip().splitlines() or [""])[-1]
    t0 = time.perf_counter()
    proc = subprocess.run(whole, capture_output=True, text=True, cwd=root)
    figures["warm_noop_whole_matrix_s"] = round(time.perf_counter() - t0, 2)
    figures["warm_noop_summary"] = (proc.stderr.strip().splitlines() or [""])[-1]
    _progress(figures)
