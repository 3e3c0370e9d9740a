"""Packing: the bound on parts, and publishing: the manifest's written form and bound, replacing an earlier bundle, and the staging
folder (mutation gaps of bundle/pack.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pinmatrix.bundle import pack
from pinmatrix.bundle.model import MANIFEST_NAME, SCRIPT_NAME, BundleManifest
from pinmatrix.bundle.pack import BundleError, publish, staging_folder

H = "a" * 64


def manifest() -> BundleManifest:
    return BundleManifest.model_validate({
        "kind": "wheels", "pinmatrix_version": "1.0", "lock_sha256": H,
        "wheels": [{"name": "demo", "version": "1.0", "filename": "demo-1.0-py3-none-any.whl", "size": 3,
                    "sha256": H, "offset": 0}],
        "part_size": 4096, "total_size": 3, "parts": [{"name": "part-001-of-001.bin", "size": 3, "sha256": H}]})


def parts_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "staging"
    folder.mkdir(parents=True)
    (folder / "part-001-of-001.bin").write_bytes(b"abc")
    return folder


def test_the_manifest_is_written_indented_by_one_without_absent_fields(tmp_path: Path) -> None:
    out = tmp_path / "out"
    publish(manifest(), parts_folder(tmp_path), out, {"lock.txt": b"demo==1.0\n"})
    text = (out / MANIFEST_NAME).read_text()
    assert text == manifest().model_dump_json(indent=1, exclude_none=True) + "\n"
    assert text.startswith('{\n "format": "pinmatrix-bundle",\n') and "null" not in text
    assert (out / "lock.txt").read_bytes() == b"demo==1.0\n" and (out / SCRIPT_NAME).is_file()


def test_a_manifest_at_the_bound_is_written_and_one_byte_over_is_refused(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    size = len(manifest().model_dump_json(indent=1, exclude_none=True)) + 1
    monkeypatch.setattr(pack, "MAX_MANIFEST_BYTES", size)
    publish(manifest(), parts_folder(tmp_path), tmp_path / "out", {})
    monkeypatch.setattr(pack, "MAX_MANIFEST_BYTES", size - 1)
    with pytest.raises(BundleError) as info:
        publish(manifest(), parts_folder(tmp_path / "again"), tmp_path / "out2", {})
    assert str(info.value) == f"{tmp_path / 'out2'}: the manifest would be {size} bytes (at most {size - 1})"


def test_an_earlier_bundle_is_replaced_and_its_old_folder_removed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST_NAME).write_text("{}")
    (out / "part-009-of-009.bin").write_bytes(b"old")
    publish(manifest(), parts_folder(tmp_path), out, {})
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST_NAME, "part-001-of-001.bin", SCRIPT_NAME]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_folder_that_is_no_bundle_is_not_replaced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(BundleError, match="exists and is not a bundle folder"):
        publish(manifest(), parts_folder(tmp_path), out, {})
    assert (out / "notes.txt").read_text() == "mine"


def test_the_staging_folder_is_fresh_and_its_parents_are_made(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "out"
    stale = out.with_name(f".out.bundle-{os.getpid()}")
    stale.mkdir(parents=True)
    (stale / "part-001-of-002.bin").write_bytes(b"stale")
    assert staging_folder(out) == stale and list(stale.iterdir()) == []
    deeper = tmp_path / "c" / "d" / "out"
    assert staging_folder(deeper).is_dir()


def test_as_many_parts_as_the_bound_are_written_and_one_more_is_refused_before_any(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "file"
    source.write_bytes(b"abcde")
    monkeypatch.setattr(pack, "MAX_PARTS", 5)
    (tmp_path / "five").mkdir()
    assert len(pack.write_parts([source], 1, tmp_path / "five", lambda _: None)) == 5
    monkeypatch.setattr(pack, "MAX_PARTS", 4)
    (tmp_path / "four").mkdir()
    with pytest.raises(BundleError) as info:
        pack.write_parts([source], 1, tmp_path / "four", lambda _: None)
    assert str(info.value) == "5 bytes in parts of 1 would be 5 parts (at most 4)"
    assert list((tmp_path / "four").iterdir()) == []
