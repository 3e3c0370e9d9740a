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


@pytest.mark.parametrize(("filename", "platform", "python", "fits"), [
    ("xformers-0.0.35-py39-none-manylinux_2_28_x86_64.whl", "x86_64-manylinux_2_28", "3.13", True),
    ("triton-3.9.0-cp312-abi3-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", "x86_64-manylinux_2_28", "3.13", True),
    ("six-1.17.0-py2.py3-none-any.whl", "aarch64-manylinux_2_35", "3.13", True),
    ("torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl", "x86_64-manylinux_2_28", "3.13", False),
    ("x-1-cp313-cp313-manylinux_2_35_x86_64.whl", "x86_64-manylinux_2_28", "3.13", False),
    ("x-1-cp313-cp313-manylinux_2_28_aarch64.whl", "x86_64-manylinux_2_28", "3.13", False),
    ("x-1-py314-none-any.whl", "x86_64-manylinux_2_28", "3.13", False),
])
def test_a_cached_wheel_fits_the_cell_by_the_tags_pip_accepts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             filename: str, platform: str, python: str,
                                                             fits: bool) -> None:
    """xFormers 0.0.35's wheel is tagged py39-none-manylinux_2_28_x86_64: pip installs it on CPython 3.13, and the
    build took it, but arch-scan once called it missing ('no wheel of xformers 0.0.35 ... python 3.13')."""
    name, version = filename.split("-")[:2]
    body = b"not a zip: only its name and hash are read here"
    digest = hashlib.sha256(body).hexdigest()
    folder = tmp_path / "build-cache" / "wheels" / digest[:2] / digest
    folder.mkdir(parents=True)
    (folder / filename).write_bytes(body)
    pins = CellPins("lock", platform, python, [Pin(name, version, (digest,))])
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # a miss asks pip, which finds nothing here
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-links"))
    (got,) = fetch_wheels(pins, tmp_path / "scan-cache", build_cache=tmp_path / "build-cache")
    assert (got.path == folder / filename) is fits
