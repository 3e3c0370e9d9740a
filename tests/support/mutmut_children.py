"""Children of the package's own scripts under mutmut. pinmatrix starts some of its modules as isolated scripts
(``python -I -S guard.py``, the chroot's enter, the sandbox's launcher): under mutmut that file is the mutated copy
in mutants/, which imports mutmut's trampoline, and ``-S`` hides site-packages, so the child dies and every test
that starts one fails (mutmut's stats collection stops the whole session). Such a child runs the original code
anyway (a script's functions are ``__main__``'s, which no mutant names), so under mutmut alone it keeps
site-packages and is told that no mutant is active. Outside mutmut nothing changes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pinmatrix

PACKAGE = Path(pinmatrix.__file__).resolve().parent


def under_mutmut(environ: Mapping[str, str]) -> bool:
    return "MUTANT_UNDER_TEST" in environ


def child_args(args: Any, env: Mapping[str, str] | None,
               environ: Mapping[str, str]) -> tuple[Any, Mapping[str, str] | None]:
    """(args, env) for ``Popen``: ``[python, -I, -S, <a script of the package>, ...]`` without ``-S`` and with
    ``MUTANT_UNDER_TEST`` empty; anything else as given."""
    if not (isinstance(args, Sequence) and not isinstance(args, str | bytes) and len(args) > 3
            and list(args[:3]) == [sys.executable, "-I", "-S"]):
        return args, env
    script = Path(os.fspath(args[3])).resolve()
    if script.suffix != ".py" or not script.is_relative_to(PACKAGE):
        return args, env
    return [args[0], "-I", *args[3:]], {**(environ if env is None else env), "MUTANT_UNDER_TEST": ""}


def install() -> None:
    """Wrap ``subprocess.Popen`` for this test process when mutmut runs it."""
    if not under_mutmut(os.environ):
        return
    original = subprocess.Popen.__init__

    def init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        args, env = child_args(args, kwargs.get("env"), os.environ)
        if env is not None:
            kwargs["env"] = env
        original(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = init  # type: ignore[method-assign]
