"""A known issue's exclude-newer date resolves as the package index stood then (uv against the index)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import make_cell
from pinmatrix.lock.resolve import lock_cell


@pytest.mark.network
def test_exclude_newer_resolves_as_the_index_stood(tmp_path: Path) -> None:
    """six 1.17.0 came out in December 2024: a lock as of June 2024 must pick 1.16.0, one as of 2026 1.17.0."""
    cell = make_cell("t", ("six",))
    old = lock_cell(cell, tmp_path / "old", "2024-06-01T00:00:00Z")
    new = lock_cell(cell, tmp_path / "new", "2026-01-01T00:00:00Z")
    assert old.ok and new.ok, (old.reason, new.reason)
    assert "six==1.16.0" in old.path.read_text() and "six==1.17.0" in new.path.read_text()
    assert "--hash=sha256:" in old.path.read_text()
