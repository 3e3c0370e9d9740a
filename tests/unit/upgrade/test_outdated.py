"""``outdated`` against a fake index: each pinned axis's newer releases with their dates, --min-age holding the
young ones back, and an offline run that answers from the cache and says how old the answer is."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from fake_index import FakeIndex, serve_index
from upgrade_matrix import head

from pinmatrix.index.answers import BoundedHttp
from pinmatrix.index.releases import ReleaseSource
from pinmatrix.index.wheel_metadata import MetadataCache
from pinmatrix.project.matrix_toml import load_matrix
from pinmatrix.upgrade.outdated import outdated, outdated_lines
from pinmatrix.upgrade.sources import UpgradeSources

NOW = datetime(2026, 12, 4, tzinfo=UTC)
MATRIX = head() + """[stacks.s]
smokes = ["host-probe"]
gpu_required = false
[stacks.s.axes]
torch = ["2.11.0"]
[stacks.s.packages]
six = ["1.16.0"]
"""
PROJECTS = {
    "torch": {"2.10.0": ("2026-01-01T00:00:00Z", []), "2.11.0": ("2026-03-01T00:00:00Z", []),
              "2.14.0": ("2026-09-02T00:00:00Z", []), "2.15.0": ("2026-11-28T00:00:00Z", []),
              "2.16.0rc1": ("2026-12-01T00:00:00Z", [])},
    "six": {"1.16.0": ("2021-05-05T00:00:00Z", [])},
}


def _sources(tmp_path: Path, url: str, *, offline: bool = False, now: datetime = NOW) -> UpgradeSources:
    return UpgradeSources(ReleaseSource(tmp_path / "pages", BoundedHttp(timeout=5), offline=offline),
                          MetadataCache(tmp_path / "meta"), url, now)


def test_newer_releases_with_their_dates_and_min_age(tmp_path: Path) -> None:
    (tmp_path / "matrix.toml").write_text(MATRIX, encoding="utf-8")
    matrix = load_matrix(tmp_path / "matrix.toml")
    with serve_index(FakeIndex(PROJECTS)) as url:
        rows = outdated(matrix, _sources(tmp_path, url), min_age=14)
    torch, six = rows
    assert [(r.version, r.held_back) for r in torch.newer] == [("2.14.0", False), ("2.15.0", True)]  # no rc
    assert torch.newest is not None and torch.newest.version == "2.14.0"
    assert torch.newer[0].uploaded == datetime(2026, 9, 2, tzinfo=UTC)
    assert six.newer == [] and six.distribution == "six"
    text = "\n".join(outdated_lines(rows, NOW))
    assert "2.15.0         2026-11-28, 6 days old  (held back: younger than --min-age)" in text


def test_offline_answers_from_the_cache_and_states_its_age(tmp_path: Path) -> None:
    (tmp_path / "matrix.toml").write_text(MATRIX, encoding="utf-8")
    matrix = load_matrix(tmp_path / "matrix.toml")
    with serve_index(FakeIndex(PROJECTS)) as url:
        outdated(matrix, _sources(tmp_path, url))
    later = NOW + timedelta(days=3)
    rows = outdated(matrix, _sources(tmp_path, url, offline=True, now=later))
    assert rows[0].from_cache and rows[0].read_at == NOW
    assert "from the cache, 3 days old" in outdated_lines(rows, later)[0]
