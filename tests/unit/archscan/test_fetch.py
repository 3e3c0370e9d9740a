"""archscan/fetch: one wheel cache. A wheel arch-scan has to download (pip, hash-checked, here from a local
folder of links) goes into the build's wheel cache, in the folder of its locked hash, where `pinmatrix build`
reads it; the next scan takes it from there without pip; no second, arch-scan-only wheel folder is made."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from archscan_render_wheels import wheel_of

from pinmatrix.archscan.fetch import CellPins, Pin, fetch_wheels


def test_a_downloaded_wheel_goes_into_the_builds_cache_and_is_read_from_it_next_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    links = tmp_path / "links"
    links.mkdir()
    wheel = wheel_of(links, "tinypkg", {"tinypkg/__init__.py": b"x = 1\n"})
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    pins = CellPins("lock", "aarch64-manylinux_2_28", "3.12", [Pin("tinypkg", "1.0", (digest,))])
    build_cache, scan_cache = tmp_path / "build-cache", tmp_path / "scan-cache"
    (got,) = fetch_wheels(pins, scan_cache, build_cache=build_cache)
    assert got.path == build_cache / "wheels" / digest[:2] / digest / wheel.name and got.sha256 == digest
    assert [p.name for p in build_cache.rglob("*.whl")] == [wheel.name]  # no download folder left behind
    assert not list(scan_cache.rglob("*.whl"))  # no second wheel cache
    monkeypatch.delenv("PIP_FIND_LINKS")
    wheel.unlink()  # pip could not download it again
    lines: list[str] = []
    (again,) = fetch_wheels(pins, scan_cache, log=lines.append, build_cache=build_cache)
    assert again.path == got.path and lines == [f"1 wheel(s) from the wheel cache {build_cache / 'wheels'}"]
