"""CUDA tools from PyPI wheels, installed once into pinmatrix's cache (never required on PATH).

- ``cuobjdump()``: the ``nvidia-cuda-cuobjdump`` wheel; its x86_64 binary reads aarch64 libraries too.
- ``nvcc_toolchain()``: ``nvidia-cuda-nvcc`` + ``nvidia-nvvm`` (cicc) + ``nvidia-cuda-crt`` +
  ``nvidia-cuda-runtime`` + ``nvidia-cuda-cccl``, which with the system's gcc compile small kernels for any
  target without a GPU (the tests build their CUDA binaries with it).

The cache is ``$PINMATRIX_CACHE`` or ``~/.cache/pinmatrix``; each tool set lives in a folder named after its
pins, installed into a staging folder first and renamed, so an interrupted install leaves nothing half-made.
"""

from __future__ import annotations

import fcntl
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from pinmatrix.errors import PinmatrixError
from pinmatrix.index.uv import find_uv

CUOBJDUMP_PINS: tuple[str, ...] = ("nvidia-cuda-cuobjdump==13.2.86",)


class ToolError(PinmatrixError):
    """A CUDA tool could not be installed or run."""


def cache_dir() -> Path:
    return Path(os.environ.get("PINMATRIX_CACHE") or Path.home() / ".cache" / "pinmatrix")


def _host_platform() -> str:
    machine = platform.machine()
    if machine not in ("x86_64", "aarch64"):
        raise ToolError(f"the CUDA tool wheels exist for x86_64 and aarch64 hosts, not {machine}")
    return f"{machine}-manylinux_2_28"


def _slug(pins: Sequence[str]) -> str:
    return "_".join(p.replace("==", "-").replace("nvidia-", "") for p in pins)


def install_wheels(pins: Sequence[str], root: Path | None = None) -> Path:
    """Install ``pins`` (no dependencies) into ``<cache>/tools/<slug>`` once; returns that folder."""
    base = (root or cache_dir()) / "tools"
    target = base / _slug(pins)
    if (target / ".complete").is_file():
        return target
    base.mkdir(parents=True, exist_ok=True)
    with open(base / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").is_file():
            return target

        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=base))
        cmd = [find_uv(), "pip", "install", "--quiet", "--no-deps", "--no-compile", "--target", str(staging),
               "--python", sys.executable, "--python-platform", _host_platform(), *pins]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                              env={**os.environ, "UV_NO_PROGRESS": "1"})
        if proc.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            reason = " ".join(proc.stderr.split())[:400] or f"exit {proc.returncode}"
            raise ToolError(f"could not install {' '.join(pins)} into {base}: {reason}")
        (staging / ".complete").write_text(" ".join(pins) + "\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    return target


def _cuda_root(site: Path) -> Path:
    for candidate in sorted((site / "nvidia").glob("cu*")):
        if (candidate / "bin").is_dir():
            return candidate
    raise ToolError(f"{site}: no nvidia/cu*/bin in the installed wheels")


def cuobjdump(root: Path | None = None, *, install: bool = True) -> str | None:
    """The cuobjdump binary from its PyPI wheel (installed on first use unless ``install`` is False)."""
    site = (root or cache_dir()) / "tools" / _slug(CUOBJDUMP_PINS)
    if not (site / ".complete").is_file():
        if not install:
            return None
        site = install_wheels(CUOBJDUMP_PINS, root)
    exe = _cuda_root(site) / "bin" / "cuobjdump"
    return str(exe) if exe.is_file() else None


def cuobjdump_version(exe: str) -> str:
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False).stdout
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    return lines[-1] if lines else "unknown"


