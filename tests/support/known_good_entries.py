"""Shared by tests/unit/release/test_pull.py and tests/integration/test_pull_unsigned.py."""

from __future__ import annotations

from pathlib import Path

from promotion import push_image  # noqa: F401 - the fixture

from pinmatrix.project.known_good import record_promotion


def entry(cell_id: str, when: str, *, stack: str = "gb10", gpu: bool = True, min_driver: str | None = None,
          arch: tuple[str, ...] = (), cap: str | None = None, registry: str = "127.0.0.1:5000",
          digest: str | None = None) -> dict:
    digest = digest or "sha256:" + cell_id[:1] * 64
    return {
        "stack": stack, "cell_id": cell_id, "cell_name": f"{stack}[{cell_id}]", "digest": digest,
        "reference": f"{registry}/pinmatrix/known-good/{stack}@{digest}", "promoted_at": when,
        "gpu_required": gpu, "min_driver": min_driver, "compute_capability": cap, "arch_flags": list(arch),
        "pins": {}, "policy": {}, "evidence": [],
    }


def write_entries(path: Path, entries: list[dict]) -> None:
    for e in entries:
        record_promotion(path, e)
