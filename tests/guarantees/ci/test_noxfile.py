"""`nox -l --json` lists every session, so CI systems can generate jobs from it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import skip_or_fail

ROOT = Path(__file__).resolve().parents[3]


def test_nox_lists_sessions_as_json() -> None:
    proc = subprocess.run([sys.executable, "-m", "nox", "-l", "--json"], cwd=ROOT, capture_output=True, text=True,
                          check=True)
    sessions = {s["session"]: s for s in json.loads(proc.stdout)}
    for name in ("cells", "lock", "build-matrix", "tests", "benchmarks", "report", "promote"):
        assert name in sessions, name
        assert sessions[name]["description"], f"{name} has no description"


def test_only_the_front_door_is_a_default_session() -> None:
    listing = subprocess.run([sys.executable, "-m", "nox", "-l"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    marked = {line[2:].split(" -> ")[0]: line[0] for line in listing.splitlines() if line[:2] in ("* ", "- ")}
    assert len(marked) == 12 and {name for name, mark in marked.items() if mark == "*"} == {"build-matrix"}, marked


def _can_cut_the_network() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-n", "true"], capture_output=True, check=False).returncode == 0


def test_a_session_installs_offline_once_its_environment_exists(tmp_path: Path) -> None:
    """The second run of a session needs no network: pinmatrix itself is built by the lock's setuptools, not in
    an isolated build environment that fetches setuptools each time."""
    if not _can_cut_the_network():
        skip_or_fail("unshare -n is not permitted here (needs root or user namespaces)")
    nox = [sys.executable, "-m", "nox", "-s", "cells", "--install-only", "--envdir", str(tmp_path / "nox")]
    first = subprocess.run(nox, cwd=ROOT, capture_output=True, text=True, check=False, timeout=600)
    if first.returncode != 0:
        skip_or_fail(f"the first, online install failed (no package index?): {first.stderr[-400:]}")
    second = subprocess.run(["unshare", "-n", *nox], cwd=ROOT, capture_output=True, text=True, check=False,
                            timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "--no-build-isolation" in second.stderr
