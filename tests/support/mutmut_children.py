"""Children of the package's own scripts under mutmut. pinmatrix starts some of its scripts as isolated children
(``python -I -S guard.py``, the chroot's enter, the sandbox's launcher, and a bundle's ``unbundle.py``, a copy of
``shipped/unbundle.py`` that the packer reads from the package as imported): under mutmut that file, or its copy,
is the mutated one from mutants/, which imports mutmut's trampoline, and ``-S`` hides site-packages, so the child
dies and every test that starts one fails (mutmut's stats collection stops the whole session). Such a child runs
the original code anyway (a script's functions are ``__main__``'s, which no mutant names), so under mutmut alone it
keeps site-packages and is told that no mutant is active. A script counts when it lies in the package as imported
(``pinmatrix.__file__``'s folder: mutants/src/pinmatrix under mutmut) or has the bytes of one of its ``.py`` files
(their digests are read once, at the first child that needs them). Outside mutmut nothing changes."""

from __future__ import annotations

import functools
import hashlib
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


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@functools.cache
def package_digests() -> frozenset[str]:
    """The sha256 of every ``.py`` file of the package, read once per test process."""
    return frozenset(_sha256(p) for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def package_script(script: Path) -> bool:
    """A ``.py`` file of the package, or a byte-identical copy of one."""
    if script.suffix != ".py" or not script.is_file():
        return False
    return script.is_relative_to(PACKAGE) or _sha256(script) in package_digests()


def child_args(args: Any, env: Mapping[str, str] | None,
               environ: Mapping[str, str]) -> tuple[Any, Mapping[str, str] | None]:
    """(args, env) for ``Popen`` in a process whose environment is ``environ``: under mutmut,
    ``[python, -I, -S, <a package script or a copy of one>, ...]`` without ``-S`` and with ``MUTANT_UNDER_TEST``
    empty; anything else, and everything outside mutmut, as given."""
    if not (under_mutmut(environ) and isinstance(args, Sequence) and not isinstance(args, str | bytes)
            and len(args) > 3 and list(args[:3]) == [sys.executable, "-I", "-S"]):
        return args, env
    if not package_script(Path(os.fspath(args[3])).resolve()):
        return args, env
    return [args[0], "-I", *args[3:]], {**(environ if env is None else env), "MUTANT_UNDER_TEST": ""}


def install(environ: Mapping[str, str] = os.environ) -> None:
    """Wrap ``subprocess.Popen`` for this test process when mutmut runs it (``environ``: this process's
    environment, read again at each child)."""
    if not under_mutmut(environ):
        return
    original = subprocess.Popen.__init__

    def init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        args, env = child_args(args, kwargs.get("env"), environ)
        if env is not None:
            kwargs["env"] = env
        original(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = init  # type: ignore[method-assign]
