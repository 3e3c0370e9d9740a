"""Under mutmut the package's isolated script children keep site-packages and hear that no mutant is active;
any other child, and every child outside mutmut, is started as given."""

from __future__ import annotations

import subprocess
import sys

import pytest
from mutmut_children import PACKAGE, child_args, install

GUARD = str(PACKAGE / "smoke" / "guard.py")


def test_a_package_script_drops_only_dash_s_and_no_mutant_is_active() -> None:
    args, env = child_args([sys.executable, "-I", "-S", GUARD, "3", "tok"], {"A": "1"}, {"MUTANT_UNDER_TEST": "x"})
    assert args == [sys.executable, "-I", GUARD, "3", "tok"]
    assert env == {"A": "1", "MUTANT_UNDER_TEST": ""}


def test_without_an_env_the_child_gets_this_process_environment_and_the_empty_mutant() -> None:
    _, env = child_args([sys.executable, "-I", "-S", GUARD], None, {"B": "2", "MUTANT_UNDER_TEST": "stats"})
    assert env == {"B": "2", "MUTANT_UNDER_TEST": ""}


def test_other_children_are_left_as_given() -> None:
    outside = [sys.executable, "-I", "-S", "/usr/lib/python3/dist-packages/x.py"]
    probe = [sys.executable, "-I", "-S", "-c", "import pinmatrix"]
    other_python = ["/usr/bin/python9", "-I", "-S", GUARD]
    not_isolated = [sys.executable, "-I", GUARD, "-S"]
    for args in (outside, probe, other_python, not_isolated, "python -I -S " + GUARD):
        assert child_args(args, {"C": "3"}, {"MUTANT_UNDER_TEST": ""}) == (args, {"C": "3"})


def test_outside_mutmut_popen_is_not_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUTANT_UNDER_TEST", raising=False)
    before = subprocess.Popen.__init__
    install()  # this test process runs outside mutmut (MUTANT_UNDER_TEST unset)
    assert subprocess.Popen.__init__ is before


def test_under_mutmut_a_guard_child_starts_without_dash_s(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(subprocess.Popen, "__init__", lambda self, args, *a, **k: seen.append(list(args)))
    monkeypatch.setenv("MUTANT_UNDER_TEST", "")
    install()
    subprocess.Popen([sys.executable, "-I", "-S", GUARD, "5"])
    assert seen == [[sys.executable, "-I", GUARD, "5"]]
