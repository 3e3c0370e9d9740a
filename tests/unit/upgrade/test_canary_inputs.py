"""What the canary reads of files from elsewhere: a lock's pins (its name's axes first: a patch variant's label,
then its packages' versions), an arch-scan document's targets per cell (None when it did not scan the cell; a
malformed one is one line naming the file), build times of builds that built (a cached one took none), and an
image's size in the OCI layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pinmatrix.errors import PinmatrixError
from pinmatrix.oci.compression import MEDIA_TYPES
from pinmatrix.oci.layer import LayerDescriptor
from pinmatrix.oci.layout import OCILayout
from pinmatrix.upgrade.canary_inputs import arch_coverage, image_bytes, lock_pins, read_arch_scans, read_build_records


def test_a_lock_gives_its_names_axes_and_its_packages_versions(tmp_path: Path) -> None:
    lock = tmp_path / "abcdef123456.txt"
    lock.write_text("# pinmatrix lock for cell abcdef123456: h200[xformers=0.0.35-int64,env=default]\n"
                    "torch==2.15.0 \\\n    --hash=sha256:" + "0" * 64 + "\n"
                    "xformers==0.0.35 \\\n    --hash=sha256:" + "1" * 64 + "\n", encoding="utf-8")
    name, pins = lock_pins(lock, ["torch", "xformers", "flashinfer"])
    assert name == "h200[xformers=0.0.35-int64,env=default]"
    assert pins == {"xformers": "0.0.35-int64", "env": "default", "torch": "2.15.0"}


def test_arch_coverage_is_every_sass_and_ptx_target_of_the_cell(tmp_path: Path) -> None:
    doc = {"schema": "pinmatrix-arch-scan/1", "tool": "cuobjdump", "cells": [
        {"id": "a" * 12, "name": "x", "packages": [
            {"name": "torch", "verdict": "native", "binaries": [{"path": "l.so", "sass": ["sm_90a"], "ptx": []}]},
            {"name": "xformers", "binaries": [{"sass": ["sm_80", "sm_90a"], "ptx": ["compute_90"]}]}]}]}
    path = tmp_path / "arch-scan.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    docs = read_arch_scans([path])
    assert arch_coverage(docs, "a" * 12) == frozenset({"sm_90a", "sm_80", "compute_90"})
    assert arch_coverage(docs, "b" * 12) is None  # not scanned, not "no targets"


def test_a_malformed_arch_scan_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "arch-scan.json"
    path.write_text(json.dumps({"cells": [{"id": "a", "packages": [{"binaries": [{"sass": "sm_90"}]}]}]}),
                    encoding="utf-8")
    with pytest.raises(PinmatrixError) as err:
        read_arch_scans([path])
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_build_times_are_those_of_cells_built(tmp_path: Path) -> None:
    path = tmp_path / "built.json"
    path.write_text(json.dumps({"a" * 12: {"status": "built", "seconds": 12.5},
                                "b" * 12: {"status": "cached", "seconds": 0.2},
                                "c" * 12: {"status": "failed", "seconds": 3.0}}), encoding="utf-8")
    assert read_build_records([path, tmp_path / "absent.json"]) == {"a" * 12: 12.5}


def test_an_image_size_is_its_config_and_layers_in_the_layout_or_none(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    config = layout.put_config({"architecture": "amd64", "os": "linux"})
    blob = b"x" * 1000
    layer = LayerDescriptor(layout.put_blob(blob), len(blob), "sha256:" + "0" * 64, MEDIA_TYPES["gzip"])
    layout.put_manifest("r/d:aaaaaaaaaaaa", config, [layer])
    assert image_bytes(tmp_path / "oci", "r/d:aaaaaaaaaaaa") == config["size"] + 1000
    assert image_bytes(tmp_path / "oci", "r/d:bbbbbbbbbbbb") is None  # not built
    assert image_bytes(tmp_path / "none", "r/d:aaaaaaaaaaaa") is None  # no layout
