"""test_pack.host_python, the child every unbundle.py test runs: a bare host's Python (-I -S, no third-party
package importable) unless mutmut runs the tests, where only -S goes (the mutated copy imports mutmut) and the
child is told no mutant is active."""

from __future__ import annotations

import pytest
from test_pack import host_python

PROBE = ("import importlib.util, os, sys; print(sys.flags.isolated, sys.flags.no_site, "
         "importlib.util.find_spec('pytest') is not None, repr(os.environ.get('MUTANT_UNDER_TEST')))")


def test_the_child_is_isolated_without_site_packages_outside_mutmut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUTANT_UNDER_TEST", raising=False)
    proc = host_python("-c", PROBE)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "1", "False", "None"]


def test_under_mutmut_the_child_keeps_site_packages_and_runs_no_mutant(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUTANT_UNDER_TEST", "pinmatrix.shipped.unbundle.x_main__mutmut_1")
    proc = host_python("-c", PROBE)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "0", "True", "''"]
