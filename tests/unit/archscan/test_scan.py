"""pinmatrix.archscan without the CUDA toolchain: the CLI's refusal of an unknown cell, the rules from data, a
binary's targets through JSON and back, and the report carrying (or refusing) an arch scan. On real CUDA
binaries compiled by the CUDA tool wheels from the package index: tests/integration/
test_scan_toolchain_libraries.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pinmatrix.archflag import ArchFlag
from pinmatrix.archscan.binary import BinaryTargets
from pinmatrix.cli import main

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("target", "gpu", "runs"), [
    ("sm_90", (9, 0), "native"), ("sm_90", (10, 0), None), ("sm_80", (8, 6), "native"),
    ("sm_90a", (9, 0), "native"), ("sm_120a", (12, 1), None), ("sm_121a", (12, 0), None),
    ("sm_120f", (12, 1), "native"), ("sm_100f", (10, 3), "native"), ("sm_120f", (10, 0), None),
    ("compute_80", (12, 1), "jit"), ("compute_120a", (12, 1), None), ("compute_120a", (12, 0), "jit"),
    ("compute_120f", (12, 1), "jit"), ("compute_120f", (13, 0), None), ("compute_90", (8, 9), None),
])
def test_rules_from_data(target: str, gpu: tuple[int, int], runs: str | None) -> None:
    assert ArchFlag.parse_target(target).how_runs(*gpu) == runs


def test_cli_refuses_an_unknown_cell(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["arch-scan", str(ROOT / "matrix.toml"), "--cell", "000000000000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "000000000000" in err[0] and "matrix.toml" in err[0]


def test_binary_targets_round_trip() -> None:
    b = BinaryTargets("x.so", 10, [("sm_90a", "compute_90")], "cuobjdump", True, notes=["n"])
    assert BinaryTargets.from_dict(json.loads(json.dumps(b.to_dict()))) == b


def _doc() -> dict:
    pkg = {"name": "vllm", "version": "0.15.1", "wheel": "vllm.whl", "verdict": "partial", "summary": "s",
           "notes": [], "binaries": [{"path": "vllm/_C.abi3.so", "verdict": "partial", "groups": 100,
                                      "counts": {"cannot-run": 16, "native": 35}, "used": {"sm_120": 35},
                                      "cannot": {"sm_100a sm_120a": 11}, "other": {}, "sass": ["sm_120", "sm_120a"],
                                      "ptx": [], "exact": True, "tool": "cuobjdump", "notes": []}]}
    cell = {"id": "aaaaaaaaaaaa", "name": "gb10[arch=12.1a]", "stack": "gb10", "gpu": "sm_121", "arch_flags": ["12.1a"],
            "platform": "aarch64-manylinux_2_31", "python": "3.13", "source": "resolved", "notes": [],
            "arch_flag_checks": [{"flag": "12.1a", "target": "sm_121a", "honoured_by": [], "unknown": [], "ok": False,
                                  "message": "no binary in this cell honours 12.1a"}],
            "known_issues": [{"known_issue": "nvfp4-built-for-120f-on-sm121", "status": "flagged", "message": "m",
                              "evidence": ["e"], "native_target_present": False, "source": "s"}],
            "packages": [pkg]}
    return {"schema": "pinmatrix-arch-scan/1", "generated_at": "2026-11-30T00:00:00Z", "tool": "cuobjdump",
            "command": "pinmatrix arch-scan", "rules": "src/pinmatrix/data/arch_rules.toml", "cells": [cell]}


def test_report_shows_and_carries_the_arch_scan(tmp_path: Path) -> None:
    from pinmatrix.report.archscan import arch_scan_tables
    from pinmatrix.report.model import build_report
    from pinmatrix.report.write import render

    report = build_report([], [])
    report.arch_scan = arch_scan_tables([_doc()])
    data = json.loads(render(report, "json"))
    (table,) = data["arch_scan"]
    assert table["stack"] == "gb10" and table["packages"] == ["vllm"]
    assert table["rows"][0]["verdicts"] == {"vllm": "partial 16/100"}
    assert "nvfp4-built-for-120f-on-sm121: flagged" in table["rows"][0]["findings"]
    md = render(report, "md")
    assert "| `aaaaaaaaaaaa` | 12.1a | 🟠 partial 16/100 |" in md
    html = render(report, "html")
    assert 'id="arch-scan"' in html and "partial 16/100" in html and "arch 12.1a: honoured by no binary" in html
    (tmp_path / "scan.json").write_text(json.dumps(_doc()))
    out = tmp_path / "report"
    assert main(["report", str(ROOT / "matrix.toml"), "--results", str(tmp_path / "none.sqlite"), "--out", str(out),
                 "--format", "json", "--arch-scan", str(tmp_path / "scan.json")]) == 0
    assert json.loads((out / "report.json").read_text())["arch_scan"][0]["rows"][0]["id"] == "aaaaaaaaaaaa"


def test_report_refuses_a_file_that_is_not_an_arch_scan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "something-else"}')
    assert main(["report", str(ROOT / "matrix.toml"), "--results", str(tmp_path / "none.sqlite"),
                 "--out", str(tmp_path / "r"), "--arch-scan", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.json" in err[0] and "pinmatrix-arch-scan/1" in err[0]
