"""Layer compression on a real GPU cell's bytes, side by side in one run: pinmatrix's compressors
(oci/compression.py) against the floor of each layer format on the same cores (``pigz -1`` for gzip,
``zstd -3`` for zstd, every core) and against what pinmatrix did before (zlib level 1 on one thread).

The input is one plain tar of the unpacked trees of the cell's largest wheels (``PINMATRIX_BENCH_STACK``, default
h200; ``PINMATRIX_BENCH_BYTES`` of tar at most, default 1.5 GB), made once and read from the page cache by every
compressor. Each compressor writes to /dev/null, except pinmatrix's, whose output is hashed as the layer writer
hashes it (that sha256 is part of its time). Also measured: inflating each format (the puller's side) and the
same bytes from pinmatrix's gzip and zstd with one thread and with all (the digest must not change).
Targets (ratios in this run): pinmatrix gzip <= 1.3x pigz -1; pinmatrix zstd <= 1.3x zstd -3; the same digest
for any thread count."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import zipfile
import zlib
from pathlib import Path
from typing import Any

from pinmatrix.index.wheel_index import WheelFetcher, cell_target, ssl_context
from pinmatrix.matrix.expand import select_cells
from pinmatrix.matrix.selection import expand_matrix
from pinmatrix.oci.compression import LayerCompression
from pinmatrix.project.lockfile import lock_path, parse_lock
from pinmatrix.project.matrix_toml import load_matrix

STACK = os.environ.get("PINMATRIX_BENCH_STACK", "h200")
MAX_BYTES = int(float(os.environ.get("PINMATRIX_BENCH_BYTES", "1.5e9")))
CORES = len(os.sched_getaffinity(0))
CHUNK = 1 << 20


def _tool_s(argv: list[str], source: Path) -> float:
    t0 = time.perf_counter()
    with open(source, "rb") as stdin:
        subprocess.run(argv, stdin=stdin, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def _ours(compression: LayerCompression, source: Path, threads: int, out: Path | None = None) -> tuple[float, str, int]:
    """Seconds, sha256 and size of pinmatrix's compression of ``source`` (hashed as LayerWriter hashes)."""
    comp = compression.compressor(threads)
    digest, size = hashlib.sha256(), 0
    t0 = time.perf_counter()
    with open(source, "rb") as fh, (open(out, "wb") if out else open(os.devnull, "wb")) as sink:
        while data := fh.read(CHUNK):
            part = comp.compress(data)
            digest.update(part)
            sink.write(part)
            size += len(part)
        part = comp.flush()
        digest.update(part)
        sink.write(part)
        size += len(part)
    return time.perf_counter() - t0, digest.hexdigest(), size


def _old_zlib(source: Path) -> tuple[float, int]:
    """What LayerWriter did before: one zlib level-1 gzip stream on one thread."""
    obj, size = zlib.compressobj(1, zlib.DEFLATED, 31), 0
    t0 = time.perf_counter()
    with open(source, "rb") as fh:
        while data := fh.read(CHUNK):
            size += len(obj.compress(data))
    size += len(obj.flush())
    return time.perf_counter() - t0, size


def _sample_tar(work: Path) -> tuple[Path, list[str]]:
    root = Path(".").resolve()
    matrix = load_matrix(root / "matrix.toml")
    cell = next(c for c in select_cells(expand_matrix(matrix).cells, stack=STACK) if not c.patches_to_apply)
    extra_ca = tuple(Path(p) for p in matrix.settings.ca_certificates if Path(p).exists())
    fetcher = WheelFetcher(root / ".pinmatrix" / "cache" / "wheels", context=ssl_context(extra_ca))
    target = cell_target(cell)
    wheels = [fetcher.choose(e, target, cell.indexes) for e in parse_lock(lock_path(cell, root).read_text()).entries]
    wheels.sort(key=lambda w: -(w.size or 0))
    tree, total = work / "tree", 0
    names: list[str] = []
    for wheel in wheels:
        path = fetcher.fetch(wheel)
        with zipfile.ZipFile(path) as zf:
            unpacked = sum(i.file_size for i in zf.infolist())
            if names and total + unpacked > MAX_BYTES:
                continue
            zf.extractall(tree)
        names.append(path.name)
        total += unpacked
    tar_path = work / "sample.tar"
    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(tree, arcname=".")
    shutil.rmtree(tree)
    return tar_path, names


def run() -> dict[str, Any]:
    for tool in ("pigz", "zstd"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"the floor needs {tool} (apt-get install {tool})")
    work_root = Path(".pinmatrix/bench")
    work_root.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {"stack": STACK, "cores": CORES}
    with tempfile.TemporaryDirectory(prefix="compression-", dir=work_root) as tmp:
        work = Path(tmp)
        sample, names = _sample_tar(work)
        size = sample.stat().st_size
        figures.update({"wheels": names, "tar_bytes": size})
        sample.read_bytes()  # into the page cache once, for every compressor alike
        gzip_ours, zstd_ours = LayerCompression("gzip", 1), LayerCompression("zstd", 3)
        figures["floor_pigz_1_s"] = round(_tool_s(["pigz", f"-p{CORES}", "-1", "-c"], sample), 2)
        seconds, gz_digest, gz_size = _ours(gzip_ours, sample, CORES, work / "ours.gz")
        figures.update({"ours_gzip_1_s": round(seconds, 2), "ours_gzip_1_bytes": gz_size})
        old_s, old_size = _old_zlib(sample)
        figures.update({"before_zlib_1_one_thread_s": round(old_s, 2), "before_zlib_1_bytes": old_size})
        figures["floor_zstd_3_s"] = round(_tool_s(["zstd", f"-T{CORES}", "-3", "-q", "-c"], sample), 2)
        seconds, zst_digest, zst_size = _ours(zstd_ours, sample, CORES, work / "ours.zst")
        figures.update({"ours_zstd_3_s": round(seconds, 2), "ours_zstd_3_bytes": zst_size})
        figures["inflate_ours_gzip_s"] = round(_tool_s(["pigz", "-d", "-c"], work / "ours.gz"), 2)
        figures["inflate_ours_zstd_s"] = round(_tool_s(["zstd", "-d", "-q", "-c"], work / "ours.zst"), 2)
        figures["same_digest_one_thread_gzip"] = _ours(gzip_ours, sample, 1)[1] == gz_digest
        figures["same_digest_one_thread_zstd"] = _ours(zstd_ours, sample, 1)[1] == zst_digest
    figures.update({
        "ratio_ours_gzip_to_pigz": round(figures["ours_gzip_1_s"] / max(figures["floor_pigz_1_s"], 0.01), 2),
        "ratio_ours_zstd_to_zstd_cli": round(figures["ours_zstd_3_s"] / max(figures["floor_zstd_3_s"], 0.01), 2),
        "speedup_gzip_over_before": round(figures["before_zlib_1_one_thread_s"] / max(figures["ours_gzip_1_s"], 0.01), 2),
        "speedup_zstd_over_before": round(figures["before_zlib_1_one_thread_s"] / max(figures["ours_zstd_3_s"], 0.01), 2),
        "zstd_bytes_to_gzip_bytes": round(zst_size / gz_size, 3),
        "target": "ours <= 1.3x the floor of each format, same digest for 1 and all threads",
    })
    figures["target_met"] = bool(figures["ratio_ours_gzip_to_pigz"] <= 1.3
                                 and figures["ratio_ours_zstd_to_zstd_cli"] <= 1.3
                                 and figures["same_digest_one_thread_gzip"] and figures["same_digest_one_thread_zstd"])
    return figures
