"""A user's whole path for one cell, through the CLI as a user runs it, side by side with the peer in the same run,
twice: from an empty build cache (cold) and with a warm registry build cache (warm), all against one private
docker-registry.

- pinmatrix, cold: a fresh machine (empty cache folder and layout; the Debian base made here)
  ``pinmatrix build --engine none --push --cache-to REG/bench-cache/pinmatrix`` (each layer also stored to the
  build cache, its entry signed with a key made for the run, as benchmarks/buildcache.py does), ``podman pull`` by
  digest on a fresh store, then the cell's first smoke (``host-probe``) and the import of its stack
  (``python-imports``) with ``pinmatrix smoke --runtime podman --image REF@DIGEST`` in that store.
- pinmatrix, warm: another fresh machine, ``build --engine none --push --cache-from REG/bench-cache/pinmatrix``
  (every layer fetched, nothing built) pushed to another repository of the same registry, then its pull by digest
  on a fresh store.
- The peer, cold: a Containerfile FROM the same base with ``uv pip install --require-hashes`` of the same lock,
  ``podman build --layers --cache-to REG/bench-cache/peer`` + ``podman push``, and its pull by digest on a fresh
  store (benchmarks/floor.py; the peer's image has no smoke harness, so its path ends at the pull).
- The peer, warm, its fair counterpart: a fresh podman store (the base imported again),
  ``podman build --layers --cache-from REG/bench-cache/peer --cache-to REG/bench-cache/peer``, its push to another
  repository and its pull by digest on a fresh store.

Each peer path counts its base import (``podman import`` of the same Debian base, ``peer_base_import_s``), as
pinmatrix's counts its base: made by mmdebstrap when cold, fetched from the build cache when warm.

Before each path's first timed step whatever earlier steps wrote is written back (``floor.quiet``, untimed). On a
host without a GPU the cell's GPU smokes would be skipped from the host probe, so only these two run.
``PINMATRIX_BENCH_STACK`` (default h200) picks the stack, ``PINMATRIX_BENCH_COMPRESSION`` (default zstd:3) the
layers' compression. The target, build + push + pull <= 0.7x the peer's, is judged on the warm paths: a fresh
runner after the first, the case a shared build cache is for (issue 46), each side from its own warm cache. The cold
paths are measured and reported beside it (``ratio_build_push_pull_to_peer``): there pinmatrix also runs the
FlashInfer AOT compile, which the peer's image lacks (it compiles at run time). At the smallest size only
pinmatrix's two paths run (the peer's cold build, push and pull are assembly's too)."""

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
from benchmarks.floor import peer_build, quiet
from benchmarks.plaincell import SMALLEST, PlainCell, plain_cell, seeded
from pinmatrix.engine.services import podman_config, start_registry
from pinmatrix.image.assembly.rootfs import debian_base
from pinmatrix.index.wheel_index import DEFAULT_INDEX
from pinmatrix.oci.compression import LayerCompression
from pinmatrix.oci.layout import OCILayout
from pinmatrix.project.lockfile import lock_path
from pinmatrix.release.signing import SIGNING_KEY_ENV, TRUSTED_KEYS_ENV, generate_keypair

STACK = os.environ.get("PINMATRIX_BENCH_STACK", "h200")
COMPRESSION = LayerCompression.parse(os.environ.get("PINMATRIX_BENCH_COMPRESSION", "zstd:3"))
FIRST_SMOKES = ("host-probe",) if SMALLEST else ("host-probe", "python-imports")
CACHE = "bench-cache"  # the registry's build caches: CACHE/pinmatrix (build --cache-to/--cache-from), CACHE/peer
TARGET_RATIO = 0.7


def _timed(argv: list[str], env: dict[str, str], log: Path) -> float:
    """Seconds ``argv`` took; its output goes to ``log``; a failure stops the benchmark naming the log."""
    t0 = time.perf_counter()
    with open(log, "wb") as out:
        done = subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} ... exited {done.returncode}: see {log}")
    return round(seconds, 1)


