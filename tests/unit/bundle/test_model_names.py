"""The bundle manifest's own rules: safe names and what a bundle ships (mutation gaps of bundle/model.py)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from pinmatrix.bundle.model import BundleManifest, WheelItem

H = "a" * 64
D = "sha256:" + "b" * 64


def wheel(filename: str = "demo-1.0-py3-none-any.whl") -> dict[str, Any]:
    return {"name": "demo", "version": "1.0", "filename": filename, "size": 3, "sha256": H, "offset": 0}


def part(size: int) -> dict[str, Any]:
    return {"name": "part-001-of-001.bin", "size": size, "sha256": H}


@pytest.mark.parametrize("name", ["a..b", "demo-1.0..whl"])
def test_a_name_with_dot_dot_is_refused_and_named(name: str) -> None:
    with pytest.raises(ValidationError) as info:
        WheelItem.model_validate({**wheel(), "filename": name})
    assert f"{name!r} is not a safe file name" in str(info.value)


def test_a_name_with_single_dots_is_a_safe_name() -> None:
    assert WheelItem.model_validate(wheel("demo-1.0.post1-py3-none-any.whl")).filename == \
        "demo-1.0.post1-py3-none-any.whl"


def test_a_wheels_bundle_ships_its_wheel_files() -> None:
    manifest = BundleManifest.model_validate({
        "kind": "wheels", "pinmatrix_version": "1.0", "lock_sha256": H, "wheels": [wheel()],
        "part_size": 4096, "total_size": 3, "parts": [part(3)]})
    assert manifest.shipped_names() == ["demo-1.0-py3-none-any.whl"]


def test_an_image_bundle_ships_the_blobs_it_carries_not_those_the_host_has() -> None:
    other = "sha256:" + "c" * 64
    manifest = BundleManifest.model_validate({
        "kind": "image", "pinmatrix_version": "1.0",
        "image": {"digest": D, "media_type": "application/vnd.oci.image.manifest.v1+json", "size": 5},
        "blobs": [{"digest": D, "media_type": "application/octet-stream", "size": 5, "offset": 0},
                  {"digest": other, "media_type": "application/octet-stream", "size": 7}],
        "part_size": 4096, "total_size": 5, "parts": [part(5)]})
    assert manifest.shipped_names() == [D]
