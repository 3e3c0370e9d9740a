"""tools/mutation_score.py on a small fake ``mutants/`` folder: the score of a module, and the names of
tools/equivalent_mutants.txt that have gone stale (a module renamed or a function changed, so the name points at no
mutant): each is printed and fails the run, so an equivalent mutant is never silently dropped by a rename."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[3] / "tools" / "mutation_score.py"
MODULE = "pinmatrix.image.assembly.assemble"


def _tool(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The tool, imported from its file; with a stand-in for mutmut's exit-code table where mutmut (an extra,
    ``pip install .[mutation]``) is not installed."""
    try:
        import mutmut.stats  # noqa: F401
    except ImportError:
        stats = types.ModuleType("mutmut.stats")
        stats.status_by_exit_code = {1: "killed", 0: "survived", None: "not checked"}  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "mutmut", types.ModuleType("mutmut"))
        monkeypatch.setitem(sys.modules, "mutmut.stats", stats)
    spec = importlib.util.spec_from_file_location("mutation_score_under_test", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
         equivalent: list[str]) -> tuple[int, str]:
    mutants = tmp_path / "mutants"
    source = mutants / "src" / "pinmatrix" / "image" / "datapath"
    source.mkdir(parents=True)
    (source / "assemble.py").write_text("# mutated\n")
    (mutants / "src" / "pinmatrix" / "cell.py").write_text("# not mutated in this run\n")
    codes = {f"{MODULE}.x__key__mutmut_{i}": 1 for i in range(1, 10)}  # killed
    codes[f"{MODULE}.x__key__mutmut_10"] = 0  # survived: named equivalent below
    (source / "assemble.py.meta").write_text(json.dumps({"exit_code_by_key": codes}))
    listing = tmp_path / "equivalent_mutants.txt"
    listing.write_text("# a comment\n" + "\n".join(equivalent) + "\n")
    monkeypatch.setattr(sys, "argv", ["mutation_score.py", "--mutants", str(mutants), "--equivalent", str(listing)])
    status = _tool(monkeypatch).main()
    return status, capsys.readouterr().out


def test_a_module_whose_survivors_are_all_named_equivalent_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    status, out = _run(tmp_path, monkeypatch, capsys, [
        f"{MODULE}.x__key__mutmut_10  # the reason",
        "pinmatrix.cell.x_other__mutmut_1",  # a module that exists but is not in this run: not checked
    ])
    assert status == 0, out
    assert "9/9" in out and "100.0%" in out and "stale" not in out


def test_an_equivalent_name_of_a_module_in_the_results_that_names_no_mutant_fails_and_is_printed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = _run(tmp_path, monkeypatch, capsys, [
        f"{MODULE}.x__key__mutmut_10", f"{MODULE}.xǁAssemblerǁplan__mutmut_99"])
    assert status == 1
    assert "1 stale name(s)" in out
    assert f"  {MODULE}.xǁAssemblerǁplan__mutmut_99: names no mutant of {MODULE}" in out.splitlines()


def test_an_equivalent_name_of_a_module_that_moved_fails_and_is_printed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    old = "pinmatrix.image.assemble.x__key__mutmut_10"  # the module's path before it moved to image/datapath/
    status, out = _run(tmp_path, monkeypatch, capsys, [old])
    assert status == 1
    assert f"  {old}: no module pinmatrix.image.assemble under {tmp_path / 'mutants'}" in out.splitlines()
    assert f"{MODULE}.x__key__mutmut_10: survived" in out  # and its mutant under the new name is a survivor


def test_an_equivalent_name_whose_mutant_the_tests_kill_fails_and_is_printed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A function changed and mutmut renumbered its mutants: the listed name now means a mutation the tests kill."""
    status, out = _run(tmp_path, monkeypatch, capsys, [f"{MODULE}.x__key__mutmut_10", f"{MODULE}.x__key__mutmut_3"])
    assert status == 1
    assert f"  {MODULE}.x__key__mutmut_3: the tests kill it, so it is not equivalent" in out.splitlines()
