"""Which promoted images (known-good.toml, the newest promotion of each cell) fit this host, as ``pull`` judges
them, and on which drivers their evidence was gathered (``release.driver_evidence``: the results store's host
records, else the evidence's host labels). Reads files only: no registry, no network."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pinmatrix.hostprobe import HostFingerprint
from pinmatrix.project.known_good import read_known_good
from pinmatrix.release.driver_evidence import DriverCoverage, coverage, hosts_by_id
from pinmatrix.release.hostmatch import judge
from pinmatrix.results.store import ResultsStore


@dataclass(frozen=True)
class ImageFit:
    cell_id: str
    name: str
    stack: str
    digest: str
    promoted_at: str
    fits: bool
    reasons: tuple[str, ...]
    drivers: DriverCoverage

    def to_dict(self) -> dict[str, Any]:
        return {"cell": self.cell_id, "name": self.name, "stack": self.stack, "digest": self.digest,
                "promoted_at": self.promoted_at, "fits": self.fits, "reasons": list(self.reasons),
                "evidence_drivers": [str(d) for d in self.drivers.drivers],
                "driver_covered": self.drivers.covered, "driver_words": self.drivers.sentence()}


def recorded_hosts(results: Path) -> dict[str, HostFingerprint]:
    """The results store's host records by id; none when there is no store (nothing is created)."""
    if not results.is_file():
        return {}
    return hosts_by_id(ResultsStore(results).hosts())


def promoted_images(known_good: Path, results: Path, host: HostFingerprint) -> list[ImageFit]:
    """Newest promotion first, one per cell; [] when there is no known-good.toml."""
    entries = read_known_good(known_good)
    hosts = recorded_hosts(results) if entries else {}
    out = []
    for verdict in judge(entries, host, hosts=hosts):
        e = verdict.entry
        out.append(ImageFit(str(e["cell_id"]), str(e.get("cell_name") or ""), str(e["stack"]), str(e["digest"]),
                            str(e["promoted_at"]), verdict.ok, tuple(verdict.reasons), coverage(e, host, hosts)))
    return out
