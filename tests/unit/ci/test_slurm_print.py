"""`ci slurm --print` prints the job scripts and writes nothing: no submission folder, no manifest, no dispatch
record, however often it runs (it used to write a new folder each time)."""

from __future__ import annotations

from pathlib import Path

import pytest
from k8s_pools import ROOT

from pinmatrix.cli import main


def test_print_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "subs"
    for _ in range(2):
        rc = main(["ci", "slurm", str(ROOT / "matrix.toml"), "--stack", "demo", "--runtime", "host", "--out", str(out),
                   "--print", "--results", str(tmp_path / "none.sqlite")])
        printed = capsys.readouterr()
        assert rc == 0, printed.err
        assert printed.out.startswith("#!/bin/bash\n") and "#SBATCH --array=0-3" in printed.out
        assert "nothing written, nothing submitted" in printed.err
    assert not out.exists() and list(tmp_path.iterdir()) == []
