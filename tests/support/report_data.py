"""Shared by tests in several folders."""

from __future__ import annotations

from pinmatrix.cell import BaseSpec, Cell
from pinmatrix.results.store import HostFingerprint, SmokeRecord

H200 = HostFingerprint.make(hostname="gpu1", gpu_name="NVIDIA H200", gpu_count=1, driver="580.159.04",
                            capability="9.0", cuda_driver_api="13.0")

CPU = HostFingerprint.make(hostname="ci")

def make_cell(cid: str, stack: str, pins: dict[str, str], smokes: tuple[str, ...] = ("host-probe", "boundary"),
              **kw: object) -> Cell:
    defaults: dict[str, object] = dict(
        python="3.12", platform="x86_64-manylinux_2_28", requirements=(), arch_flags=("9.0a",),
        torch_cuda_arch_list="9.0a", flashinfer_cuda_arch_list=None, env={}, patches=(), known_issues=(),
        base=BaseSpec(kind="mmdebstrap"), indexes=(), min_driver="580.65.06", compute_capability="9.0",
    )
    defaults.update(kw)
    name = f"{stack}[{','.join(f'{k}={v}' for k, v in pins.items())}]"
    return Cell(id=cid, stack=stack, name=name, pins=pins, smokes=smokes, **defaults)  # type: ignore[arg-type]

def rec(cell: Cell, smoke: str, status: str, *, host: HostFingerprint = H200, run: str = "r1",
        failure_class: str | None = None, reason: str = "", log_path: str | None = None,
        metrics: dict | None = None, digest: str | None = "sha256:" + "ab" * 32) -> SmokeRecord:
    return SmokeRecord(
        cell_id=cell.id, stack=cell.stack, host=host, smoke=smoke, run_id=run, status=status,
        failure_class=failure_class, reason=reason, metrics=metrics or {}, log_path=log_path,
        started_at="2026-11-29T19:00:00Z", finished_at="2026-11-29T19:00:03Z", duration_s=3.0,
        known_issue=None, image_digest=digest,
    )
