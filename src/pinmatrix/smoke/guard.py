"""A smoke dies with its runner, however the runner dies.

Each smoke runs in its own process group. Three things make sure nothing of it outlives the runner:

1. the smoke's first process asks the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``, set
   between fork and exec), so a ``kill -9`` of the runner takes it down at once;
2. a guard process (this file, run by path with ``python -I -S``: standard library only), started before
   the smoke, holds the read end of a pipe whose only writer is the runner; the runner writes the smoke's
   process group id into it once the smoke exists. When the runner is done with the smoke, or is killed,
   the pipe reaches end-of-file and the guard SIGKILLs that process group and every process whose
   environment carries the smoke's token (``PINMATRIX_SMOKE_TOKEN``: children that left the group with
   setsid, and all of them when the runner died before it could name the group), then runs an optional
   clean-up command (``docker rm --force NAME`` for a container smoke);
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
        import ctypes  # noqa: PLC0415 - the guard starts (python -I -S) even where ctypes cannot load libc

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


def start_guard(token: str, cleanup: list[str] | None = None,
                env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """Start the guard for the smoke that will carry ``token``. Returns the guard and the write end of its
    pipe: write the smoke's process group id there (``name_group``), then close it (or die) and the guard
    sweeps. ``env``: the guard's (and its clean-up's) environment; it must not carry the token."""
    read_end, write_end = os.pipe()
    try:
        guard = subprocess.Popen(
            [sys.executable, "-I", "-S", __file__, str(read_end), token, "--", *(cleanup or [])],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(read_end,), start_new_session=True,
            env={k: v for k, v in (os.environ if env is None else env).items() if k != TOKEN_ENV},
        )
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    return guard, write_end


def name_group(fd: int, pgid: int) -> None:
    """Tell the guard behind ``fd`` the smoke's process group."""
    os.write(fd, f"{pgid}\n".encode())


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


def sweep(pgids: list[int], token: str, rounds: int = 5) -> None:
    """SIGKILL the groups and every process carrying the token, until none is left (or ``rounds`` passes)."""
    for _ in range(rounds):
        for pgid in pgids:
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
    fd, token = int(argv[1]), argv[2]
    cleanup = argv[4:]
    received = b""
    try:
        while chunk := os.read(fd, 4096):
            received += chunk[:4096]
    except OSError:
        pass
    pgids = [int(x) for x in received.split() if x.isdigit() and int(x) > 1]
    sweep(pgids, token)
    if cleanup:
        try:
            subprocess.run(cleanup, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=120, check=False)
        except (OSError, subprocess.SubprocessError):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
