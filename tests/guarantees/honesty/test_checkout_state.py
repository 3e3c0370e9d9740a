"""No test sees the checkout's own state (issue 45): what ./dev left in the repository's .pinmatrix/ (the signing
key pair, the results store, caches) and its known-good.toml, or a PINMATRIX_* setting of the shell that started
pytest. tests/conftest.py's autouse fixture runs each test in a stand-in root (tests/support/checkout_state.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from checkout_state import foreign_settings, stand_in_root

from conftest import REPO
from pinmatrix import paths
from pinmatrix.cli import main
from pinmatrix.release.signing import generate_keypair, trusted_keys

CHILD = "PINMATRIX_TEST_CHILD_RUN"  # set for the pytest run test_the_fixture_holds_for_a_fresh_pytest_run starts


def _decoy_checkout(folder: Path) -> Path:
    """A checkout as ./dev leaves it: the shipped matrix, the project's key pair, a promotion record and a store."""
    folder.mkdir()
    shutil.copy(REPO / "matrix.toml", folder / "matrix.toml")
    (folder / "smoke").mkdir()
    generate_keypair(folder / paths.KEY_PREFIX)
    (folder / paths.KNOWN_GOOD_FILE).write_text("# decoy\n")
    (folder / paths.RESULTS_FILE).write_bytes(b"not a store")
    return folder


def test_each_test_runs_in_a_stand_in_root_without_the_checkouts_state() -> None:
    here = Path.cwd()
    assert here != REPO and REPO not in here.parents
    assert (here / "matrix.toml").resolve() == REPO / "matrix.toml" and (here / "smoke").resolve() == REPO / "smoke"
    assert paths.project_root() == here.resolve()
    for state in (paths.STATE_DIR, paths.KNOWN_GOOD_FILE):
        assert not (here / state).exists(), state
    assert foreign_settings(os.environ) == []


def test_a_decoy_state_is_kept_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    decoy = _decoy_checkout(tmp_path / "checkout")
    monkeypatch.chdir(decoy)  # where the tests ran before the fixture: the decoy's key and store are found
    assert [k.source for k in trusted_keys((), paths.public_key())] == [str(decoy.resolve() / paths.PUBLIC_KEY)]
    assert main(["results", "--json"]) == 2 and str(paths.RESULTS_FILE) in capsys.readouterr().err

    monkeypatch.chdir(stand_in_root(decoy, tmp_path / "stand-in"))
    assert trusted_keys((), paths.public_key()) == []
    assert not paths.known_good_file().exists() and not paths.state_dir().exists()
    assert main(["results", "--json"]) == 0 and json.loads(capsys.readouterr().out) == []
    assert Path("matrix.toml").read_bytes() == (decoy / "matrix.toml").read_bytes()  # the inputs are still there


def test_only_the_test_runs_own_settings_are_inherited() -> None:
    shell = {"PINMATRIX_TRUSTED_KEYS": "/decoy.pub", "PINMATRIX_SIGNING_KEY": "/decoy.key",
             "PINMATRIX_REPORT_FAIL_ON": "fail", "PINMATRIX_TEST_CACHE": "/cache", "PATH": "/bin"}
    assert foreign_settings(shell) == ["PINMATRIX_REPORT_FAIL_ON", "PINMATRIX_SIGNING_KEY", "PINMATRIX_TRUSTED_KEYS"]


def test_the_fixture_holds_for_a_fresh_pytest_run(tmp_path: Path) -> None:
    """pytest started in the checkout, with the shell's trusted keys set, as a developer would after ./dev."""
    if os.environ.get(CHILD):
        pytest.skip("the child run itself")
    env = {**os.environ, "PINMATRIX_TRUSTED_KEYS": str(tmp_path / "decoy.pub"), CHILD: "1"}
    test = f"{Path(__file__).relative_to(REPO)}::test_each_test_runs_in_a_stand_in_root_without_the_checkouts_state"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-2000:]
