"""What assembling a cell's image must cost at least, and what the tool a user would pick instead costs, both
measured in the run that measures pinmatrix (issue: the floor must be a lower bound, not a straw man).

- ``honest_floor``: the cell's wheels fetched by a parallel client into an empty folder, their tree unpacked and
  written once as a plain tar to disk, then that tar compressed once with the cheapest compressor each layer
  format allows, on every core (``pigz -1`` for gzip layers, ``zstd -3`` for zstd layers). Fetching and writing
  the tar are independent, so the floor counts the longer of the two, plus the compression:
  ``floor = max(fetch, tar) + compress``. Nothing can assemble the same bytes faster.
- ``peer_build``: a Containerfile FROM the same Debian base (``podman import`` of the base layer pinmatrix built),
  ``uv pip install --require-hashes --no-deps -r`` the cell's own lock into ``/opt/venv``, ``podman build`` into
  overlay storage, then ``podman push`` to the same registry. With a ``cache`` repository, podman's own registry
  build cache: ``podman build --layers --cache-from REPO --cache-to REPO`` (each step's layer stored there, and
  fetched instead of run when its key is there).
- ``parallel_pull``: blobs pulled from a registry by a parallel client (8 at once, each hashed as it streams to a
  file, nothing else): what a fresh machine's fetch of the same blobs from a build cache is measured against.
- ``quiet``: nothing of an earlier phase left to write back before a timed one starts (a fresh machine has
  nothing; the sync is not timed): a phase that followed gigabytes of writes paid for them (the kernel throttles
  a writer while it writes back), whichever phase it was."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pinmatrix.index.wheel_index import WheelFetcher, cell_target, ssl_context
from pinmatrix.project.lockfile import parse_lock
from pinmatrix.registry.client import Registry

CORES = os.cpu_count() or 1
PULLERS = 8  # blobs pulled at once by parallel_pull
COMPRESSORS = {"gzip": ["pigz", f"-p{CORES}", "-1", "-c"], "zstd": ["zstd", f"-T{CORES}", "-3", "-q", "-c"]}


def _timed(argv: list[str], *, stdin: Path | None = None, cwd: Path | None = None,
           env: dict[str, str] | None = None) -> float:
    t0 = time.perf_counter()
    with open(stdin, "rb") if stdin else open(os.devnull, "rb") as source:
        proc = subprocess.run(argv, stdin=source, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd,
                              env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed (exit {proc.returncode}): {proc.stderr.decode(errors='replace')[-500:]}")
    return time.perf_counter() - t0


def parallel_pull(registry: Registry, repository: str, digests: list[str], into: Path) -> float:
    """Seconds to pull ``digests`` from ``repository`` into the new folder ``into``, ``PULLERS`` at once, each hashed
    as it streams to a file (a blob that is not its digest fails the pull)."""
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


def quiet() -> None:
    """Whatever earlier phases wrote, written back now (untimed), so that the next timed phase starts clean."""
    os.sync()


def honest_floor(cell: Any, lock_text: str, work: Path, extra_ca: tuple[Path, ...], jobs: int) -> dict[str, Any]:
    """The floor of assembling ``cell``'s wheels into layers, per layer format (see the module's docstring)."""
    for tool in ("pigz", "zstd", "tar"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"the floor needs {tool} (apt-get install {tool})")
    lock = parse_lock(lock_text)
    fetcher = WheelFetcher(work / "wheels", context=ssl_context(extra_ca))
    target = cell_target(cell)
    t0 = time.perf_counter()
    wheels = [fetcher.choose(e, target, cell.indexes) for e in lock.entries]
    with ThreadPoolExecutor(max(jobs, 8)) as pool:
        paths = list(pool.map(fetcher.fetch, wheels))
    fetch_s = time.perf_counter() - t0
    tree = work / "tree"
    for path in paths:
        with zipfile.ZipFile(path) as zf:
            zf.extractall(tree)
    tar_path = work / "tree.tar"
    tar_s = _timed(["tar", "-cf", str(tar_path), "-C", str(tree), "."])
    tree_bytes = tar_path.stat().st_size
    figures: dict[str, Any] = {"floor_fetch_s": round(fetch_s, 1), "floor_tar_s": round(tar_s, 1),
                               "floor_tar_bytes": tree_bytes, "wheel_bytes": sum(p.stat().st_size for p in paths),
                               "floor_cores": CORES}
    for fmt, argv in COMPRESSORS.items():
        compress_s = _timed(argv, stdin=tar_path)
        figures[f"floor_{fmt}_compress_s"] = round(compress_s, 1)
        figures[f"floor_{fmt}_s"] = round(max(fetch_s, tar_s) + compress_s, 1)
    shutil.rmtree(tree)
    tar_path.unlink()
    return figures


CONTAINERFILE = """FROM {base}
COPY uv /usr/local/bin/uv
COPY lock.txt /lock.txt
COPY ca.pem /ca.pem
ENV SSL_CERT_FILE=/ca.pem
RUN UV_CACHE_DIR=/tmp/uv-cache uv venv --python /usr/bin/python3 /opt/venv \\
 && UV_CACHE_DIR=/tmp/uv-cache uv pip install --python /opt/venv/bin/python --require-hashes --no-deps \\
      --index-url {index} -r /lock.txt \\
 && rm -rf /tmp/uv-cache
"""


def peer_build(base_layer: Path, lock_text: str, index: str, work: Path, env: dict[str, str],
               push_ref: str, extra_ca: tuple[Path, ...] = (), *, cache: str | None = None,
               label: str = "peer") -> dict[str, Any]:
    """The peer's ``podman build`` + ``podman push`` of the same cell, timed; ``env`` points podman at a store of
    its own. The base import is timed apart (a user's base is usually pulled once). The build trusts the host's CA
    bundle plus ``extra_ca`` (the matrix's ca_certificates: an intercepting proxy's), as pinmatrix's own fetches do.
    ``cache``: a registry repository for podman's build cache (from and to); ``label`` names the figures
    (``<label>_build_s``, ...) and the build context's folder under ``work``."""
    pinned = Path(sys.executable).with_name("uv")  # the uv pinmatrix depends on, else the PATH's
    uv = str(pinned) if pinned.is_file() else shutil.which("uv") or "uv"
    context = work / label
    context.mkdir(parents=True)
    shutil.copy(uv, context / "uv")
    (context / "lock.txt").write_text(lock_text, encoding="utf-8")
    bundle = b"".join(p.read_bytes() for p in (Path("/etc/ssl/certs/ca-certificates.crt"), *extra_ca) if p.is_file())
    (context / "ca.pem").write_bytes(bundle)
    base = "localhost/pinmatrix-bench-base:latest"
    # the index URL is matrix text: one shell word in the RUN line, whatever it holds
    (context / "Containerfile").write_text(CONTAINERFILE.format(base=base, index=shlex.quote(index)),
                                           encoding="utf-8")
    layers = ["--layers", "--tls-verify=false", "--cache-from", cache, "--cache-to", cache] if cache \
        else ["--layers=false"]
    figures: dict[str, Any] = {}
    figures[f"{label}_base_import_s"] = round(_timed(["podman", "import", "--quiet", str(base_layer), base],
                                                     env=env), 1)
    figures[f"{label}_build_s"] = round(_timed(["podman", "build", "--quiet", *layers, "-t", push_ref,
                                                "-f", str(context / "Containerfile"), str(context)], env=env), 1)
    figures[f"{label}_push_s"] = round(_timed(["podman", "push", "--quiet", "--tls-verify=false", push_ref],
                                              env=env), 1)
    return figures
