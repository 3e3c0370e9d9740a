"""``pinmatrix canary`` end to end on a CPU stack of one tiny wheel, in a project of its own: the candidate (six
1.13.0, a --set cell the matrix does not list) is locked, built by the image builder into the OCI layout with its
baseline (the matrix's six 1.14.0 cell, nothing promoted), both smoked in their images by the sandbox runtime; the
comparison says six-assert-not-regex newly fails (six added assertNotRegex in 1.14.0) while the GPU smoke is
skipped on both sides (no verdict, no failure), gives the one-axis bisect and runs it with --bisect, and records
image sizes and build times. The base root filesystem comes from the
checkout's cache, so a warm run takes seconds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_runs import bwrap_usable

ROOT = Path(__file__).resolve().parents[2]
STACK = """
[stacks.d]
gpu_required = false
smokes = ["host-probe", "python-imports", "six-assert-not-regex", "unified-memory-leak"]
[stacks.d.packages]
six = ["1.14.0"]
"""

pytestmark = [pytest.mark.slow, pytest.mark.network,
              pytest.mark.skipif(bwrap_usable() is not None, reason=str(bwrap_usable()))]


def _project(tmp_path: Path, stack: str = STACK) -> Path:
    """The checkout's [matrix] settings (its base, so its cached root filesystem) with one small stack."""
    text = ROOT.joinpath("matrix.toml").read_text(encoding="utf-8")
    settings = text[:text.index("\n# ---")]  # [matrix], [matrix.base], [matrix.promotion]: before the patches
    (tmp_path / "matrix.toml").write_text(settings + "\n" + stack, encoding="utf-8")
    (tmp_path / "smoke").symlink_to(ROOT / "smoke")
    (tmp_path / ".pinmatrix").mkdir()
    (ROOT / ".pinmatrix" / "cache").mkdir(parents=True, exist_ok=True)
    (tmp_path / ".pinmatrix" / "cache").symlink_to(ROOT / ".pinmatrix" / "cache")
    return tmp_path


def test_a_candidate_that_breaks_a_smoke_is_reported_with_its_bisect(tmp_path: Path) -> None:
    project = _project(tmp_path)
    done = subprocess.run([sys.executable, "-m", "pinmatrix", "canary", "--stack", "d", "--set", "six=1.13.0",
                           "--results", "r.sqlite", "--bisect", "--json"], cwd=project, capture_output=True,
                          text=True, timeout=900, check=False)
    assert done.returncode == 1, done.stderr[-3000:]  # a smoke newly fails
    out = json.loads(done.stdout)
    [diff] = out["comparisons"]
    assert diff["baseline"]["source"] == ("no cell of stack d is promoted: the matrix's current cell of the same "
                                          "variant stands in")
    assert diff["moved"] == {"six": {"from": "1.14.0", "to": "1.13.0"}}
    changes = {s["smoke"]: s for s in diff["smokes"]}
    assert set(changes) == {"six-assert-not-regex", "unified-memory-leak"}
    change, gpu = changes["six-assert-not-regex"], changes["unified-memory-leak"]
    assert (change["change"], change["before"], change["after"]) == ("newly failing", "pass", "fail")
    assert (gpu["change"], gpu["before"], gpu["after"]) == ("skipped", "skip", "skip")  # no GPU here: no verdict
    assert "GPU" in gpu["reason"]
    assert change["bisect"] == ("pinmatrix bisect version six-assert-not-regex --stack d --axis six "
                                "--range '>=1.13.0,<=1.14.0'")
    assert diff["unchanged_passing"] == 2  # host-probe and python-imports, in both images
    assert diff["image_size"].startswith("image size: ") and "not recorded" not in diff["image_size"]
    assert diff["build_time"].startswith("build time: ") and "not recorded" not in diff["build_time"]
    assert diff["arch"].startswith("arch coverage: not scanned")
    assert any("first passing six = 1.14.0" in note for note in out["notes"]), out["notes"]
    assert (project / "locks" / f"{diff['candidate']['id']}.txt").is_file()  # as `build --set` locks a one-off cell
    built = json.loads((project / ".pinmatrix" / "canary" / "builds.json").read_text())
    assert {diff["candidate"]["id"], diff["baseline"]["id"]} <= set(built)


def test_propose_s_candidate_of_the_demo_stack_is_built_smoked_and_compared(tmp_path: Path) -> None:
    """No --set: propose reads the index for the demo packages' newest releases (older pins here, so a newer
    release exists whatever the index serves), locks the "newest of each" candidate, and the canary builds and
    smokes it with the matrix's cell nearest it; two axes moved, so no bisect line."""
    project = _project(tmp_path, STACK.replace('six = ["1.14.0"]', 'six = ["1.15.0"]\nidna = ["3.4"]'))
    done = subprocess.run([sys.executable, "-m", "pinmatrix", "canary", "--stack", "d", "--results", "r.sqlite",
                           "--json"], cwd=project, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "d: newest of each: locked" in done.stderr
    [diff] = json.loads(done.stdout)["comparisons"]
    assert set(diff["moved"]) == {"six", "idna"}
    assert (diff["moved"]["six"]["from"], diff["moved"]["idna"]["from"]) == ("1.15.0", "3.4")
    assert [(s["smoke"], s["change"]) for s in diff["smokes"]] == [("unified-memory-leak", "skipped")]
    assert diff["unchanged_passing"] == 3
    assert "not recorded" not in diff["build_time"]
