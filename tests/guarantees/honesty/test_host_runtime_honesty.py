"""Host-runtime honesty: a smoke run in the host's environment instead of the cell's image records how that
environment differs from the cell (Python, every locked package at another version or absent), and the report
shows it. Uses the real runner and report on a demo cell (this machine's Python is not the cell's 3.13)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO
from pinmatrix.smoke.hostdiff import differences

LOCK = "six==1.17.0 \\\n    --hash=sha256:" + "a" * 64 + "\nidna==3.10 \\\n    --hash=sha256:" + "b" * 64 + "\n"


class _Cell:
    python = "3.13"


def test_differences_name_python_and_each_package() -> None:
    seen = {"python": "3.12.3", "dists": {"six": "1.17.0", "IDNA": "3.7"}}
    diff = differences(_Cell(), LOCK, seen)
    assert diff["python_differs"] and not diff["identical"]
    assert diff["packages"] == [{"package": "idna", "lock": "3.10", "host": "3.7"}]
    same = differences(_Cell(), LOCK, {"python": "3.13.5", "dists": {"six": "1.17.0", "idna": "3.10"}})
    assert same["identical"] and same["packages"] == [] and not same["python_differs"]
    absent = differences(_Cell(), None, seen)
    assert not absent["identical"] and "absent" in absent["lock"]


def test_a_host_run_records_and_reports_its_differences(tmp_path: Path) -> None:
    store, out = tmp_path / "results.sqlite", tmp_path / "report"
    cell = "eabeea643274"  # demo[six=1.16.0,idna=3.7]
    run = [sys.executable, "-m", "pinmatrix"]
    subprocess.run([*run, "smoke", str(REPO / "matrix.toml"), "--stack", "demo", "--cell", cell, "--runtime", "host",
                    "--results", str(store), "--logs", str(tmp_path / "logs")], capture_output=True,
                   text=True, timeout=300)
    rows = json.loads(subprocess.run([*run, "results", "--results", str(store), "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    assert rows
    for row in rows:
        diff = row["environment"]["host_vs_lock"]
        assert diff["cell_python"] == "3.13" and diff["python_differs"] is (not sys.version.startswith("3.13."))
        assert {p["package"] for p in diff["packages"]} <= {"six", "idna"}
    subprocess.run([*run, "report", str(REPO / "matrix.toml"), "--results", str(store), "--logs",
                    str(tmp_path / "logs"), "--out", str(out), "--stack", "demo"], check=True,
                   capture_output=True, text=True, timeout=300)
    html = (out / "index.html").read_text()
    assert "not the cell&#39;s environment" in html or "not the cell's environment" in html
    assert f"Python {sys.version.split()[0]} (cell 3.13)" in html
    data = json.loads((out / "report.json").read_text())
    assert any(r.get("host_vs_lock") for s in data["stacks"] for c in s["cells"] for r in c.get("results", []))
