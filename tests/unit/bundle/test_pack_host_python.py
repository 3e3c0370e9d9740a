"""test_pack.host_python, the child every unbundle.py test runs: a bare host's Python (-I -S, no PYTHONPATH, no
third-party package importable). Under mutmut, tests/support/mutmut_children.py (installed for every test by
conftest.py) starts it without -S and with no mutant active when the script is a bundle's unbundle.py, a byte copy
of the package's shipped/unbundle.py; a script that only shares the name stays bare."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mutmut_children import child_args
from test_pack import host_python

from pinmatrix.project.smoke_bundle import shipped_file

PROBE = ("import importlib.util, os, sys; print(sys.flags.isolated, sys.flags.no_site, "
         "importlib.util.find_spec('pytest') is not None, repr(os.environ.get('MUTANT_UNDER_TEST')))\n")
BARE = ["1", "1", "False", "None"]
MUTMUT = {"MUTANT_UNDER_TEST": "pinmatrix.shipped.unbundle.x_main__mutmut_1"}


def probe(folder: Path, name: str) -> str:
    script = folder / name
    script.write_text(PROBE)
    proc = host_python(str(script), "b", "--check")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def host_command(monkeypatch: pytest.MonkeyPatch, script: Path) -> tuple[list[str], dict[str, str]]:
    """The argv and env host_python hands to subprocess, without starting the child."""
    seen: dict[str, Any] = {}
    monkeypatch.setattr(subprocess, "run", lambda argv, **kwargs: seen.update(argv=argv, env=kwargs["env"]))
    host_python(str(script), "b", "--check")
    return seen["argv"], seen["env"]


def bundle_copy(folder: Path) -> Path:
    """unbundle.py as the packer writes it into a bundle: the package's file, copied."""
    script = folder / "unbundle.py"
    shutil.copyfile(shipped_file("unbundle.py"), script)
    return script


def test_the_child_is_isolated_without_site_packages(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MUTANT_UNDER_TEST", raising=False)
    assert probe(tmp_path, "unbundle.py").split() == BARE
    assert host_python("-c", "import pytest").returncode != 0


def test_under_mutmut_a_bundle_copy_keeps_site_packages_and_runs_no_mutant(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    script = bundle_copy(tmp_path)
    argv, env = host_command(monkeypatch, script)
    assert argv == [sys.executable, "-I", "-S", str(script), "b", "--check"]
    args, wrapped = child_args(argv, env, MUTMUT)
    assert args == [sys.executable, "-I", str(script), "b", "--check"]
    assert wrapped == {**env, "MUTANT_UNDER_TEST": ""} and wrapped["PYTHONPATH"] == ""


def test_under_mutmut_another_script_named_unbundle_stays_bare(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    script = tmp_path / "unbundle.py"
    script.write_bytes(shipped_file("unbundle.py").read_bytes() + b"\n")
    argv, env = host_command(monkeypatch, script)
    assert child_args(argv, env, MUTMUT) == (argv, env)


def test_outside_mutmut_a_bundle_copy_stays_bare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    argv, env = host_command(monkeypatch, bundle_copy(tmp_path))
    assert child_args(argv, env, {"PATH": "/usr/bin"}) == (argv, env)
