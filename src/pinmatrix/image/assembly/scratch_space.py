"""Where a scratch root (oci/scratch_unpack.py) is unpacked: in memory when there is room, else under the cache.

The h200 cell's root is 6 GB in 100k files, written once, read by one compile and removed. On a disk every file is
journalled and written back while the build waits on it; on a tmpfs (``/dev/shm``) none is, and its removal takes a
second where the disk's takes six. The root goes there only when that tmpfs lets programs run (no ``noexec``: the
generator runs the cell's Python inside it), has room for the root, and the machine's available memory holds the
root and ``HEADROOM`` beside it for the compile; else, and when the root's size is not known (0), under
``cache_dir/aot``. The root's place is not an input of its layer: the generator runs in a chroot and sees ``/``.

A root in memory holds memory until it is removed, so its folder is named by the process that made it
(``pinmatrix-root-PID-*``), and one left by a process that is gone (killed in the middle of a build) is removed
the next time a root is made there.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from pinmatrix.atomic import process_alive

MEMORY = Path("/dev/shm")
PREFIX = "pinmatrix-root-"
HEADROOM = 4 << 30  # what nvcc and the generator take beside the root (the h200 cell's compile peaks near 3 GB)


def mount_of(path: Path, mounts: str) -> tuple[str, set[str]] | None:
    """The filesystem type and the options of the mount ``path`` is on, from ``/proc/self/mounts`` text."""
    best: tuple[int, str, set[str]] | None = None
    target = str(path)
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= best[0]):
            best = (len(point), fields[2], set(fields[3].split(",")))
    return None if best is None else (best[1], best[2])


def available_memory(meminfo: str) -> int:
    """``MemAvailable`` of ``/proc/meminfo`` text, in bytes (0 when it is not there)."""
    for line in meminfo.splitlines():
        name, _, rest = line.partition(":")
        if name == "MemAvailable" and rest.split() and rest.split()[0].isdigit():
            return int(rest.split()[0]) * 1024
    return 0


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read(1 << 20)
    except OSError:
        return ""


def in_memory(need: int, memory: Path = MEMORY) -> bool:
    """Whether a root of ``need`` bytes goes to ``memory`` (see the module's docstring)."""
    if need <= 0 or not memory.is_dir() or not os.access(memory, os.W_OK):
        return False
    mount = mount_of(memory.resolve(), _read("/proc/self/mounts"))
    if mount is None or mount[0] != "tmpfs" or "noexec" in mount[1]:
        return False
    stats = os.statvfs(memory)
    free = stats.f_bavail * stats.f_frsize
    return free >= need + (256 << 20) and available_memory(_read("/proc/meminfo")) >= need + HEADROOM


def scratch_dir(cache_dir: Path, need: int = 0, memory: Path = MEMORY) -> tempfile.TemporaryDirectory[str]:
    """A fresh folder for a scratch root of ``need`` bytes (0: not known): in ``memory`` when it fits, else under
    ``cache_dir/aot``; removed when the block ends."""
    remove_orphans(memory)
    if in_memory(need, memory):
        return tempfile.TemporaryDirectory(prefix=f"{PREFIX}{os.getpid()}-", dir=memory)
    (cache_dir / "aot").mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix="build-", dir=cache_dir / "aot")


def remove_orphans(memory: Path = MEMORY) -> list[Path]:
    """The roots in ``memory`` whose process is gone, removed when they are this user's folders; what was removed."""
    removed: list[Path] = []
    try:
        entries = list(memory.iterdir())
    except OSError:
        return removed
    for entry in entries:
        pid = entry.name.removeprefix(PREFIX).split("-", 1)[0]
        if not (entry.name.startswith(PREFIX) and pid.isdigit()) or process_alive(int(pid)):
            continue
        try:
            facts = entry.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(facts.st_mode) and facts.st_uid == os.getuid():  # no link, no other user's folder
            remove_tree(entry)
            removed.append(entry)
    return removed


def remove_tree(path: Path) -> None:
    """A scratch root, read-only folders included."""
    def _writable(func: Callable[..., object], name: str, _exc: object) -> None:
        os.chmod(os.path.dirname(name), 0o755)
        func(name)

    if path.exists():
        shutil.rmtree(path, onerror=_writable)
