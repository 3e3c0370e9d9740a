"""The command line imports only the command that runs: `pinmatrix --help` and one command stay quick, and every
command is still listed, parsed and fed from the environment as before."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from pinmatrix.cli import COMMAND_HELP, build_parser, commands_for


def _loaded(*argv: str, env: dict[str, str] | None = None) -> tuple[set[str], str]:
    code = ("import json, sys\n"
            "from pinmatrix.cli import main\n"
            "try:\n"
            f"    main({list(argv)!r})\n"
            "except SystemExit:\n"
            "    pass\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('pinmatrix.commands.'))), file=sys.stderr)")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PINMATRIX_")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**clean, **(env or {})}, check=False)
    return set(json.loads(proc.stderr.strip().splitlines()[-1])), proc.stdout


def test_top_level_help_imports_no_command_and_lists_them_all() -> None:
    loaded, out = _loaded("--help")
    assert loaded <= {"pinmatrix.commands._common"}, loaded
    for name, text in COMMAND_HELP.items():
        assert name in out and " ".join(text.split()[:4]) in " ".join(out.split())


def test_one_command_imports_its_own_module_only() -> None:
    loaded, _ = _loaded("cells", "--stack", "demo", "--ids")
    assert {m for m in loaded if m != "pinmatrix.commands._common"} == {"pinmatrix.commands.cells"}
    loaded, _ = _loaded("--version")
    assert loaded <= {"pinmatrix.commands._common"}


def test_a_variable_for_another_command_is_still_checked() -> None:
    loaded, _ = _loaded("cells", "--ids", env={"PINMATRIX_PULL_ENGINE": "podman"})
    assert {"pinmatrix.commands.cells", "pinmatrix.commands.pull"} <= loaded
    assert commands_for(["cells"], {"PINMATRIX_CI_K8S_REGISTRY": "r", "PINMATRIX_ARCH_SCAN_STACK": "s"}) == {
        "cells", "ci", "arch-scan"}
    assert commands_for(["--version"], {}) == set() and commands_for(["nope"], {}) == set()


def test_the_listing_uses_each_commands_own_help() -> None:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert {a.dest: a.help for a in sub._choices_actions} == COMMAND_HELP


def test_an_unknown_command_is_argparses_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "pinmatrix", "bulid"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2 and "invalid choice: 'bulid'" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("raw", "value"), [("1", True), ("yes", True), ("0", False), ("off", False)])
def test_a_yes_no_option_takes_its_value_from_the_environment(raw: str, value: bool) -> None:
    parser = build_parser({"build"}, environ={"PINMATRIX_BUILD_LOAD": raw})
    assert parser.parse_args(["build"]).load is value
    assert parser.parse_args(["build", "--no-load" if value else "--load"]).load is not value
