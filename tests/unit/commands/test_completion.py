"""`pinmatrix completion SHELL`: the script bash loads completes commands, options and choices from the parser."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def _script(shell: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "pinmatrix", "completion", shell], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _complete(script: Path, words: list[str]) -> list[str]:
    """COMPREPLY for the command line ``words`` (the last one being completed), as bash's completion calls it."""
    line = " ".join(words)
    code = (f"source {script}\n"
            f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
            f"COMP_LINE={line!r}; COMP_POINT=${{#COMP_LINE}}\n"
            f"_shtab_pinmatrix pinmatrix {words[-1]!r} {words[-2]!r}\n"
            'printf "%s\\n" "${COMPREPLY[@]}"\n')
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return [ln for ln in proc.stdout.splitlines() if ln]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completes_commands_options_and_choices(tmp_path: Path) -> None:
    script = tmp_path / "pinmatrix.bash"
    script.write_text(_script("bash"))
    assert _complete(script, ["pinmatrix", "bu"]) == ["build", "bundle"]
    assert set(_complete(script, ["pinmatrix", ""])) >= {"validate", "cells", "build", "smoke", "promote", "pull",
                                                         "completion"}
    assert _complete(script, ["pinmatrix", "smoke", "--runtime", ""]) == [
        "host", "docker", "podman", "sandbox", "chroot-trusting-root"]
    assert _complete(script, ["pinmatrix", "smoke", "--kernel-c"]) == ["--kernel-cache"]
    assert _complete(script, ["pinmatrix", "completion", ""]) == ["bash", "zsh", "tcsh"]


@pytest.mark.parametrize("shell", ["zsh", "tcsh"])
def test_other_shells_get_a_script_naming_every_command(shell: str) -> None:
    text = _script(shell)
    for command in ("validate", "build", "smoke", "arch-scan", "engine-env", "completion"):
        assert command in text


def test_an_unknown_shell_is_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "pinmatrix", "completion", "fish"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2 and "invalid choice: 'fish'" in proc.stderr and "Traceback" not in proc.stderr
