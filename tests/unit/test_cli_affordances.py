"""Habits users bring from bake, uv and cibuildwheel: `--set AXIS=VALUE` for a one-off cell, `cells --ids`,
`PINMATRIX_<COMMAND>_<OPTION>` for every option, and `Examples:` in every command's --help."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pinmatrix.cli import build_parser, main
from pinmatrix.envdefaults import _commands, apply_environment, option_actions, variable

ROOT = Path(__file__).resolve().parents[2]
MATRIX = str(ROOT / "matrix.toml")


def _ids(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    assert main(["cells", MATRIX, *argv, "--ids"]) == 0
    return capsys.readouterr().out.split()


def _cells(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict]:
    assert main(["cells", MATRIX, *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["cells"]


def test_cells_ids_one_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cells", MATRIX, "--stack", "demo", "--ids"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [c["id"] for c in _cells(capsys, "--stack", "demo")]
    assert all(re.fullmatch(r"[0-9a-f]{12}", line) for line in out.splitlines()) and len(out.splitlines()) == 4


def test_set_picks_a_value_of_the_matrix_as_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    """An existing value: exactly the matrix's own cells with it (same ids), its patches kept; a zipped axis
    keeps its partners at the same places (triton 3.6.0 goes with torch 2.10.0 and 2.11.0)."""
    everything = {c["id"]: c for c in _cells(capsys, "--stack", "xformers-tiled-matmul")}
    int64 = _cells(capsys, "--stack", "xformers-tiled-matmul", "--set", "xformers=0.0.35-int64")
    assert int64 and all(c["id"] in everything for c in int64)
    assert all(any(p["id"] == "xformers-tiled-matmul-int64" for p in c["patches"]) for c in int64)
    torch = _ids(capsys, "--stack", "xformers-tiled-matmul", "--set", "torch=2.11.0")
    assert set(torch) == {i for i, c in everything.items() if c["pins"]["torch"] == "2.11.0"}
    triton = _ids(capsys, "--stack", "xformers-tiled-matmul", "--set", "triton=3.6.0")
    assert set(triton) == {i for i, c in everything.items() if c["pins"]["triton"] == "3.6.0"} and len(triton) > len(torch)


def test_set_makes_a_one_off_cell(capsys: pytest.CaptureFixture[str]) -> None:
    matrix_ids = set(_ids(capsys, "--stack", "demo"))
    one_off = _cells(capsys, "--stack", "demo", "--set", "six=1.15.0", "--set", "idna=3.7")
    assert [c["pins"]["six"] for c in one_off] == ["1.15.0"] and one_off[0]["id"] not in matrix_ids
    assert "six==1.15.0" in one_off[0]["requirements"]
    assert (ROOT / "matrix.toml").read_text().count("1.15.0") == 0  # the matrix is not edited


@pytest.mark.parametrize(("argv", "message"), [
    (["--set", "six=1.15.0"], "--set needs --stack"),
    (["--stack", "demo", "--set", "sixx=1.15.0"], "stack demo has no axis 'sixx' (axes: six, idna)"),
    (["--stack", "demo", "--set", "six"], "expected AXIS=VALUE"),
    (["--stack", "xformers-tiled-matmul", "--set", "triton=3.4.0"], "triton is zipped with torch: set it to one of"),
    (["--stack", "h200", "--set", "torch=1.0.0"], "--set torch=1.0.0: unknown torch version '1.0.0'"),
])
def test_set_refuses_in_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cells", MATRIX, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "Traceback" not in err[0]


def test_every_command_has_examples() -> None:
    parser = build_parser()
    missing = []
    for path, sub in _commands(parser):
        text = sub.format_help()
        if "Examples:" not in text:
            missing.append(" ".join(path))
            continue
        lines = text.split("Examples:", 1)[1].strip().splitlines()
        assert lines and all("pinmatrix" in line or line.startswith("  ") for line in lines), path
    assert missing == []


def _run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PINMATRIX_")}
    return subprocess.run([sys.executable, "-m", "pinmatrix", *argv], capture_output=True, text=True,
                          env={**clean, **env}, timeout=120)


def test_options_from_the_environment() -> None:
    flags = _run({}, "cells", "--stack", "demo", "--ids").stdout
    assert _run({"PINMATRIX_CELLS_STACK": "demo", "PINMATRIX_CELLS_IDS": "yes"}, "cells").stdout == flags
    # the command line wins over the environment
    assert _run({"PINMATRIX_CELLS_STACK": "h200", "PINMATRIX_CELLS_IDS": "1"}, "cells", "--stack", "demo").stdout == flags
    assert _run({"PINMATRIX_CELLS_IDS": "0"}, "cells", "--stack", "demo").stdout != flags  # off: the table
    repeated = _run({"PINMATRIX_CELLS_SET": "six=1.15.0 idna=3.7", "PINMATRIX_CELLS_IDS": "1"}, "cells", "--stack", "demo")
    assert repeated.stdout == _run({}, "cells", "--stack", "demo", "--set", "six=1.15.0", "--set", "idna=3.7",
                                   "--ids").stdout
    for env, message in (({"PINMATRIX_PULL_ENGINE": "rkt"}, "PINMATRIX_PULL_ENGINE=rkt: invalid choice 'rkt'"),
                         ({"PINMATRIX_CELLS_IDS": "maybe"}, "PINMATRIX_CELLS_IDS=maybe: expected 1/true/yes/on"),
                         ({"PINMATRIX_LOCK_JOBS": "many"}, "PINMATRIX_LOCK_JOBS=many:")):
        proc = _run(env, "cells", "--ids")
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_variable_names_are_the_command_path_and_the_option() -> None:
    parser = build_parser()
    names = {variable(path, action) for path, action in option_actions(parser)}
    assert {"PINMATRIX_PULL_STACK", "PINMATRIX_CI_K8S_REGISTRY", "PINMATRIX_PROMOTE_SIGNING_KEY",
            "PINMATRIX_REPORT_FAIL_ON", "PINMATRIX_SMOKE_RUNTIME"} <= names
    assert apply_environment(parser, {"PINMATRIX_PULL_STACK": "demo"}) == ["PINMATRIX_PULL_STACK"]
    # no generated name is one pinmatrix already gives another meaning (the smoke runner's, the keys', ...)
    used: set[str] = set()
    for path in (ROOT / "src" / "pinmatrix").rglob("*.py"):
        if path.name not in ("envdefaults.py", "cli.py"):
            used |= set(re.findall(r"PINMATRIX_[A-Z0-9_]+", path.read_text(encoding="utf-8")))
    assert not names & used, sorted(names & used)
