"""What would compile at first use, read from an arch scan of the cell made for this GPU; "not scanned" without
one, or when the scan judged another GPU."""

from __future__ import annotations

import json
from pathlib import Path

from pinmatrix.doctor.first_use import NOT_SCANNED, first_use

SCAN = {"schema": "pinmatrix-arch-scan/1", "cells": [{"id": "abcdefabcdef", "gpu": "sm_121", "packages": [
    {"name": "torch", "version": "2.11.0", "verdict": "partial", "binaries": [
        {"path": "torch/lib/libtorch_cuda.so", "verdict": "partial", "groups": 444,
         "counts": {"native": 400, "ptx-jit": 40, "cannot-run": 4}}]},
    {"name": "flashinfer-python", "version": "0.6.8.post1", "verdict": "no-device-code", "binaries": []},
    {"name": "six", "version": "1.17.0", "verdict": "no-device-code", "binaries": []}]}]}


def test_a_scan_for_this_gpu(tmp_path: Path) -> None:
    path = tmp_path / "arch-scan.json"
    path.write_text(json.dumps(SCAN))
    got = first_use([path], "abcdefabcdef", "12.1")
    assert got.status == "scanned"
    assert got.jit == ("torch torch/lib/libtorch_cuda.so: 40/444 kernel groups via PTX JIT",)
    assert got.cannot == ("torch torch/lib/libtorch_cuda.so: 4/444 kernel groups cannot run",)
    assert [r.split(":")[0] for r in got.runtime_compile] == ["flashinfer-python 0.6.8.post1"]


def test_no_scan_or_a_scan_for_another_gpu_is_not_scanned(tmp_path: Path) -> None:
    path = tmp_path / "arch-scan.json"
    path.write_text(json.dumps(SCAN))
    assert first_use([], "abcdefabcdef", "12.1").status == NOT_SCANNED
    assert first_use([path], "000000000000", "12.1").status == NOT_SCANNED
    other = first_use([path], "abcdefabcdef", "9.0")
    assert other.status == NOT_SCANNED and "judged sm_121, this host has 9.0" in other.words
    assert other.jit == () and other.runtime_compile == ()
