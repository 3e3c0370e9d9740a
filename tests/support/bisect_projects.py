"""Shared by tests/unit/bisect/test_search_end_to_end.py and tests/integration/test_search_in_venvs_and_images.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pinmatrix.cli import main

ROOT = Path(__file__).resolve().parents[2]


SMOKE_DIR = ROOT / "smoke"


def cli_json(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 0) -> dict:
    capsys.readouterr()
    assert main(argv) == code
    out, _ = capsys.readouterr()
    return json.loads(out)


def project_with_smokes(tmp: Path, text: str) -> Path:
    root = tmp / "project"
    root.mkdir(exist_ok=True)
    shutil.copytree(SMOKE_DIR, root / "smoke", ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    (root / "matrix.toml").write_text(text)
    return root / "matrix.toml"