def _keys(work: Path) -> dict[str, str]:
    """A signing key pair made for the run: the cold build signs the cache's entries, the warm one trusts them."""
    private, public, _ = generate_keypair(work / "keys" / "signing")
    return {SIGNING_KEY_ENV: str(private), TRUSTED_KEYS_ENV: str(public)}


def _build(target: PlainCell, machine: Path, prefix: str, env: dict[str, str], cache: list[str]) -> tuple[float, str]:
    """``pinmatrix build --engine none --push`` of the cell on the fresh machine ``machine`` (its own cache folder,
    layout and logs), with the ``cache`` flags: seconds and the pushed image by digest."""
    meta = machine / "built.json"
    machine.mkdir(parents=True, exist_ok=True)
    seconds = _timed([
        sys.executable, "-m", "pinmatrix", "build", str(target.root / "matrix.toml"), "-k", target.cell.id,
        "--engine", "none", "--push", "--registry", prefix, "--cache-dir", str(machine / "cache"),
        "--layout", str(machine / "oci"), "--logs-dir", str(machine / "logs"), "--compression", str(COMPRESSION),
        "--metadata-file", str(meta), *cache], env, machine / "build.out")
    built = json.loads(meta.read_text())[target.cell.id]
    return seconds, f"{prefix}/{target.cell.stack}@{built['digest']}"


def _smokes(target: PlainCell, by_digest: str, work: Path, env: dict[str, str], figures: dict[str, Any]) -> None:
    """The cell's first smokes, ``pinmatrix smoke --runtime podman`` of the pulled image, each timed."""
    for smoke in FIRST_SMOKES:
        out = work / f"{smoke}.json"
        figures[f"smoke_{smoke}_s"] = _timed([
            sys.executable, "-m", "pinmatrix", "smoke", str(target.root / "matrix.toml"), "--cell", target.cell.id,
            "--runtime", "podman", "--image", by_digest, "--smoke", smoke, "--kernel-cache", "off", "--rerun",
            "--results", str(work / "results.sqlite"), "--logs", str(work / "smoke-logs"), "--json", str(out)],
            env, work / f"{smoke}.out")
        records = json.loads(out.read_text())
        figures[f"smoke_{smoke}_status"] = sorted({str(r.get("status")) for r in records})


def _ours_cold(target: PlainCell, work: Path, address: str, env: dict[str, str], figures: dict[str, Any]) -> str:
    """pinmatrix's cold path: build + push from an empty cache (filling the build cache), pull, first smokes.
    Returns the image by digest."""
    seeded(work / "cold" / "cache")
    quiet()
    figures["build_push_s"], by_digest = _build(target, work / "cold", f"{address}/bench", env,
                                                ["--cache-to", f"{address}/{CACHE}/pinmatrix"])
    _progress(figures)
    store = podman_config(work / "podman-user")
    try:
        store_env = {**env, **store.env}
        t0 = time.perf_counter()
        subprocess.run(["podman", "pull", "--tls-verify=false", "-q", by_digest], env=store_env, check=True,
                       capture_output=True)
        figures["pull_s"] = round(time.perf_counter() - t0, 1)
        _smokes(target, by_digest, work, store_env, figures)
    finally:
        store.stop()
    figures["path_s"] = round(figures["build_push_s"] + figures["pull_s"]
                              + sum(figures[f"smoke_{s}_s"] for s in FIRST_SMOKES), 1)
    _progress(figures)
    return by_digest


def _ours_warm(target: PlainCell, work: Path, address: str, env: dict[str, str], figures: dict[str, Any],
               cold_digest: str) -> None:
    """pinmatrix's warm path: a fresh machine builds from the warm build cache and pushes, then a fresh pull."""
    quiet()
    figures["warm_build_push_s"], by_digest = _build(target, work / "warm", f"{address}/bench-warm", env,
                                                     ["--cache-from", f"{address}/{CACHE}/pinmatrix"])
    summary = [line for line in (work / "warm" / "build.out").read_text().splitlines() if "build cache" in line]
    figures["warm_cache"] = summary[-1].strip() if summary else "no build cache line in the build's output"
    figures["warm_same_digest"] = by_digest.split("@")[1] == cold_digest.split("@")[1]
    figures["warm_pull_s"], _, _ = _pull_fresh(by_digest, work / "podman-warm-pull")
    _progress(figures)


