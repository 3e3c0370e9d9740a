"""`nox -l --json` lists every session, so CI systems can generate jobs from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_nox_lists_sessions_as_json() -> None:
    proc = subprocess.run([sys.executable, "-m", "nox", "-l", "--json"], cwd=ROOT, capture_output=True, text=True,
                          check=True)
    sessions = {s["session"]: s for s in json.loads(proc.stdout)}
    for name in ("cells", "lock", "build-matrix", "tests", "benchmarks", "report", "promote"):
        assert name in sessions, name
        assert sessions[name]["description"], f"{name} has no description"
