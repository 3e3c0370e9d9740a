"""``pinmatrix ci canary``: the scheduled canary workflow has one job per stack on the runner its cells need (the
GPU stack's self-hosted labels, the CPU stack's --cpu-runner), hands the stack to the shell through env: only,
passes actionlint and zizmor as the example workflow does, and refuses a schedule that is not five cron fields."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pinmatrix.cli import main

ROOT = Path(__file__).resolve().parents[3]


def _emit(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "canary.yml"
    assert main(["ci", "canary", str(ROOT / "matrix.toml"), "-o", str(out), *args]) == 0
    return {"path": out, "doc": yaml.safe_load(out.read_text(encoding="utf-8"))}


def _tool(name: str) -> str:
    here = Path(sys.executable).parent / name
    found = str(here) if here.is_file() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: ./dev installs it from requirements/dev.lock")
    return found


def test_one_job_per_stack_on_the_runner_its_cells_need(tmp_path: Path) -> None:
    doc = _emit(tmp_path, "--stack", "demo", "--stack", "h200", "--cpu-runner", "cpu-box", "--limit", "2")["doc"]
    job = doc["jobs"]["canary"]
    include = {e["stack"]: e["runs-on"] for e in job["strategy"]["matrix"]["include"]}
    assert include["demo"] == ["cpu-box"]
    assert include["h200"][:3] == ["self-hosted", "linux", "x64"] and "gpu-sm_90" in include["h200"]
    assert doc["on"]["schedule"] == [{"cron": "17 4 * * 1"}] and doc["permissions"] == {"contents": "read"}
    [canary] = [s for s in job["steps"] if "nox -s canary" in s.get("run", "")]
    assert canary["env"] == {"STACK": "${{ matrix.stack }}", "LIMIT": "2"}
    assert all("${{" not in s.get("run", "") for s in job["steps"])


def test_the_workflow_passes_actionlint_and_zizmor(tmp_path: Path) -> None:
    path = _emit(tmp_path)["path"]
    lint = subprocess.run([_tool("actionlint"), "-no-color", "-config-file",
                           str(ROOT / "docs" / "workflows" / "actionlint.yaml"), str(path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    audit = subprocess.run([_tool("zizmor"), "--offline", "--no-progress", "--format", "plain", str(path)],
                           capture_output=True, text=True, timeout=120, check=False)
    assert audit.returncode == 0 and "No findings" in audit.stdout + audit.stderr, audit.stdout + audit.stderr


@pytest.mark.parametrize("cron", ["17 4 * *", "17 4 * * 1; rm -rf /", "@weekly"])
def test_a_schedule_that_is_not_five_cron_fields_is_one_line(tmp_path: Path, cron: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ci", "canary", str(ROOT / "matrix.toml"), "--cron", cron, "-o", str(tmp_path / "w.yml")]) == 2
    err = capsys.readouterr().err
    assert "not five cron fields" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "w.yml").exists()
