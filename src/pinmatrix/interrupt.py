"""Ctrl-C, handled the same way by every command: the process says "interrupted" at once, stops the child
processes it started (by their process group: SIGTERM, then SIGKILL), removes the temporary folders it had made,
and exits 130, without waiting for a step running in a worker thread.

Long steps (mmdebstrap, uv) run their tools through ``run`` (a process group of its own, so the terminal's SIGINT
reaches only pinmatrix, which then stops the group) and make their scratch folders with ``scratch_folder``. A
worker whose step failed asks ``pending()`` whether that was the interrupt: its cell is then not reported failed
but named by the interrupt's message ("interrupted, not failed"). cli.py calls ``install()`` in the real process
and ``stop()`` when KeyboardInterrupt reaches it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

EXIT_CODE = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
GRACE_S = 1.0  # how long a stopped group gets to end on SIGTERM before SIGKILL

_EVENT = threading.Event()
_LOCK = threading.Lock()
_GROUPS: set[int] = set()  # process group ids of running children started by ``run``
_FOLDERS: set[Path] = set()  # scratch folders to remove when interrupted


def pending(wait_s: float = 0.0) -> bool:
    """Whether Ctrl-C was pressed (waiting up to ``wait_s`` for the main thread to notice one)."""
    return _EVENT.wait(wait_s) if wait_s > 0 else _EVENT.is_set()


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    _EVENT.set()  # before anything else: workers whose child just died ask for it
    raise KeyboardInterrupt


def install() -> None:
    """Take SIGINT in this process (main thread only): mark the interrupt, then raise KeyboardInterrupt. Where
    SIGINT is ignored (a background job of a non-interactive shell) or handled otherwise, it stays so."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def run(argv: Sequence[str], *, capture_output: bool = False, input: Any = None, timeout: float | None = None,
        check: bool = False, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` in a process group of its own, which ``stop`` ends when the command is interrupted (and
    which a timeout ends whole, the tool's own children included)."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with subprocess.Popen(argv, start_new_session=True, **kwargs) as proc:
        with _LOCK:
            _GROUPS.add(proc.pid)
        try:
            stdout, stderr = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            _end_groups({proc.pid})
            raise
        finally:
            with _LOCK:
                _GROUPS.discard(proc.pid)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    if check:
        done.check_returncode()
    return done


@contextmanager
def scratch_folder(prefix: str, parent: Path | None = None) -> Iterator[Path]:
    """A temporary folder, removed when the block ends and also when the command is interrupted in it."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    with _LOCK:
        _FOLDERS.add(folder)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        with _LOCK:
            _FOLDERS.discard(folder)


def _mounted_under(folder: Path) -> list[str]:
    """Mount points at or below ``folder``: never removed through (a tool killed mid-way may leave /proc bound)."""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    top = str(folder.resolve())
    points = [line.split()[1].replace("\\040", " ") for line in lines if len(line.split()) > 1]
    return [p for p in points if p == top or p.startswith(top + "/")]


def _end_groups(groups: set[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + GRACE_S
        while groups and time.monotonic() < deadline:
            groups = {g for g in groups if _group_alive(g)}
            time.sleep(0.05)
        if not groups:
            return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return any(_pgid_of(pid) == pgid for pid in _pids())  # zombies count as ended (their waiter reaps them)


def _own_children() -> list[int]:
    """This process's living children (a tool started without ``run``), from /proc."""
    me, found = os.getpid(), []
    for pid in _pids():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[1]) == me:
            found.append(pid)
    return found


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _pgid_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[2]) if fields[0] != "Z" else None


def stop(*, every_child: bool = False) -> list[str]:
    """After Ctrl-C: end every running child's group (``every_child``: also any other child of this process,
    when the process is about to end), then remove the scratch folders. Returns one line per folder left in
    place (something is still mounted in it), for the caller to print."""
    with _LOCK:
        groups, folders = set(_GROUPS), set(_FOLDERS)
    for pid in _own_children() if every_child else []:  # its group if it leads one, else itself
        if _pgid_of(pid) == pid:
            groups.add(pid)
        else:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    _end_groups(groups)
    left = []
    for folder in folders:
        mounts = _mounted_under(folder)
        if mounts:
            left.append(f"left {folder} in place: {mounts[0]} is still mounted in it")
            continue
        shutil.rmtree(folder, ignore_errors=True)
    return left


def exit_now() -> None:
    """End the process with EXIT_CODE at once: a step running in a worker thread is not waited for."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream.isatty():
                stream.write("\x1b[?25h")  # a progress display hid the cursor; it cannot show it again now
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(EXIT_CODE)