def _peer(target: PlainCell, work: Path, address: str, figures: dict[str, Any], label: str) -> list[str]:
    """The peer's path (``label`` peer: cold, peer_warm: from its own warm cache) on a fresh podman store: base
    import (timed apart), ``podman build`` + ``podman push``, then a pull by digest on another fresh store. Returns
    the pushed image's layer digests."""
    cell = target.cell
    base = debian_base(cell.base, cell.platform, OCILayout(work / "cold" / "oci").init(), work / "cold" / "cache",
                       work / "base.log")
    repository = f"{address}/bench{'-warm' if label != 'peer' else ''}/peer-{cell.stack}"
    store = podman_config(work / f"podman-{label}")
    quiet()
    try:
        figures.update(peer_build(work / "cold" / "cache" / "rootfs" / f"{base.key}.layer",
                                  lock_path(cell, target.root).read_text(),
                                  next((i.url for i in cell.indexes if i.default), DEFAULT_INDEX), work,
                                  {**os.environ, **store.env}, f"{repository}:{cell.id}", target.extra_ca,
                                  cache=f"{address}/{CACHE}/peer", label=label))
    finally:
        store.stop()
    pushed = json.loads(subprocess.run(["skopeo", "inspect", "--tls-verify=false", f"docker://{repository}:{cell.id}"],
                                       check=True, capture_output=True, text=True).stdout)
    figures[f"{label}_pull_s"], _, _ = _pull_fresh(f"{repository}@{pushed['Digest']}", work / f"podman-{label}-pull")
    _progress(figures)
    return [str(layer) for layer in pushed["Layers"]]


def _judge(figures: dict[str, Any]) -> None:
    """Both ratios, each side's whole path (the peer's base import included); ``target_met`` is the warm path's."""
    paths = {"": ("build_push_s", "pull_s", "peer"), "warm_": ("warm_build_push_s", "warm_pull_s", "peer_warm")}
    for name, (build, pull, peer) in paths.items():
        theirs = sum(figures[f"{peer}_{step}_s"] for step in ("base_import", "build", "push", "pull"))
        figures[f"ratio_{name}build_push_pull_to_peer"] = round((figures[build] + figures[pull]) / theirs, 2)
    figures["target"] = f"build + push + pull <= {TARGET_RATIO}x the peer's with a warm registry build cache (each " \
                        "side its own); the cold paths' ratio reported, not judged"
    figures["target_met"] = figures["ratio_warm_build_push_pull_to_peer"] <= TARGET_RATIO


def run() -> dict[str, Any]:
    target = plain_cell(STACK)
    figures: dict[str, Any] = {"stack": STACK, "cell": target.cell.name, "compression": str(COMPRESSION)}
    with tempfile.TemporaryDirectory(prefix="userpath-", dir=target.work_root) as tmp:
        work = Path(tmp)
        registry = start_registry(work / "registry")
        try:
            env = {**os.environ, **_keys(work)}
            cold_digest = _ours_cold(target, work, registry.address, env, figures)
            _ours_warm(target, work, registry.address, env, figures, cold_digest)
            if SMALLEST:  # the peer's cold path is assembly's too; its warm one would add a build, push and pull
                figures["peer"] = "not run at the smallest size (python -m benchmarks assembly runs its cold " \
                                  "build, push and pull): only pinmatrix's cold and warm paths measured"
                return figures
            cold_layers = _peer(target, work, registry.address, figures, "peer")
            warm_layers = _peer(target, work, registry.address, figures, "peer_warm")
            # a step podman ran again makes a new layer (its files' times): the same layer is its cache's
            figures["peer_warm_layers_as_cold"] = f"{len(set(warm_layers) & set(cold_layers))} of {len(warm_layers)}"
        finally:
            registry.stop()
    _judge(figures)
    return figures
