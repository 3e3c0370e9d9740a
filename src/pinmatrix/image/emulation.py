"""An image of another architecture, run here under emulation: where the kernel hands that architecture's
programs to qemu-user (binfmt_misc, with the F flag so that a container's root need not hold the interpreter;
Debian: qemu-user-static, binfmt-support), an in-image import smoke runs the cell's packages' imports in a
container of the image. Slow (a CUDA stack imports in minutes), so it is asked for, never implied."""

from __future__ import annotations

import platform
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from pinmatrix.engine.base import OCIEngine
from pinmatrix.errors import PinmatrixError

BINFMT = Path("/proc/sys/fs/binfmt_misc")
QEMU_ENTRY = {"arm64": "qemu-aarch64", "amd64": "qemu-x86_64"}
HOST_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
# The package axes whose import name is the axis name (flashinfer-python imports as flashinfer).
MAX_OUTPUT = 4000  # characters of the smoke's output kept


class EmulationError(PinmatrixError):
    """The import smoke could not be run (no emulation for the image's architecture)."""


@dataclass(frozen=True)
class ImportSmoke:
    ref: str
    modules: tuple[str, ...]
    ok: bool
    seconds: float
    output: str  # the tail of the container's output

    def line(self) -> str:
        state = "ok" if self.ok else "FAILED"
        return f"import {', '.join(self.modules)} in {self.ref}: {state} in {self.seconds:.0f} s"


def emulation_problem(arch: str, binfmt: Path = BINFMT, machine: str | None = None) -> str | None:
    """None when programs of ``arch`` (amd64, arm64) run here: natively, or through an enabled binfmt_misc entry
    with the F flag; else why not, with what to do."""
    host = HOST_ARCH.get(machine or platform.machine())
    if host == arch:
        return None
    name = QEMU_ENTRY.get(arch)
    if name is None:
        return f"no emulator is known for {arch}"
    entry = binfmt / name
    if not (binfmt / "status").is_file():
        return (f"binfmt_misc is not mounted at {binfmt} (mount -t binfmt_misc binfmt_misc {binfmt}; "
                "apt-get install qemu-user-static binfmt-support)")
    try:
        text = entry.read_text(encoding="utf-8", errors="replace")[:4096]
    except OSError:
        return f"no binfmt_misc entry {entry} (apt-get install qemu-user-static binfmt-support; update-binfmts --enable {name})"
    lines = text.splitlines()
    if not lines or lines[0].strip() != "enabled":
        return f"the binfmt_misc entry {entry} is disabled (update-binfmts --enable {name})"
    flags = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("flags:")), "")
    if "F" not in flags:
        return (f"the binfmt_misc entry {entry} lacks the F flag: a container cannot reach its interpreter "
                "(qemu-user-static registers it with F)")
    return None


def import_smoke(engine: OCIEngine, ref: str, arch: str, modules: tuple[str, ...], *, timeout: float = 1800,
                 binfmt: Path = BINFMT) -> ImportSmoke:
    """``python -c "import M1, M2"`` in a container of ``ref`` (no network, no GPU), under emulation where the
    image is of another architecture. EmulationError when that architecture cannot run here."""
    problem = emulation_problem(arch, binfmt)
    if problem is not None:
        raise EmulationError(f"{ref}: cannot run {arch} programs here: {problem}")
    if not modules or not all(m.isidentifier() for m in modules):
        raise EmulationError(f"{ref}: nothing importable to import ({modules!r})")
    start = time.monotonic()
    try:
        proc = engine.run(ref, ["python", "-c", f"import {', '.join(modules)}; print('imported', {modules!r})"],
                          network="none", gpus=False, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return ImportSmoke(ref, modules, False, time.monotonic() - start, f"timed out after {timeout:.0f} s")
    output = (proc.stdout or b"").decode("utf-8", "replace") + (proc.stderr or b"").decode("utf-8", "replace")
    return ImportSmoke(ref, modules, proc.returncode == 0, time.monotonic() - start, output[-MAX_OUTPUT:])
