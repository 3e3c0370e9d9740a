"""Every malformed matrix in tests/data/malformed gives exit 2 and located one-line messages, no traceback.

Each file's first line is ``# expect: REGEX``: one of the lines printed must match it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pinmatrix.cli import main

CORPUS = sorted((Path(__file__).resolve().parents[2] / "data" / "malformed").glob("*.toml"))


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 30


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_malformed_matrix(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = path.read_text().splitlines()[0].removeprefix("# expect: ")
    code = main(["validate", str(path)])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert lines, "no message"
    assert "Traceback" not in err
    for line in lines:
        assert re.match(rf"^{re.escape(path.name)}:\d+: ", line), line
    assert any(re.search(expected, line) for line in lines), f"{lines!r}: none matches {expected!r}"


def test_cells_on_malformed_matrix_also_exits_2_without_traceback(tmp_path: Path) -> None:
    bad = CORPUS[0]
    proc = subprocess.run([sys.executable, "-m", "pinmatrix.cli", "cells", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(bad.name + ":")


def test_missing_matrix_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tmp_path / "nope.toml")]) == 2
    assert "no such file" in capsys.readouterr().err
