"""Shared by tests/unit/release/test_promote_rules.py and tests/integration/test_promote_rules_registry.py."""

from __future__ import annotations

from promotion import push_image  # noqa: F401 - the fixture
from report_data import H200, make_cell

from pinmatrix.results.store import HostFingerprint, SmokeRecord

GB10 = HostFingerprint.make(hostname="spark", gpu_name="NVIDIA GB10", gpu_count=1, driver="580.142", capability="12.1")


CELL = make_cell("1a2b3c4d5e6f", "xf", {"driver": "580.159.04", "gpu": "sm_90"}, smokes=("boundary",))


def rec(smoke: str, status: str, digest: str | None, *, run: str, finished: str, host: HostFingerprint = H200,
        cell=CELL) -> SmokeRecord:  # noqa: ANN001
    return SmokeRecord(
        cell_id=cell.id, stack=cell.stack, host=host, smoke=smoke, run_id=run, status=status,
        failure_class="illegal-memory-access" if status == "fail" else None, reason="", metrics={}, log_path=None,
        started_at=finished, finished_at=finished, duration_s=0.0, known_issue=None, image_digest=digest,
    )


T0 = "2026-11-29T10:00:00Z"
