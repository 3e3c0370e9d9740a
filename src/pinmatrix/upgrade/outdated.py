"""``pinmatrix outdated``: per stack, each pinned package axis's newer releases on the index, with the date each
reached it; ``min_age`` holds back a release younger than that many days (Renovate's release-age rule). An
offline run answers from the cached pages and says how old each is."""

from __future__ import annotations

from datetime import datetime

from packaging.version import Version
from pydantic import BaseModel, ConfigDict

from pinmatrix.matrix.expand import PACKAGE_AXES
from pinmatrix.project.matrix_toml import AxisValue, Matrix, Stack
from pinmatrix.upgrade.sources import UpgradeSources, age_words, distribution_of


class NewerRelease(BaseModel):
    model_config = ConfigDict(frozen=True)

    version: str
    uploaded: datetime | None
    age_days: float | None
    held_back: bool  # younger than --min-age


class AxisOutdated(BaseModel):
    model_config = ConfigDict(frozen=True)

    stack: str
    axis: str
    distribution: str
    pinned: list[str]
    newer: list[NewerRelease]
    index: str
    read_at: datetime  # when the index page was read (an offline run: the cached page's date)
    from_cache: bool

    @property
    def newest(self) -> NewerRelease | None:
        ready = [r for r in self.newer if not r.held_back]
        return ready[-1] if ready else None


def pinned_versions(stack: Stack, axis: str) -> list[str]:
    """The versions a stack pins on ``axis``: its axis values and its include entries' ones."""
    values: list[object] = list(getattr(stack.axes, axis, None) or stack.packages.get(axis, []))
    values += [rule[axis] for rule in stack.include if axis in rule]
    out = []
    for v in values:
        version = v.version if isinstance(v, AxisValue) else v.get("version") if isinstance(v, dict) else v
        if isinstance(version, str) and version not in out:
            out.append(version)
    return sorted(out, key=Version)


def package_axes(stack: Stack) -> list[str]:
    return [a for a in PACKAGE_AXES if getattr(stack.axes, a, None)] + list(stack.packages)


def axis_outdated(sources: UpgradeSources, stack_name: str, stack: Stack, axis: str, min_age: float) -> AxisOutdated:
    pinned = pinned_versions(stack, axis)
    page = sources.page(axis)
    top = Version(pinned[-1])
    newer = []
    for version in page.release_versions():
        if version <= top or (version.is_prerelease and not top.is_prerelease):
            continue
        uploaded = page.uploaded(version)
        age = (sources.now - uploaded).total_seconds() / 86400 if uploaded is not None else None
        newer.append(NewerRelease(version=str(version), uploaded=uploaded, age_days=age,
                                  held_back=age is not None and age < min_age))
    return AxisOutdated(stack=stack_name, axis=axis, distribution=distribution_of(axis), pinned=pinned, newer=newer,
                        index=sources.index, read_at=page.fetched_at, from_cache=sources.releases.offline)


def outdated(matrix: Matrix, sources: UpgradeSources, stack: str | None = None,
             min_age: float = 0.0) -> list[AxisOutdated]:
    """Every package axis of every stack (or of ``stack``), each distribution's page read once."""
    out: list[AxisOutdated] = []
    for name, st in matrix.stacks.items():
        if stack is not None and name != stack:
            continue
        out.extend(axis_outdated(sources, name, st, axis, min_age) for axis in package_axes(st))
    return out


def outdated_lines(rows: list[AxisOutdated], now: datetime) -> list[str]:
    """The text report: a line per axis, then its newer releases with their dates (held back ones marked)."""
    lines: list[str] = []
    for row in rows:
        cached = f"; from the cache, {age_words(row.read_at, now)}" if row.from_cache else ""
        head = f"{row.stack}: {row.axis} ({row.distribution}) pinned {', '.join(row.pinned)}"
        if not row.newer:
            lines.append(f"{head}: up to date (read {row.read_at:%Y-%m-%d %H:%M}Z{cached})")
            continue
        lines.append(f"{head}: {len(row.newer)} newer (read {row.read_at:%Y-%m-%d %H:%M}Z{cached})")
        for r in row.newer:
            when = f"{r.uploaded:%Y-%m-%d}, {r.age_days:.0f} days old" if r.uploaded and r.age_days is not None \
                else "no upload date"
            lines.append(f"    {r.version:<14} {when}{'  (held back: younger than --min-age)' if r.held_back else ''}")
    return lines
