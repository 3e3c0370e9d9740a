"""A wheel's METADATA read without the wheel: PEP 658 files whose sha256 must be the page's (a lie is refused),
else byte ranges of the wheel (a fraction of its bytes); bounded; cached per (name, version) and read per arch;
Requires-Dist markers evaluated for the cell's platform."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from fake_index import FakeIndex, serve_index
from packaging.version import Version

import pinmatrix.index.wheel_metadata as wm
from pinmatrix.index.answers import BoundedHttp, IndexAnswerError
from pinmatrix.index.releases import ReleaseSource
from pinmatrix.index.wheel_metadata import MetadataCache, WheelMetadata, fetch_metadata, requirement_pins

NOW = datetime(2026, 12, 4, tzinfo=UTC)
VLLM = {"vllm": {"0.34.0": ("2026-11-16T23:51:23Z", ["torch==2.14.0", "flashinfer-python==0.7.3",
                                                      "xgrammar>=0.1; extra == 'tpu'"])}}


def _read(index: FakeIndex, tmp_path: Path) -> WheelMetadata:
    with serve_index(index) as url:
        page = ReleaseSource(tmp_path, BoundedHttp(timeout=5)).releases(url, "vllm")
        return fetch_metadata(BoundedHttp(timeout=5), page.files_of(Version("0.34.0"))[0], NOW)


def test_pep658_metadata_is_read_and_checked(tmp_path: Path) -> None:
    meta = _read(FakeIndex(VLLM, pep658=True), tmp_path)
    assert meta.via == "pep658"
    assert requirement_pins(meta, "3.13", "x86_64") == {"torch": "==2.14.0", "flashinfer-python": "==0.7.3"}


def test_pep658_metadata_whose_hash_lies_is_refused(tmp_path: Path) -> None:
    with pytest.raises(IndexAnswerError, match=r"\.metadata: sha256 .* is not the .* its index page declares"):
        _read(FakeIndex(VLLM, pep658=True, lie=True), tmp_path)


def test_without_pep658_byte_ranges_fetch_a_fraction_of_the_wheel(tmp_path: Path) -> None:
    index = FakeIndex(VLLM, padding=4 << 20)
    meta = _read(index, tmp_path)
    assert meta.via == "range" and "torch==2.14.0" in meta.requires_dist
    wheel = index.files[index.filename("vllm", "0.34.0")]
    assert index.served_bytes < len(wheel) // 8


def test_a_metadata_member_over_the_bound_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wm, "MAX_METADATA", 64)
    with pytest.raises(IndexAnswerError, match="METADATA is .* bytes, more than 64"):
        _read(FakeIndex(VLLM), tmp_path)


def test_range_reads_stop_at_their_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wm, "MAX_RANGE_BYTES", 1000)
    with pytest.raises(IndexAnswerError, match="larger than"):
        _read(FakeIndex(VLLM, padding=1 << 20), tmp_path)


def test_the_cache_is_per_name_and_version_and_answers_per_arch(tmp_path: Path) -> None:
    cache = MetadataCache(tmp_path)
    x86 = WheelMetadata(filename="torch-2.15.0-cp313-cp313-manylinux_2_28_x86_64.whl", via="range", fetched_at=NOW,
                        requires_dist=["cuda-toolkit==13.2.2; platform_machine == 'x86_64'", "triton~=3.9.0"])
    arm = WheelMetadata(filename="torch-2.15.0-cp313-cp313-manylinux_2_28_aarch64.whl", via="range", fetched_at=NOW,
                        requires_dist=["triton~=3.9.0"])
    cache.put("torch", "2.15.0", x86)
    cache.put("Torch", "2.15.0", arm)
    assert cache.versions("torch") == ["2.15.0"]
    assert cache.wheel_for("torch", "2.15.0", "aarch64") == arm
    assert requirement_pins(cache.wheel_for("torch", "2.15.0", "x86_64"), "3.13", "x86_64") == {  # type: ignore[arg-type]
        "cuda-toolkit": "==13.2.2", "triton": "~=3.9.0"}
    assert cache.wheel_for("torch", "2.14.0", "x86_64") is None
