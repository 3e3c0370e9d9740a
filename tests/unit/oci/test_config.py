"""pinmatrix.oci.config: an image config document made from data alone (no cell): architecture and variant
from the platform, the creation time from the epoch, the base's environment overridden entry by entry, labels
sorted, one history entry per layer; its canonical bytes pinned (image digests depend on them)."""

from __future__ import annotations

import pytest

from pinmatrix.oci.config import DEFAULT_PATH, image_config, iso_time, oci_arch
from pinmatrix.oci.layout import canonical_json


@pytest.mark.parametrize(("platform", "arch"), [
    ("x86_64-manylinux_2_28", ("amd64", None)),
    ("aarch64-manylinux_2_28", ("arm64", "v8")),
    ("riscv64-manylinux_2_39", ("riscv64", None)),
])
def test_the_architecture_is_the_platforms_machine(platform: str, arch: tuple[str, str | None]) -> None:
    assert oci_arch(platform) == arch


def test_times_are_utc_seconds() -> None:
    assert iso_time(0) == "1970-01-01T00:00:00Z"
    assert iso_time(1_735_689_600) == "2025-01-01T00:00:00Z"


def test_the_config_document_and_its_bytes() -> None:
    config = image_config(platform="aarch64-manylinux_2_28", env={"PATH": "/opt/venv/bin", "A": "1"},
                          labels={"z": "last", "a": "first"}, diff_ids=["sha256:" + "1" * 64], history=["base x"],
                          epoch=0, cmd=("/opt/venv/bin/python",), base_env=[f"PATH={DEFAULT_PATH}", "LANG=C.UTF-8"])
    assert config["config"]["Env"] == ["PATH=/opt/venv/bin", "LANG=C.UTF-8", "A=1"]  # the base's order, then new
    assert list(config["config"]["Labels"]) == ["a", "z"]
    assert canonical_json(config) == (
        b'{"architecture":"arm64","config":{"Cmd":["/opt/venv/bin/python"],"Env":["PATH=/opt/venv/bin",'
        b'"LANG=C.UTF-8","A=1"],"Labels":{"a":"first","z":"last"},"WorkingDir":"/"},"created":"1970-01-01T00:00:00Z",'
        b'"history":[{"created":"1970-01-01T00:00:00Z","created_by":"pinmatrix: base x"}],"os":"linux",'
        b'"rootfs":{"diff_ids":["sha256:' + b"1" * 64 + b'"],"type":"layers"},"variant":"v8"}')
    assert "variant" not in image_config(platform="x86_64-manylinux_2_28", env={}, labels={}, diff_ids=(),
                                         history=(), epoch=0, cmd=())
