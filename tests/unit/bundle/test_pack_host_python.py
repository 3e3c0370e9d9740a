"""test_pack.host_python, the child every unbundle.py test runs: a bare host's Python (-I -S, no third-party
package importable) unless mutmut runs the tests and the child runs a script named unbundle.py (the mutated copy
imports mutmut): only then does -S go, and the child is told no mutant is active."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_pack import host_python

PROBE = ("import importlib.util, os, sys; print(sys.flags.isolated, sys.flags.no_site, "
         "importlib.util.find_spec('pytest') is not None, repr(os.environ.get('MUTANT_UNDER_TEST')))\n")
BARE = ["1", "1", "False", "None"]


def probe(folder: Path, name: str) -> str:
    script = folder / name
    script.write_text(PROBE)
    proc = host_python(str(script), "b", "--check")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_child_is_isolated_without_site_packages_outside_mutmut(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    monkeypatch.delenv("MUTANT_UNDER_TEST", raising=False)
    assert probe(tmp_path, "unbundle.py").split() == BARE


def test_under_mutmut_only_an_unbundle_script_keeps_site_packages_and_runs_no_mutant(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MUTANT_UNDER_TEST", "pinmatrix.shipped.unbundle.x_main__mutmut_1")
    assert probe(tmp_path, "unbundle.py").split() == ["1", "0", "True", "''"]
    under_mutmut = ["1", "1", "False", "'pinmatrix.shipped.unbundle.x_main__mutmut_1'"]
    assert probe(tmp_path, "other.py").split() == under_mutmut  # a bare host's Python, as outside mutmut
    proc = host_python("-c", "import pytest")
    assert proc.returncode != 0
