"""A smoke dies with its runner, however the runner dies.

Each smoke runs in its own process group. Three things make sure nothing of it outlives the runner:

1. the smoke's first process asks the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``, set
   between fork and exec), so a ``kill -9`` of the runner takes it down at once;
2. a guard process (this file, run by path with ``python -I -S``: standard library only) holds the read end
   of a pipe whose only writer is the runner. When the runner is done with the smoke, or is killed, the pipe
   reaches end-of-file and the guard SIGKILLs the smoke's process group and every process whose environment
   carries the smoke's token (``PINMATRIX_SMOKE_TOKEN``: children that left the group with setsid), then
   runs an optional clean-up command (``docker rm --force NAME`` for a container smoke);
3. the runner itself kills the group after the smoke's first process exits.

The guard runs in a session of its own, ignoring SIGINT and SIGHUP, so Ctrl-C in the runner's terminal does
not take it down before it has swept.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

TOKEN_ENV = "PINMATRIX_SMOKE_TOKEN"
PR_SET_PDEATHSIG = 1


def _libc():  # type: ignore[no-untyped-def]
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True)
    except (OSError, ImportError):  # pragma: no cover - not Linux
        return None


_LIBC = _libc()


def die_with_parent(parent_pid: int) -> None:
    """Run in the child between fork and exec (``preexec_fn``): SIGKILL when the parent dies; exit at once if
    it is already gone (the prctl would then never fire)."""
    if _LIBC is not None and hasattr(_LIBC, "prctl"):
        _LIBC.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(137)


def start_guard(pgid: int, token: str, cleanup: list[str] | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """Start the guard for the smoke whose process group is ``pgid``. Returns the guard and the write end of
    its pipe: close that fd (or die) and the guard sweeps."""
    read_end, write_end = os.pipe()
    try:
        guard = subprocess.Popen(
            [sys.executable, "-I", "-S", __file__, str(read_end), str(pgid), token, "--", *(cleanup or [])],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(read_end,), start_new_session=True,
        )
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    return guard, write_end


def _token_pids(token: str) -> list[int]:
    marker = f"{TOKEN_ENV}={token}".encode()
    me = os.getpid()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if marker in env.split(b"\0"):
            found.append(int(entry))
    return found


def sweep(pgid: int, token: str, rounds: int = 5) -> None:
    """SIGKILL the group and every process carrying the token, until none is left (or ``rounds`` passes)."""
    for _ in range(rounds):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        pids = _token_pids(token)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    fd, pgid, token = int(argv[1]), int(argv[2]), argv[3]
    cleanup = argv[5:]
    try:
        while os.read(fd, 4096):
            pass
    except OSError:
        pass
    sweep(pgid, token)
    if cleanup:
        try:
            subprocess.run(cleanup, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=120, check=False)
        except (OSError, subprocess.SubprocessError):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
