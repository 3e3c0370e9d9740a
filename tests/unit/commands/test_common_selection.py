"""One way to choose cells in every command (commands/_common.add_selection_arguments, resolved by
matrix.selection.choose_cells): --stack, --cell/-c (id or name, repeatable) and -k over the cells' names and ids; a
selection that matches nothing is one line naming what was asked and exit 2, before anything runs. In ``smoke``, -k
chooses cells too and --smoke the smokes; the README's smoke line does what it says."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
from known_good_entries import entry, write_entries

from conftest import REPO
from pinmatrix.cli import main
from pinmatrix.matrix.selection import load

MATRIX = str(REPO / "matrix.toml")
SMOKES = str(REPO / "smoke")
DEMO = {c.name: c for c in load(REPO / "matrix.toml")[1].cells if c.stack == "demo"}
NEW = DEMO["demo[six=1.17.0,idna=3.10]"]
NO_H300 = "no cell matches -k 'h300' in matrix.toml"


def _known_good(tmp: Path) -> str:
    path = tmp / "known-good.toml"
    write_entries(path, [entry("aaaaaaaaaaaa", "2026-11-01T00:00:00Z", registry="registry.example:5000")])
    return str(path)


# (command, its argv given a scratch folder, the one line it must give)
EMPTY: list[tuple[str, Callable[[Path], list[str]], str]] = [
    ("cells", lambda t: ["cells", MATRIX, "-k", "h300"], NO_H300),
    ("cells-ids", lambda t: ["cells", MATRIX, "--stack", "demo", "-k", "h300", "--ids"],
     "no cell matches -k 'h300' in stack demo"),
    ("cells-cell", lambda t: ["cells", MATRIX, "--cell", "nope"],
     "no cell with id or name 'nope' in matrix.toml (see `pinmatrix cells`)"),
    ("lock", lambda t: ["lock", MATRIX, "-k", "h300"], NO_H300),
    ("build", lambda t: ["build", MATRIX, "-k", "h300", "--engine", "none", "--layout", str(t / "oci")], NO_H300),
    ("smoke", lambda t: ["smoke", MATRIX, "-k", "h300", "--smoke-dir", SMOKES, "--results", str(t / "r.sqlite")],
     NO_H300),
    ("smoke-cell-and-k", lambda t: ["smoke", MATRIX, "-c", NEW.id, "-k", "idna=3.7", "--smoke-dir", SMOKES],
     f"no cell matches --cell {NEW.id} and -k 'idna=3.7' in matrix.toml"),
    ("smoke-smokes", lambda t: ["smoke", MATRIX, "--stack", "demo", "--smoke", "no-such-smoke", "--smoke-dir", SMOKES],
     "no smoke matches --smoke 'no-such-smoke' in the smokes of the 4 selected cell(s)"),
    ("smoke-host-smokes", lambda t: ["smoke", "--smoke", "no-such-smoke", "--smoke-dir", SMOKES],
     "no smoke matches --smoke 'no-such-smoke' in the smokes of the 1 selected cell(s)"),
    ("promote", lambda t: ["promote", MATRIX, "-k", "h300", "--registry", "registry.invalid/p", "--dry-run",
                           "--known-good", str(t / "kg.toml")], NO_H300),
    ("arch-scan", lambda t: ["arch-scan", MATRIX, "-k", "h300"], NO_H300),
    ("ci-github", lambda t: ["ci", "github", MATRIX, "-k", "h300"], NO_H300),
    ("bundle-wheels", lambda t: ["bundle", "wheels", MATRIX, "--cell", "nope", "--part-size", "1MB", "--out",
                                 str(t / "out")], "no cell with id or name 'nope' in matrix.toml"),
    ("bisect-param", lambda t: ["bisect", "param", "cpu-threshold", MATRIX, "--param", "n", "--cell", "nope",
                                "--smoke-dir", SMOKES, "--results", str(t / "r.sqlite")],
     "no cell with id or name 'nope' in matrix.toml"),
    ("results", lambda t: ["results", "--results", str(t / "r.sqlite"), "-k", "h300"],
     "no recorded cell matches -k 'h300' in {tmp}/r.sqlite"),
    ("results-cell", lambda t: ["results", "--results", str(t / "r.sqlite"), "-c", "0123", "--stack", "demo"],
     "no recorded cell matches stack demo and --cell 0123 in {tmp}/r.sqlite"),
    ("pull", lambda t: ["pull", "--known-good", _known_good(t), "-k", "h300", "--print", "--quiet"],
     "no known-good cell matches -k 'h300' in {tmp}/known-good.toml"),
    ("pull-list", lambda t: ["pull", "--known-good", _known_good(t), "-c", "bbbb", "--list"],
     "no known-good cell 'bbbb'"),
]


@pytest.mark.parametrize(("argv", "message"), [pytest.param(a, m, id=i) for i, a, m in EMPTY])
def test_a_selection_of_nothing_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        argv: Callable[[Path], list[str]], message: str) -> None:
    rc = main(argv(tmp_path))
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("pinmatrix: error: ")
    assert message.format(tmp=tmp_path) in err
    assert not (tmp_path / "oci").exists() and not (tmp_path / "out").exists()  # nothing was made


def _listed(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, list[str]]:
    """``smoke --list``: each chosen cell's id and the smokes planned for it."""
    assert main(["smoke", *argv, "--smoke-dir", SMOKES, "--list"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("cell ")]
    return {ln.split()[1]: ln.split(": ", 1)[1].split() for ln in lines}


def test_k_chooses_cells_in_smoke_and_smoke_the_smokes(capsys: pytest.CaptureFixture[str]) -> None:
    every = _listed(capsys, MATRIX, "--stack", "demo", "-k", "six=1.17.0 and idna=3.10")
    assert list(every) == [NEW.id] and "host-probe" in every[NEW.id] and len(every[NEW.id]) > 1
    some = _listed(capsys, MATRIX, "-k", "six=1.17.0 and idna=3.10", "--smoke", "host-probe")
    assert some == {NEW.id: ["host-probe"]}
    both = _listed(capsys, MATRIX, "-c", NEW.name, "-c", DEMO["demo[six=1.16.0,idna=3.7]"].id, "--smoke", "host-probe")
    assert list(both) == [NEW.id, DEMO["demo[six=1.16.0,idna=3.7]"].id]
    assert list(_listed(capsys, "--smoke", "host-probe")) == ["host"]  # no cell chosen: this environment


def test_the_readmes_smoke_line_smokes_the_cell_it_names(capsys: pytest.CaptureFixture[str]) -> None:
    (line,) = [ln for ln in (REPO / "README.md").read_text(encoding="utf-8").splitlines()
               if ln.startswith(".venv/bin/pinmatrix smoke ") and " -k " in ln]
    argv = shlex.split(line.split("#", 1)[0])[2:]
    assert argv[argv.index("-k") + 1] == "six=1.17.0 and idna=3.10" and "--runtime" in argv
    cut = argv.index("--runtime")
    chosen = _listed(capsys, MATRIX, *argv[:cut], *argv[cut + 2:])  # as the README runs it, listed, not run
    assert list(chosen) == [NEW.id]


def test_every_cell_choosing_command_has_the_same_options(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["cells"], ["lock"], ["build"], ["smoke"], ["promote"], ["pull"], ["results"], ["arch-scan"],
                    ["ci", "github"], ["ci", "k8s"], ["ci", "slurm"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--stack S, -s S" in text and "--cell ID, -c ID" in text and "-k EXPR" in text, command
        assert "(repeatable)" in text.split("--cell ID, -c ID", 1)[1][:80], command
