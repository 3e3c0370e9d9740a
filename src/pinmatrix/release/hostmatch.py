"""Does a cell's image run on a given host? Driver floor and GPU architecture coverage, with a reason.

``judge``: every known-good cell's newest promotion with its verdict for a host, newest first.

Used by ``pinmatrix pull`` (pick the newest known-good cell this host can run), ``pinmatrix doctor``, ``pinmatrix ci k8s``
(which node pools a cell can be scheduled on) and ``pinmatrix promote`` (which hosts count for a gpu).

Architecture rules (CUDA fat binaries, see the CUDA C programming guide "binary compatibility"):
- ``X.Y`` (plain SASS for sm_XY) runs on capability X.Z with Z >= Y (same major).
- ``X.Ya`` (arch-specific, e.g. sm_90a, sm_121a) runs on capability X.Y only.
- ``X.Yf`` (family-specific, CUDA >= 12.9) runs on capability X.Z with Z >= Y (same major).
- ``+PTX`` (or ``X.Y+PTX``) embeds PTX of the highest listed arch; the driver JIT-compiles it for any newer
  capability, except PTX of an arch-specific (``a``) target, which only loads on that exact capability.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pinmatrix.archflag import ArchFlag, parse_capability, parse_flags
from pinmatrix.hostprobe import HostFingerprint
from pinmatrix.release.driver_evidence import coverage


def arch_covers(flags: tuple[str, ...] | list[str], compute_capability: str | None,
                host_capability: str | None) -> tuple[bool, str]:
    """Whether code built for ``flags`` (or, lacking flags, for ``compute_capability``) runs on a GPU of
    ``host_capability``. Returns (ok, reason)."""
    host = parse_capability(host_capability)
    archs = parse_flags(flags)
    if not archs and compute_capability:
        cap = parse_capability(compute_capability)
        if cap:
            archs = [ArchFlag(cap[0], cap[1], "", False)]
    if not archs:
        return True, "the cell names no GPU architecture"
    if host is None:
        return False, "the host's GPU capability is unknown"
    hm, hn = host
    for a in archs:
        if a.runs_on(hm, hn):
            how = "JIT-compiles its PTX" if a.ptx and a.major != hm else "runs"
            return True, f"arch {a.label} {how} on capability {hm}.{hn}"
    built = " ".join(a.label for a in archs)
    return False, f"built for {built}, which does not cover capability {hm}.{hn}"


def version_tuple(text: str) -> tuple[int, ...]:
    """'580.159.04' -> (580, 159, 4). Non-numeric parts are dropped."""
    return tuple(int(p) for p in re.findall(r"\d+", text))


def driver_satisfies(host_driver: str | None, min_driver: str | None) -> tuple[bool, str]:
    if not min_driver:
        return True, "no minimum driver"
    if not host_driver:
        return False, f"needs driver >= {min_driver}, the host has no NVIDIA driver"
    if version_tuple(host_driver) >= version_tuple(min_driver):
        return True, f"driver {host_driver} >= {min_driver}"
    return False, f"needs driver >= {min_driver}, the host has {host_driver}"


@dataclass(frozen=True)
class Requirements:
    """What an image needs from a host: taken from a Cell or a known-good.toml entry."""

    gpu_required: bool
    min_driver: str | None
    compute_capability: str | None
    arch_flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostFacts:
    """What a host offers (a subset of the results store's HostFingerprint)."""

    driver: str | None
    capability: str | None
    gpu_count: int = 0


def host_meets(req: Requirements, host: HostFacts) -> tuple[bool, list[str]]:
    """(ok, reasons). Reasons explain each failed requirement; when ok they explain why it fits."""
    if not req.gpu_required:
        return True, ["runs without a GPU"]
    problems: list[str] = []
    good: list[str] = []
    if host.gpu_count <= 0 or not host.capability:
        return False, ["needs an NVIDIA GPU, this host has none"]
    ok, why = driver_satisfies(host.driver, req.min_driver)
    (good if ok else problems).append(why)
    # A host with mixed GPUs reports "8.9,9.0": the image must run on each of them.
    for cap in [c.strip() for c in host.capability.split(",") if c.strip()]:
        ok, why = arch_covers(req.arch_flags, req.compute_capability, cap)
        (good if ok else problems).append(why)
    return (not problems), (problems or good)


def gpu_value_capability(gpu: str) -> tuple[int, int] | None:
    """The compute capability a gpu axis value names: 'sm_90' -> (9, 0), 'sm_121' -> (12, 1), '9.0'."""
    return parse_capability(gpu)


def host_matches_gpu(gpu: str, host_capability: str | None, host_gpu_name: str | None) -> bool:
    """Whether a host counts as the gpu axis value ``gpu`` (an sm_XY / X.Y value, or a product name
    fragment such as 'H200' matched case-insensitively against the host's GPU name)."""
    cap = gpu_value_capability(gpu)
    if cap is not None:
        caps = [parse_capability(c) for c in (host_capability or "").split(",")]
        return cap in caps
    return bool(host_gpu_name) and gpu.lower() in (host_gpu_name or "").lower()


@dataclass(frozen=True)
class PullCandidate:
    entry: dict[str, Any]
    ok: bool
    reasons: list[str]
    driver_warning: str | None = None  # the host's driver is not among those the evidence covers (policy: warn)

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


def _driver_verdict(entry: dict[str, Any], host: HostFingerprint, hosts: Mapping[str, HostFingerprint],
                    ok: bool, reasons: list[str]) -> PullCandidate:
    """A cell that fits the host, read against the drivers its evidence covers: the entry's promotion policy
    (``uncovered_driver``) says whether a driver outside them is a warning (added to the reasons) or a refusal."""
    cover = coverage(entry, host, hosts)
    if not ok or cover.covered:
        return PullCandidate(entry, ok, reasons)
    raw = entry.get("policy")
    policy: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if policy.get("uncovered_driver") == "refuse":
        return PullCandidate(entry, False, [f"{cover.sentence()}, and its promotion policy refuses such a host "
                                            "(uncovered_driver = \"refuse\")"])
    warning = f"warning: {cover.sentence()}"
    return PullCandidate(entry, True, [*reasons, warning], warning)


def judge(entries: list[dict[str, Any]], host: HostFingerprint, *, stack: str | None = None,
          hosts: Mapping[str, HostFingerprint] | None = None) -> list[PullCandidate]:
    """Newest first, one verdict per cell (a cell promoted twice counts once, by its newest entry). ``hosts``: the
    results store's host records by id, for the drivers each promotion's evidence was gathered on (else the
    evidence's host labels say them)."""
    chosen = [e for e in entries if stack is None or e["stack"] == stack]
    ordered = sorted(enumerate(chosen), key=lambda ie: (ie[1]["promoted_at"], ie[0]), reverse=True)
    seen: set[str] = set()
    verdicts: list[PullCandidate] = []
    facts = host_facts(host)
    for _, entry in ordered:
        if entry["cell_id"] in seen:
            continue
        seen.add(entry["cell_id"])
        ok, reasons = host_meets(requirements_of(entry), facts)
        verdicts.append(_driver_verdict(entry, host, hosts or {}, ok, reasons))
    return verdicts
