"""The core commands on the shipped matrix: validate, cells (ids stable across runs and machines), pruning."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pinmatrix.cli import main
from pinmatrix.matrix.compat import ArchFlag, CompatRules
from pinmatrix.matrix.keyword import KeywordError, compile_keyword

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "matrix.toml"


def cells_json(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> dict:
    proc = subprocess.run([sys.executable, "-m", "pinmatrix.cli", "cells", "--json", *args],
                          capture_output=True, text=True, cwd=cwd, env=env, check=True)
    return json.loads(proc.stdout)


def test_shipped_matrix_validates(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(MATRIX)]) == 0
    assert "ok" in capsys.readouterr().out


def test_every_stack_has_cells_and_ids_are_stable_across_runs_and_machines(tmp_path: Path) -> None:
    first = cells_json(str(MATRIX))
    # Another checkout location, another locale and hash seed: a different "machine" as far as ids go.
    copy = tmp_path / "elsewhere"
    shutil.copytree(ROOT / "patches", copy / "patches")
    shutil.copy(MATRIX, copy / "matrix.toml")
    env = {**os.environ, "PYTHONHASHSEED": "12345", "LC_ALL": "C", "TZ": "Asia/Tokyo"}
    second = cells_json("matrix.toml", cwd=copy, env=env)
    assert [c["id"] for c in first["cells"]] == [c["id"] for c in second["cells"]]
    stacks = {c["stack"] for c in first["cells"]}
    assert stacks == {"demo", "xformers-tiled-matmul", "gb10-nvfp4", "h200", "h200-vllm"}
    assert len({c["id"] for c in first["cells"]}) == len(first["cells"])
    # pruned combinations come with the rule's words
    assert first["pruned"] and all(p["reasons"] for p in first["pruned"])


def test_reported_stack_a_environment_is_pruned_with_reasons() -> None:
    data = cells_json(str(MATRIX), "--stack", "xformers-tiled-matmul")
    reported = [p for p in data["pruned"] if p["pins"]["triton"] == "3.2.0"]
    assert len(reported) == 1
    reasons = " ".join(reported[0]["reasons"])
    assert "torch 2.7.0 pins triton==3.3.0, not 3.2.0" in reasons
    assert "torch 2.7.0 has no CUDA 12.9 build" in reasons


def test_stack_b_cells_carry_known_issues_patches_and_arch_lists() -> None:
    data = cells_json(str(MATRIX), "--stack", "gb10-nvfp4", "-k", "595.58.03 and 12.1a and fp8-moe and not src")
    # the seed's cell (vllm 0.15.1 wheel on torch 2.9.1) and its PyPI twin (vllm 0.20.0 on torch 2.11.0)
    assert sorted(c["pins"]["vllm"] for c in data["cells"]) == ["0.15.1", "0.20.0"]
    for cell in data["cells"]:
        assert cell["torch_cuda_arch_list"] == "12.1a"
        assert cell["flashinfer_cuda_arch_list"] == "12.1a"
        assert cell["env"] == {"VLLM_USE_FLASHINFER_MOE_FP4": "0", "VLLM_USE_FLASHINFER_MOE_FP8": "1"}
        assert [k["id"] for k in cell["known_issues"]] == ["driver-595.58.03-nvfp4-cutensormap"]
        assert {p["status"] for p in cell["patches"]} == {"already-upstream"}
        assert all("already upstream" in p["note"] for p in cell["patches"])
        assert cell["min_driver"] == "580.65.06"
    # the wheel of vllm 0.15.1 pins torch 2.9.1: with torch 2.10 only the source build survives
    wheel_on_210 = [p for p in data["pruned"] if p["pins"]["torch"] == "2.10.0"]
    assert all("vllm 0.15.1 pins torch==2.9.1" in p["reasons"][0] for p in wheel_on_210)


def test_cells_unknown_stack_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cells", str(MATRIX), "--stack", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown stack 'nope'" in err


def test_cells_table_and_pruned_listing(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["cells", str(MATRIX), "--stack", "xformers-tiled-matmul", "--pruned"]) == 0
    out = capsys.readouterr().out
    assert "xformers=0.0.35-int64]" in out
    assert "xformers-tiled-matmul-int64 (apply)" in out
    assert "pruned combinations:" in out
    assert "- xformers 0.0.30 pins torch==2.7.0, not 2.11.0" in out


@pytest.mark.parametrize(("driver", "cuda", "gpu", "pruned", "noted"), [
    ("580.159.04", "13.0", "sm_90", False, False),
    ("575.51.03", "13.0", "sm_121", True, False),   # too old, not a datacenter GPU: pruned
    ("575.51.03", "13.0", "sm_90", False, True),    # datacenter GPU: forward compat noted
    ("580.65.06", "13.0", "sm_121", False, False),  # exactly the minimum
])
def test_driver_cuda_rule(driver: str, cuda: str, gpu: str, pruned: bool, noted: bool) -> None:
    v = CompatRules.default().driver_cuda(driver, cuda, gpu)
    assert bool(v.prune) is pruned and bool(v.notes) is noted


@pytest.mark.parametrize(("flag", "cap", "runs"), [
    ("12.1a", (12, 1), True), ("12.0a", (12, 1), False), ("12.0f", (12, 1), True), ("12.0f", (10, 0), False),
    ("9.0a", (9, 0), True), ("9.0a", (12, 1), False), ("8.0", (8, 6), True), ("8.0+PTX", (12, 1), True),
    ("9.0", (10, 0), False),
])
def test_arch_flag_coverage(flag: str, cap: tuple[int, int], runs: bool) -> None:
    assert ArchFlag.parse(flag).runs_on(*cap) is runs


def test_arch_needs_cuda() -> None:
    rules = CompatRules.default()
    assert rules.arch_flags(("12.1a",), "12.8", "sm_121").prune
    assert not rules.arch_flags(("12.1a",), "12.9", "sm_121").prune
    assert rules.arch_flags(("12.0f",), "12.8", "sm_121").prune  # family targets need CUDA 12.9
    assert rules.arch_flags(("9.0a",), "13.0", "sm_121").prune  # builds nothing that runs on sm_121


@pytest.mark.parametrize(("expr", "text", "hit"), [
    ("xformers and not int64", "h200[xformers=0.0.35]", True),
    ("xformers and not int64", "h200[xformers=0.0.35-int64]", False),
    ("(demo or h200) and six", "demo[six=1.16.0]", True),
    ("not (a or b)", "c", True),
])
def test_keyword(expr: str, text: str, hit: bool) -> None:
    assert compile_keyword(expr)(text) is hit


@pytest.mark.parametrize("expr", ["", "a and", "(a", "a b", "or a"])
def test_keyword_errors(expr: str) -> None:
    with pytest.raises(KeywordError):
        compile_keyword(expr)(expr)


def test_help_explains_every_command() -> None:
    proc = subprocess.run([sys.executable, "-m", "pinmatrix.cli", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    for cmd in ("validate", "cells", "lock"):
        assert cmd in proc.stdout


def test_a_stack_can_replace_the_base(tmp_path: Path) -> None:
    from pinmatrix.matrix.selection import expand_matrix
    from pinmatrix.project.matrix_toml import load_matrix

    digest = "b" * 64
    (tmp_path / "m.toml").write_text(f"""\
[matrix]
python = "3.13"
[stacks.a]
gpu_required = false
[stacks.a.packages]
six = ["1.16.0"]
[stacks.b]
gpu_required = false
python = "3.12"
[stacks.b.base]
kind = "image"
image = "registry.example/python@sha256:{digest}"
[stacks.b.packages]
six = ["1.16.0"]
""")
    cells = {c.stack: c for c in expand_matrix(load_matrix(tmp_path / "m.toml")).cells}
    assert cells["a"].base.kind == "mmdebstrap" and cells["a"].base.suite == "trixie"
    assert cells["b"].base.kind == "image" and cells["b"].base.image.endswith(digest)
    assert cells["a"].id != cells["b"].id
