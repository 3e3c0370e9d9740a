"""On which NVIDIA drivers a promotion's evidence was gathered, and whether a host's driver is among them.

A known-good entry lists the results it rests on (``evidence``: smoke, host id, host label). The driver of each
comes from the results store's host record for that id (``hosts``: what ``smoke`` recorded), else from the
label the promotion wrote (``... driver 580.159.04``); a value that is no driver version is left out, never
guessed. ``pull`` and ``doctor`` say when this host's driver is not among them; ``[promotion] uncovered_driver``
decides whether pull warns or refuses (``release.hostmatch.judge``). ``[promotion] drivers`` asks promotion
for clean runs on a list of driver ranges (``driver_range_problems``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pinmatrix.hostprobe import DriverVersion, DriverVersionError, HostFingerprint
from pinmatrix.results.store import SmokeRecord

_LABEL_DRIVER = " driver "


def _label_driver(label: object) -> DriverVersion | None:
    text = label if isinstance(label, str) else ""
    if _LABEL_DRIVER not in text:
        return None
    try:
        return DriverVersion.parse(text.rsplit(_LABEL_DRIVER, 1)[1])
    except DriverVersionError:
        return None


def evidence_drivers(entry: Mapping[str, Any], hosts: Mapping[str, HostFingerprint]) -> list[DriverVersion]:
    """The distinct drivers of an entry's evidence, lowest first: each result's host record in ``hosts`` (by
    id), else the driver its host label names."""
    found: dict[tuple[int, ...], DriverVersion] = {}
    for ev in entry.get("evidence") or []:
        if not isinstance(ev, Mapping):
            continue
        host = hosts.get(str(ev.get("host_id")))
        driver = host.driver_version if host is not None else _label_driver(ev.get("host"))
        if driver is not None:
            found.setdefault(driver.key, driver)
    return [found[k] for k in sorted(found)]


@dataclass(frozen=True)
class DriverCoverage:
    """Whether a host's driver is among those an image's evidence was gathered on."""

    host_driver: DriverVersion | None
    drivers: tuple[DriverVersion, ...]
    gpu_required: bool = True

    @property
    def covered(self) -> bool:
        """True when the host's driver is one of the evidence's (same parts), or the image needs no GPU."""
        if not self.gpu_required:
            return True
        return self.host_driver is not None and any(d.key == self.host_driver.key for d in self.drivers)

    def sentence(self) -> str:
        seen = ", ".join(map(str, self.drivers)) or "no recorded driver"
        if not self.gpu_required:
            return "needs no GPU: the driver does not matter"
        if self.covered:
            return f"evidence gathered on driver {seen}" + (" (this host's)" if self.host_driver else "")
        mine = f"this host's driver {self.host_driver}" if self.host_driver else "this host (no NVIDIA driver)"
        return f"{mine} is not among the drivers its evidence was gathered on ({seen})"


def coverage(entry: Mapping[str, Any], host: HostFingerprint, hosts: Mapping[str, HostFingerprint]) -> DriverCoverage:
    return DriverCoverage(host.driver_version, tuple(evidence_drivers(entry, hosts)),
                          bool(entry.get("gpu_required", True)))


def hosts_by_id(records: Sequence[HostFingerprint]) -> dict[str, HostFingerprint]:
    return {h.id: h for h in records}


def driver_range_problems(ranges: Sequence[str], smokes: Sequence[str], records: Sequence[SmokeRecord],
                          is_smoke: Callable[[str, SmokeRecord], bool], clean: Callable[[SmokeRecord], bool]) -> list[str]:
    """``[promotion] drivers``: for each range, each required smoke needs a clean record (``clean``) measured on a
    host whose driver is in the range; one sentence per gap, naming the drivers the smoke did run on."""
    out: list[str] = []
    for spec in ranges:
        for smoke in smokes:
            runs = [r for r in records if is_smoke(smoke, r)]
            if any(clean(r) and r.host.driver_version is not None and r.host.driver_version.matches(spec)
                   for r in runs):
                continue
            seen = sorted({str(r.host.driver_version) for r in runs if r.host.driver_version is not None})
            out.append(f"required smoke {smoke!r} has no clean run on a driver in {spec} (the promotion policy's "
                       f"drivers); it was measured on {', '.join(seen) or 'no NVIDIA driver'}")
    return out
