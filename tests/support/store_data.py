"""Shared by tests in several folders."""

from __future__ import annotations

import sqlite3
from contextlib import closing

from pinmatrix.results.store import HostFingerprint, ResultsStore, SmokeRecord

HOST = HostFingerprint.make(hostname="h200-a", gpu_name="NVIDIA H200", gpu_count=1, driver="580.159.04",
                            capability="9.0", cuda_driver_api="13.0")

def rec(smoke: str = "torch-gemm", *, cell: str = "aaaaaaaaaaaa", run: str = "r1", status: str = "pass",
        host: HostFingerprint = HOST, **kw) -> SmokeRecord:
    base = dict(cell_id=cell, stack="h200", host=host, smoke=smoke, run_id=run, status=status, failure_class=None,
                reason="", metrics={"tflops": 700.5, "n": 3, "note": "x"}, log_path="/tmp/x.log",
                started_at="2026-11-29T20:00:00+00:00", finished_at="2026-11-29T20:00:01+00:00", duration_s=1.25,
                known_issue=None, image_digest=None)
    base.update(kw)
    return SmokeRecord(**base)


def run_ids(store: ResultsStore) -> list[str]:
    """The store's run ids in the order their first result was recorded."""
    with closing(sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)) as conn:
        return [r[0] for r in conn.execute("SELECT run_id FROM results GROUP BY run_id ORDER BY MIN(seq)")]
