"""An image of another architecture, run here under emulation: where the kernel hands that architecture's
programs to qemu-user (binfmt_misc, with the F flag so that a container's root need not hold the interpreter;
Debian: qemu-user-static, binfmt-support), an in-image import smoke runs the cell's packages' imports in a
container of the image. Slow (a CUDA stack imports in minutes), so it is asked for, never implied."""

from __future__ import annotations

import platform
from pathlib import Path

from pinmatrix.errors import PinmatrixError

BINFMT = Path("/proc/sys/fs/binfmt_misc")
QEMU_ENTRY = {"arm64": "qemu-aarch64", "amd64": "qemu-x86_64"}
HOST_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
# The package axes whose import name is the axis name (flashinfer-python imports as flashinfer).
MAX_OUTPUT = 4000  # characters of the smoke's output kept


class EmulationError(PinmatrixError):
    """The import smoke could not be run (no emulation for the image's architecture)."""


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
