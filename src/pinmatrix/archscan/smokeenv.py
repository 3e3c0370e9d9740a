"""What the arch-coverage smoke needs from the runner: ``PINMATRIX_LIB``, a folder holding only a link to the
pinmatrix package (so the smoke, in the cell's own Python, imports ``pinmatrix.archscan`` and nothing else of
the host's environment), and ``PINMATRIX_CUOBJDUMP``, cuobjdump from its wheel when the cache has it."""

from __future__ import annotations

import os
from pathlib import Path

import pinmatrix
from pinmatrix.archscan.tools import cache_dir, cuobjdump
from pinmatrix.hashing import sha256_bytes


def smoke_lib_dir() -> Path:
    package = Path(pinmatrix.__file__).resolve().parent
    folder = cache_dir() / "smoke-lib" / sha256_bytes(str(package).encode())[:12]
    link = folder / "pinmatrix"
    if not link.exists():
        folder.mkdir(parents=True, exist_ok=True)
        staging = folder / f".pinmatrix.{os.getpid()}"
        staging.unlink(missing_ok=True)
        staging.symlink_to(package, target_is_directory=True)
        os.replace(staging, link)
    return folder


def smoke_env_vars() -> dict[str, str]:
    """PINMATRIX_LIB and, when cuobjdump is in the cache (never installed from here), PINMATRIX_CUOBJDUMP."""
    out = {"PINMATRIX_LIB": str(smoke_lib_dir())}
    exe = cuobjdump(install=False)
    if exe:
        out["PINMATRIX_CUOBJDUMP"] = exe
    return out
