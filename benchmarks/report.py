"""Reporting on a large results store, on one core. Target: 2,000 cells x 12 smokes x 2 hosts (48,000
latest results, 96,000 records in the store) read from SQLite, joined into the model and written as HTML
(index.html and its detail pages), Markdown, JUnit XML and JSON in under 15 s, with an index.html under 5 MB.

Cells and records are generated (three stacks, driver x torch x xformers x env axes); every 7th smoke
fails with a class and a reason, so the failure paths render too. The store is written first (not timed),
then timed: query (every record, oldest first), model (latest per cell x host x smoke), each format written
to its files (the way `pinmatrix report` writes them)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from pinmatrix.cell import BaseSpec, Cell
from pinmatrix.report.html import PAGE_PATTERN
from pinmatrix.report.model import build_report
from pinmatrix.report.write import write_reports
from pinmatrix.results.store import HostFingerprint, ResultsStore, SmokeRecord

TARGET_S = 15.0
TARGET_HTML_MB = 5.0
CELLS = 20 if os.environ.get("PINMATRIX_BENCH_SMALLEST") == "1" else 2_000
SMOKES = [f"smoke-{i:02d}" for i in range(12)]


def make_cells() -> list[Cell]:
    cells = []
    for n in range(CELLS):
        stack = f"stack-{n % 3}"
        pins = {"driver": f"5{80 + n % 4}.{n % 7}", "torch": f"2.{n % 5}.0", "xformers": f"0.0.{28 + n % 8}",
                "env": f"e{n % 2}", "gpu": "sm_90"}
        cells.append(Cell(
            id=f"{n:012x}", stack=stack, name=f"{stack}[{','.join(f'{k}={v}' for k, v in pins.items())}]",
            python="3.12", platform="x86_64-manylinux_2_28", pins=pins, requirements=(), arch_flags=("9.0a",),
            torch_cuda_arch_list="9.0a", flashinfer_cuda_arch_list=None, env={}, patches=(), smokes=tuple(SMOKES),
            known_issues=(), base=BaseSpec(kind="mmdebstrap"), indexes=(), min_driver="580.65.06",
            compute_capability="9.0",
        ))
    return cells


def run() -> dict[str, object]:
    hosts = [HostFingerprint.make(hostname=f"gpu{i}", gpu_name="NVIDIA H200", gpu_count=1 + i,
                                  driver="580.159.04", capability="9.0") for i in range(2)]
    cells = make_cells()
    with tempfile.TemporaryDirectory() as tmp:
        store = ResultsStore(Path(tmp) / "results.sqlite")
        for run_no in range(2):  # two runs: the model must keep the latest of each
            batch = []
            for i, cell in enumerate(cells):
                for j, smoke in enumerate(SMOKES):
                    fails = (i + j + run_no) % 7 == 0
                    for host in hosts:
                        batch.append(SmokeRecord(
                            cell_id=cell.id, stack=cell.stack, host=host, smoke=smoke, run_id=f"r{run_no}",
                            status="fail" if fails else "pass",
                            failure_class="illegal-memory-access" if fails else None,
                            reason="CUDA error: an illegal memory access was encountered" if fails else "",
                            metrics={"seconds": 1.5, "tflops": 400.0 + j}, log_path=None,
                            started_at="2026-11-29T00:00:00Z", finished_at="2026-11-29T00:00:01Z", duration_s=1.0,
                            known_issue=None, image_digest="sha256:" + "a" * 64,
                        ))
            store.record_many(batch)
        figures: dict[str, object] = {"cells": CELLS, "smokes": len(SMOKES), "hosts": len(hosts)}
        t0 = time.perf_counter()
        records = store.query()
        figures["records"] = len(records)
        figures["query_s"] = round(time.perf_counter() - t0, 3)
        t1 = time.perf_counter()
        report = build_report(records, cells)
        figures["model_s"] = round(time.perf_counter() - t1, 3)
        total = time.perf_counter() - t0
        out = Path(tmp) / "report"
        for fmt in ("html", "md", "junit", "json"):
            t = time.perf_counter()
            path = write_reports(report, out, [fmt])[fmt]
            figures[f"{fmt}_s"] = round(time.perf_counter() - t, 3)
            figures[f"{fmt}_mb"] = round(path.stat().st_size / 1e6, 2)
            total += time.perf_counter() - t
        pages = [p for p in out.iterdir() if PAGE_PATTERN.fullmatch(p.name)]
        figures["html_pages"] = len(pages)
        figures["html_pages_mb"] = round(sum(p.stat().st_size for p in pages) / 1e6, 2)
        figures["total_s"] = round(total, 3)
        figures["target"] = (f"query + model + 4 renderings of {CELLS} cells x {len(SMOKES)} smokes x 2 hosts "
                             f"< {TARGET_S:g} s, index.html < {TARGET_HTML_MB:g} MB")
        figures["target_met"] = total < TARGET_S and (out / "index.html").stat().st_size / 1e6 < TARGET_HTML_MB
    return figures
