"""``pinmatrix pull``: pick the newest known-good cell this host can run and pull it by digest.

The host is probed through ``nvidia-smi`` (``HostFingerprint.detect``): driver version and compute
capability. A cell qualifies when it needs no GPU, or when the host's driver is at least the cell's
minimum (the CUDA toolkit's floor) and the cell's GPU arch flags cover the host's capability
(see ``pinmatrix.hostmatch``). Every cell passed over is listed with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pinmatrix.distribution import ImageRef
from pinmatrix.hostmatch import HostFacts, Requirements, host_meets
from pinmatrix.results import HostFingerprint


@dataclass(frozen=True)
class Verdict:
    entry: dict[str, Any]
    ok: bool
    reasons: list[str]

    @property
    def label(self) -> str:
        e = self.entry
        return f"{e['cell_id']} {e.get('cell_name', '')} (promoted {e['promoted_at']})".replace("  ", " ")


def requirements_of(entry: dict[str, Any]) -> Requirements:
    return Requirements(
        gpu_required=bool(entry.get("gpu_required", True)),
        min_driver=entry.get("min_driver"),
        compute_capability=entry.get("compute_capability"),
        arch_flags=tuple(entry.get("arch_flags") or ()),
    )


def host_facts(host: HostFingerprint) -> HostFacts:
    return HostFacts(driver=host.driver, capability=host.capability, gpu_count=host.gpu_count)


def judge(entries: list[dict[str, Any]], host: HostFingerprint, *, stack: str | None = None) -> list[Verdict]:
    """Newest first, one verdict per cell (a cell promoted twice counts once, by its newest entry)."""
    chosen = [e for e in entries if stack is None or e["stack"] == stack]
    ordered = sorted(enumerate(chosen), key=lambda ie: (ie[1]["promoted_at"], ie[0]), reverse=True)
    seen: set[str] = set()
    verdicts: list[Verdict] = []
    facts = host_facts(host)
    for _, entry in ordered:
        if entry["cell_id"] in seen:
            continue
        seen.add(entry["cell_id"])
        ok, reasons = host_meets(requirements_of(entry), facts)
        verdicts.append(Verdict(entry, ok, reasons))
    return verdicts


def pick(verdicts: list[Verdict]) -> Verdict | None:
    return next((v for v in verdicts if v.ok), None)


def reference_of(entry: dict[str, Any]) -> ImageRef:
    """The entry's name@digest, checked to carry the recorded digest (never a tag)."""
    ref = ImageRef.parse(entry["reference"])
    if ref.digest != entry["digest"]:
        raise ValueError(f"known-good entry {entry['cell_id']}: reference {entry['reference']} does not carry digest "
                         f"{entry['digest']}")
    return ref
