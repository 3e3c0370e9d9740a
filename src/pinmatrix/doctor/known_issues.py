"""The matrix's known issues that match a host: each ``[[known_issues]]`` condition (``when``) read against what
the host decides (``driver``: its driver version or range; ``gpu``: its compute capability or product name;
a package axis: the version installed in this Python) and, with ``--cell``, against the cell for the rest
(``arch``, ``cuda``, ``env``, a package the host lacks, ``without_patches``).

An issue *hits* when every condition holds; it is *conditional* when what the host decides holds and the rest is
the cell's to decide (without ``--cell``: "for cells with arch=12.0f"); it is left out when the host rules it out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from pinmatrix.cell import AXIS_DISTRIBUTION, NON_PACKAGE_AXES, Cell
from pinmatrix.hostprobe import DriverVersionError, GpuProbe
from pinmatrix.project.matrix_toml import KnownIssueSpec
from pinmatrix.release.hostmatch import host_matches_gpu

HITS = "hits"
CONDITIONAL = "conditional"


def installed_packages() -> dict[str, str]:
    """Canonical distribution name -> version, of the Python running pinmatrix (its sys.path)."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if name:
            found.setdefault(canonicalize_name(str(name)), str(dist.version))
    return found


def version_in(value: str, want: str) -> bool:
    """``value`` is ``want`` (as text, or as a version: an installed ``2.11.0+cu130`` is ``2.11.0``), or in it when
    ``want`` is a PEP 440 specifier set (as matrix.toml writes)."""
    if value == want:
        return True
    spec = want if want[:1] in "<>=!~" else f"=={want}"
    try:
        return SpecifierSet(spec).contains(Version(value), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return False


@dataclass(frozen=True)
class IssueMatch:
    """One known issue that concerns this host: why it matches, and what is left for a cell to decide."""

    id: str
    verdict: str  # HITS or CONDITIONAL
    smokes: tuple[str, ...]
    expect: str
    note: str
    source: str
    matched: tuple[str, ...] = ()  # 'driver 590.48.01 is 590.48.01'
    unless: tuple[str, ...] = field(default_factory=tuple)  # cell-side conditions: 'arch=12.0f'

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "verdict": self.verdict, "smokes": list(self.smokes), "expect": self.expect,
                "note": self.note, "source": self.source, "matched": list(self.matched),
                "cells_with": list(self.unless)}


def _host_condition(axis: str, want: str, gpus: GpuProbe, packages: Mapping[str, str]) -> tuple[bool | None, str]:
    """(holds, words): None when the host does not decide ``axis``."""
    if axis == "driver":
        driver = gpus.driver
        if driver is None:
            return False, "no NVIDIA driver"
        try:
            return driver.matches(want), f"driver {driver} is {want}"
        except DriverVersionError:
            return False, f"driver condition {want!r} is no driver version or range"
    if axis == "gpu":
        caps = gpus.capabilities or [""]
        names = " + ".join(g.name for g in gpus.gpus)
        hit = any(host_matches_gpu(want, cap, names) for cap in caps)
        return hit, f"GPU {', '.join(g.arch or g.name for g in gpus.gpus) or 'none'} is {want}"
    if axis in NON_PACKAGE_AXES:
        return None, ""
    name = canonicalize_name(AXIS_DISTRIBUTION.get(axis, axis))
    if name not in packages:
        return None, ""
    return version_in(packages[name], want), f"installed {name} {packages[name]} is {want}"


def match_issue(spec: KnownIssueSpec, gpus: GpuProbe, packages: Mapping[str, str],
                cell: Cell | None = None) -> IssueMatch | None:
    """The issue as it concerns this host (and ``cell``), or None when something rules it out."""
    matched: list[str] = []
    left: list[str] = []
    for axis, want in spec.when.items():
        holds, words = _host_condition(axis, want, gpus, packages if cell is None else {})
        if holds is None and cell is not None:
            pin = cell.pins.get(axis)
            holds, words = (pin is not None and version_in(pin, want)), f"cell's {axis} {pin} is {want}"
        if holds is False:
            return None
        if holds:
            matched.append(words)
        else:
            left.append(f"{axis} {want}" if want[:1] in "<>=!~" else f"{axis}={want}")
    if cell is not None:
        applied = {p.id for p in cell.patches if p.status == "apply"}
        if any(p in applied for p in spec.without_patches):
            return None
    else:
        left += [f"without patch {p}" for p in spec.without_patches]
    return IssueMatch(spec.id, CONDITIONAL if left else HITS, tuple(spec.smokes), spec.expect, spec.note,
                      spec.source, tuple(matched), tuple(left))


def host_issues(specs: list[KnownIssueSpec], gpus: GpuProbe, packages: Mapping[str, str],
                cell: Cell | None = None) -> list[IssueMatch]:
    """The issues that hit this host first, then those a cell's choices decide; the rest left out."""
    found = [m for m in (match_issue(s, gpus, packages, cell) for s in specs) if m is not None]
    return sorted(found, key=lambda m: (m.verdict != HITS, m.id))
