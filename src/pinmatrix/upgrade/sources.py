"""What the upgrade steps read from the indexes, in one place: project pages (``index.releases``) and wheel
METADATA (``index.wheel_metadata``), both cached under the project's ``paths.CACHE_DIR``; ``offline`` answers from
the caches alone, each answer carrying the date it was read."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from packaging.utils import canonicalize_name

from pinmatrix.cell import AXIS_DISTRIBUTION
from pinmatrix.index.answers import DEFAULT_TIMEOUT, BoundedHttp, IndexAnswerError
from pinmatrix.index.releases import ProjectReleases, ReleaseSource
from pinmatrix.index.wheel_index import DEFAULT_INDEX, ssl_context
from pinmatrix.index.wheel_metadata import MetadataCache, WheelMetadata, choose_wheel, fetch_metadata
from pinmatrix.matrix.compat import METADATA_DIR
from pinmatrix.paths import CACHE_DIR
from pinmatrix.project.matrix_toml import Matrix

PAGES_DIR = CACHE_DIR / "index-pages"


@dataclass
class UpgradeSources:
    """The indexes one upgrade run reads; ``now`` is the run's instant (ages and --min-age count from it)."""

    releases: ReleaseSource
    metadata: MetadataCache
    index: str = DEFAULT_INDEX
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    _pages: dict[str, ProjectReleases] = field(default_factory=dict)  # each page read once per run

    @classmethod
    def of(cls, matrix: Matrix, *, offline: bool = False, timeout: float = DEFAULT_TIMEOUT,
           now: datetime | None = None) -> UpgradeSources:
        root = Path(matrix.root)
        extra = tuple(p for p in (root / c for c in matrix.settings.ca_certificates) if p.exists())
        http = BoundedHttp(timeout=timeout, context=ssl_context(extra))
        default = next((i.url for i in matrix.settings.indexes if i.default), DEFAULT_INDEX)
        return cls(ReleaseSource(root / PAGES_DIR, http, offline=offline), MetadataCache(root / METADATA_DIR),
                   default, now or datetime.now(UTC))

    def page(self, axis: str) -> ProjectReleases:
        """The default index's page of the distribution behind ``axis`` ("flashinfer" is flashinfer-python)."""
        return self.project(distribution_of(axis))

    def project(self, name: str) -> ProjectReleases:
        if name not in self._pages:
            self._pages[name] = self.releases.releases(self.index, name, self.now)
        return self._pages[name]

    def wheel_metadata(self, name: str, version: str, arch: str, python: str) -> WheelMetadata:
        """The METADATA of a wheel of ``name`` ``version`` for ``arch``: the cache's, else read now and cached."""
        cached = self.metadata.wheel_for(name, version, arch)
        if cached is not None:
            return cached
        page = self.project(name)
        release = next((v for v in page.release_versions() if str(v) == version), None)
        wheel = choose_wheel(page.files_of(release), arch, python) if release is not None else None
        if wheel is None:
            raise IndexAnswerError(f"{name} {version}: the index serves no wheel of it for {arch}")
        if self.releases.offline:
            raise IndexAnswerError(f"offline: the metadata of {wheel.filename} is not cached")
        meta = fetch_metadata(self.releases.http, wheel, self.now)
        self.metadata.put(name, version, meta)
        return meta


def distribution_of(axis: str) -> str:
    return str(canonicalize_name(AXIS_DISTRIBUTION.get(axis, axis)))


def age_words(then: datetime, now: datetime) -> str:
    """'3 h old', '2 days old': how old a cached answer is."""
    hours = max(0.0, (now - then).total_seconds() / 3600)
    return f"{hours:.0f} h old" if hours < 48 else f"{hours / 24:.0f} days old"
