"""Under mutmut the package's isolated script children, and children of a byte copy of one of its scripts (a
bundle's unbundle.py), keep site-packages and hear that no mutant is active; any other child, and every child
outside mutmut, is started as given. Each test names its environment instead of changing this process's."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mutmut_children import PACKAGE, child_args, install

GUARD = str(PACKAGE / "smoke" / "guard.py")
MUTMUT = {"MUTANT_UNDER_TEST": "x"}


def test_a_package_script_drops_only_dash_s_and_no_mutant_is_active() -> None:
    args, env = child_args([sys.executable, "-I", "-S", GUARD, "3", "tok"], {"A": "1"}, MUTMUT)
    assert args == [sys.executable, "-I", GUARD, "3", "tok"]
    assert env == {"A": "1", "MUTANT_UNDER_TEST": ""}


def test_without_an_env_the_child_gets_this_process_environment_and_the_empty_mutant() -> None:
    _, env = child_args([sys.executable, "-I", "-S", GUARD], None, {"B": "2", "MUTANT_UNDER_TEST": "stats"})
    assert env == {"B": "2", "MUTANT_UNDER_TEST": ""}


def test_a_byte_copy_of_a_package_script_outside_the_package_is_one(tmp_path: Path) -> None:
    copy = tmp_path / "bundle" / "unbundle.py"
    copy.parent.mkdir()
    shutil.copyfile(PACKAGE / "shipped" / "unbundle.py", copy)
    args, env = child_args([sys.executable, "-I", "-S", str(copy), "b"], {"A": "1"}, MUTMUT)
    assert args == [sys.executable, "-I", str(copy), "b"]
    assert env == {"A": "1", "MUTANT_UNDER_TEST": ""}


def test_a_different_file_with_a_package_script_name_is_left_as_given(tmp_path: Path) -> None:
    other = tmp_path / "unbundle.py"
    other.write_bytes((PACKAGE / "shipped" / "unbundle.py").read_bytes().replace(b"unbundle", b"unpack"))
    args = [sys.executable, "-I", "-S", str(other), "b"]
    assert child_args(args, {"C": "3"}, MUTMUT) == (args, {"C": "3"})


def test_other_children_are_left_as_given() -> None:
    outside = [sys.executable, "-I", "-S", "/usr/lib/python3/dist-packages/x.py"]
    probe = [sys.executable, "-I", "-S", "-c", "import pinmatrix"]
    other_python = ["/usr/bin/python9", "-I", "-S", GUARD]
    not_isolated = [sys.executable, "-I", GUARD, "-S"]
    for args in (outside, probe, other_python, not_isolated, "python -I -S " + GUARD):
        assert child_args(args, {"C": "3"}, {"MUTANT_UNDER_TEST": ""}) == (args, {"C": "3"})


def test_outside_mutmut_no_child_is_changed(tmp_path: Path) -> None:
    copy = tmp_path / "guard.py"
    shutil.copyfile(GUARD, copy)
    for script in (GUARD, str(copy)):
        args = [sys.executable, "-I", "-S", script, "5"]
        assert child_args(args, {"C": "3"}, {"C": "3"}) == (args, {"C": "3"})
        assert child_args(args, None, {}) == (args, None)


def test_outside_mutmut_popen_is_not_wrapped() -> None:
    before = subprocess.Popen.__init__
    install({"PATH": "/usr/bin"})
    assert subprocess.Popen.__init__ is before


def test_under_mutmut_a_guard_child_starts_without_dash_s(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[list[str], object]] = []
    monkeypatch.setattr(subprocess.Popen, "__init__", lambda self, args, *a, **k: seen.append((list(args), k["env"])))
    install({"MUTANT_UNDER_TEST": "", "D": "4"})
    subprocess.Popen([sys.executable, "-I", "-S", GUARD, "5"], env={"E": "5"})
    subprocess.Popen([sys.executable, "-I", "-S", "-c", "pass"], env={"E": "5"})
    assert seen == [([sys.executable, "-I", GUARD, "5"], {"E": "5", "MUTANT_UNDER_TEST": ""}),
                    ([sys.executable, "-I", "-S", "-c", "pass"], {"E": "5"})]
