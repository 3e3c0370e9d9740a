"""A user's whole path for one cell, through the CLI as a user runs it, side by side with the peer in the same run:
``pinmatrix build --engine none --push`` from an empty cache (the Debian base included), ``podman pull`` by digest
on a fresh store, then the cell's first smoke (``host-probe``) and the import of its stack (``python-imports``) with
``pinmatrix smoke --runtime podman --image REF@DIGEST`` in that store. The peer: a Containerfile FROM the same base
with ``uv pip install --require-hashes`` of the same lock, ``podman build`` + ``podman push`` to the same registry,
and its pull by digest on a fresh store (benchmarks/floor.py; the peer's image has no smoke harness, so its path
ends at the pull). On a host without a GPU the cell's GPU smokes would be skipped from the host probe, so only
these two run. ``PINMATRIX_BENCH_STACK`` (default h200) picks the stack, ``PINMATRIX_BENCH_COMPRESSION``
(default zstd:3) the layers' compression. Target: build + push + pull <= 0.7x the peer's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.assembly import _progress, _pull_fresh
from benchmarks.floor import peer_build
from benchmarks.plaincell import SMALLEST, plain_cell, seeded
from pinmatrix.engine.services import podman_config, start_registry
from pinmatrix.image.assembly.rootfs import debian_base
from pinmatrix.index.wheel_index import DEFAULT_INDEX
from pinmatrix.oci.compression import LayerCompression
from pinmatrix.oci.layout import OCILayout
from pinmatrix.project.lockfile import lock_path

STACK = os.environ.get("PINMATRIX_BENCH_STACK", "h200")
COMPRESSION = LayerCompression.parse(os.environ.get("PINMATRIX_BENCH_COMPRESSION", "zstd:3"))
FIRST_SMOKES = ("host-probe",) if SMALLEST else ("host-probe", "python-imports")


def _timed(argv: list[str], env: dict[str, str], log: Path) -> float:
    """Seconds ``argv`` took; its output goes to ``log``; a failure stops the benchmark naming the log."""
    t0 = time.perf_counter()
    with open(log, "wb") as out:
        done = subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} ... exited {done.returncode}: see {log}")
    return round(seconds, 1)


def run() -> dict[str, Any]:
    target = plain_cell(STACK)
    root, cell, extra_ca, work_root = target.root, target.cell, target.extra_ca, target.work_root
    figures: dict[str, Any] = {"stack": STACK, "cell": cell.name, "compression": str(COMPRESSION)}
    pinmatrix = [sys.executable, "-m", "pinmatrix"]
    with tempfile.TemporaryDirectory(prefix="userpath-", dir=work_root) as tmp:
        work = Path(tmp)
        registry = start_registry(work / "registry")
        try:
            prefix = f"{registry.address}/bench"
            meta = work / "built.json"
            figures["build_push_s"] = _timed([
                *pinmatrix, "build", str(root / "matrix.toml"), "-k", cell.id, "--engine", "none", "--push",
                "--registry", prefix, "--cache-dir", str(seeded(work / "cache")), "--layout", str(work / "oci"),
                "--logs-dir", str(work / "logs"), "--compression", str(COMPRESSION), "--metadata-file", str(meta)],
                dict(os.environ), work / "build.out")
            built = json.loads(meta.read_text())[cell.id]
            by_digest = f"{prefix}/{cell.stack}@{built['digest']}"
            _progress(figures)
            store = podman_config(work / "podman-user")
            try:
                env = {**os.environ, **store.env}
                t0 = time.perf_counter()
                subprocess.run(["podman", "pull", "--tls-verify=false", "-q", by_digest], env=env, check=True,
                               capture_output=True)
                figures["pull_s"] = round(time.perf_counter() - t0, 1)
                for smoke in FIRST_SMOKES:
                    out = work / f"{smoke}.json"
                    figures[f"smoke_{smoke}_s"] = _timed([
                        *pinmatrix, "smoke", str(root / "matrix.toml"), "--cell", cell.id, "--runtime", "podman",
                        "--image", by_digest, "--smoke", smoke, "--kernel-cache", "off", "--rerun",
                        "--results", str(work / "results.sqlite"), "--logs", str(work / "smoke-logs"),
                        "--json", str(out)], env, work / f"{smoke}.out")
                    records = json.loads(out.read_text())
                    figures[f"smoke_{smoke}_status"] = sorted({str(r.get("status")) for r in records})
            finally:
                store.stop()
            ours = figures["build_push_s"] + figures["pull_s"]
            figures["path_s"] = round(ours + sum(figures[f"smoke_{s}_s"] for s in FIRST_SMOKES), 1)
            _progress(figures)
            if SMALLEST:  # the peer's build, push and pull are assembly's too, which runs them at this size
                figures["peer"] = "not run at the smallest size (python -m benchmarks assembly runs the same)"
                return figures
            base = debian_base(cell.base, cell.platform, OCILayout(work / "oci").init(), work / "cache",
                               work / "base.log")
            peer_store = podman_config(work / "podman-peer")
            peer_ref = f"{prefix}/peer-{cell.stack}:{cell.id}"
            try:
                figures.update(peer_build(work / "cache" / "rootfs" / f"{base.key}.layer",
                                          lock_path(cell, root).read_text(),
                                          next((i.url for i in cell.indexes if i.default), DEFAULT_INDEX), work,
                                          {**os.environ, **peer_store.env}, peer_ref, extra_ca))
            finally:
                peer_store.stop()
            peer_digest = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}",
                                          f"docker://{peer_ref}"], check=True, capture_output=True,
                                         text=True).stdout.strip()
            figures["peer_pull_s"], _, _ = _pull_fresh(f"{prefix}/peer-{cell.stack}@{peer_digest}",
                                                       work / "podman-peer-pull")
        finally:
            registry.stop()
    peer = figures["peer_build_s"] + figures["peer_push_s"] + figures["peer_pull_s"]
    figures["ratio_build_push_pull_to_peer"] = round(ours / peer, 2)
    figures["target"] = "build + push + pull <= 0.7x the peer's"
    figures["target_met"] = figures["ratio_build_push_pull_to_peer"] <= 0.7
    return figures
