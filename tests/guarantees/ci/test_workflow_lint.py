"""The example workflow (docs/workflows/pinmatrix.yml) passes actionlint (with shellcheck over its `run:` scripts)
and zizmor, the same checks `nox -s lint` runs, and both catch what they are there for in a broken copy; its
release path installs from the hashed lock, pins every action by commit SHA, promotes per cell and signs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
WORKFLOW = ROOT / "docs" / "workflows" / "pinmatrix.yml"
CONFIG = ROOT / "docs" / "workflows" / "actionlint.yaml"


def _tool(name: str) -> str:
    """The linter from this environment (requirements/dev.lock's lint extra), else from PATH."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.is_file() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: ./dev installs it from requirements/dev.lock")
    return found


def actionlint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_tool("actionlint"), "-no-color", "-config-file", str(CONFIG), str(path)],
                          capture_output=True, text=True, timeout=120, check=False)


def zizmor(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_tool("zizmor"), "--offline", "--no-progress", "--format", "plain", str(path)],
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_workflow_passes_actionlint_and_zizmor() -> None:
    assert shutil.which("shellcheck"), "shellcheck (.ci/apt-packages.txt) lets actionlint check the run: scripts"
    lint = actionlint(WORKFLOW)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    audit = zizmor(WORKFLOW)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "No findings" in audit.stdout + audit.stderr


@pytest.mark.parametrize(("old", "new", "tool", "finding"), [
    # an action by tag instead of commit SHA
    ("actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8 # v5.0.0", "actions/checkout@v5", zizmor,
     "unpinned-uses"),
    # an expression pasted into a shell line
    ('pinmatrix promote --cell "$CELL" --results results.sqlite --dry-run',
     "pinmatrix promote --cell ${{ github.event.head_commit.message }} --dry-run", zizmor, "template-injection"),
    # a shell script error (shellcheck through actionlint)
    ('rm -f "$RUNNER_TEMP/signing.key"', 'rm -f "$RUNNER_TEMP/signing.key', actionlint, "shellcheck"),
    # a job that does not exist
    ("needs: [cells, smoke]\n    if: ${{ !cancelled() && needs.cells.result == 'success' && github.ref",
     "needs: [cells, smok]\n    if: ${{ !cancelled() && needs.cells.result == 'success' && github.ref", actionlint,
     "job-needs"),
])
def test_the_linters_catch_a_broken_copy(tmp_path: Path, old: str, new: str, tool, finding: str) -> None:  # noqa: ANN001
    text = WORKFLOW.read_text()
    assert old in text
    broken = tmp_path / "pinmatrix.yml"
    broken.write_text(text.replace(old, new, 1))
    proc = tool(broken)
    assert proc.returncode != 0
    assert finding in proc.stdout + proc.stderr


def _steps(job: dict) -> list[dict]:  # type: ignore[type-arg]
    return list(job.get("steps", []))


def test_the_release_path_installs_from_the_lock_pins_actions_promotes_per_cell_and_signs() -> None:
    text = WORKFLOW.read_text()
    flow = yaml.safe_load(text)
    jobs = flow["jobs"]
    uses = re.findall(r"uses:\s*(\S+)(.*)", text)
    assert len(uses) >= 10
    for ref, comment in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), ref
        assert re.fullmatch(r"\s*# v\d+\.\d+\.\d+", comment), f"{ref}: the tag it pins as a comment"
    for name, job in jobs.items():
        runs = [str(s.get("run", "")) for s in _steps(job)]
        assert not [r for r in runs if re.search(r"pip install(?! --require-hashes| --no-deps --no-build-isolation \.)",
                                                 r)], f"{name}: pip install outside the hashed lock"
        assert any("pip\" install --require-hashes --no-deps -r requirements/dev.lock" in r for r in runs), name
    promote = jobs["promote"]
    assert "report" not in promote["needs"]  # one failing cell's report does not block the others
    assert promote["strategy"]["matrix"] == "${{ fromJSON(needs.cells.outputs.matrix) }}"
    assert promote["env"]["CELL"] == "${{ matrix.cell }}"
    assert promote["environment"] == "release"
    steps = _steps(promote)
    signed = next(s for s in steps if str(s.get("run", "")).startswith("pinmatrix promote") and "--dry-run" not in s["run"])
    assert signed["run"] == 'pinmatrix promote --cell "$CELL" --results results.sqlite'
    assert signed["env"]["PINMATRIX_SIGNING_KEY"] == "${{ runner.temp }}/signing.key"
    key = next(s for s in steps if s.get("name") == "Signing key")
    assert key["env"]["SIGNING_KEY"] == "${{ secrets.PINMATRIX_SIGNING_KEY }}"
    assert key["run"].startswith("umask 077")
    assert steps.index(key) < steps.index(signed)
    cleanup = next(s for s in steps if s.get("name") == "Remove the signing key")
    assert cleanup["if"] == "${{ always() }}" and steps.index(cleanup) > steps.index(signed)
    assert "secrets." not in yaml.safe_dump({k: v for k, v in jobs.items() if k != "promote"})
