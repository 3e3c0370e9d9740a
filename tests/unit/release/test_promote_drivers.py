"""Promotion keyed by driver: a policy's ``drivers`` ranges each need a clean run of every required smoke on a
host whose driver is in the range, on the image that would be promoted."""

from __future__ import annotations

from promotion import DIGEST, GPU_CELL, record

from pinmatrix.hostprobe import HostFingerprint
from pinmatrix.project.policy import PromotionPolicy
from pinmatrix.release.promote import check_policy


def _h200(driver: str) -> HostFingerprint:
    return HostFingerprint.make(hostname="h", gpu_name="NVIDIA H200", gpu_count=1, driver=driver, capability="9.0")


def _passes(driver: str, status: str = "pass", digest: str | None = DIGEST) -> list:
    return [record(GPU_CELL, smoke, status, digest, host=_h200(driver), run=f"r-{driver}")
            for smoke in GPU_CELL.smokes]


def test_every_range_needs_clean_runs() -> None:
    policy = PromotionPolicy(drivers=[">=580,<590", "595.58.03"])
    check = check_policy(GPU_CELL, policy, _passes("580.159.04"))
    assert check.problems == [f"required smoke {s!r} has no clean run on a driver in 595.58.03 (the promotion "
                              "policy's drivers); it was measured on 580.159.04" for s in GPU_CELL.smokes]
    assert check_policy(GPU_CELL, policy, _passes("580.159.04") + _passes("595.58.03")).ok
    assert check_policy(GPU_CELL, PromotionPolicy(), _passes("580.159.04")).ok  # no drivers: any driver


def test_a_clean_run_on_another_image_does_not_cover_a_range() -> None:
    policy = PromotionPolicy(drivers=["595.58.03"])
    other = _passes("595.58.03", digest="sha256:" + "2" * 64)
    for r in other:
        object.__setattr__(r, "finished_at", "2026-11-29T19:00:00Z")  # older: the promoted image stays DIGEST
    problems = check_policy(GPU_CELL, policy, _passes("580.159.04") + other).problems
    assert any("no clean run on a driver in 595.58.03" in p for p in problems)
