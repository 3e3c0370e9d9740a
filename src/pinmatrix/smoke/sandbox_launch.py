"""Start one sandboxed smoke (run by path with ``python -I -S``: standard library only).

    python -I -S sandbox_launch.py SPEC.json

The runner starts this as the smoke's first process; it starts bwrap and waits for it, so the process the runner times,
signals and reaps is the sandbox itself. In order:

1. as root, every host path the sandbox binds is made reachable by the unprivileged id without opening the roots
   folder (0700) to it: in a mount namespace of the launcher's own (nothing propagates to the host), a tmpfs on the
   spec's ``stage`` folder (an empty 0755 folder) holds one bind mount per path, and bwrap is given those; as an
   ordinary user, the paths themselves;
2. as root, the drop to the spec's unprivileged id (no groups, real, effective and saved ids), checked; the
   parent-death signal set again (a change of ids clears it), and the runner checked to be still there;
3. bwrap started with an empty environment: the smoke's variables reach the sandbox only as ``--setenv``, so no
   variable of the image (``LD_PRELOAD``...) touches a process outside it. The guard's token is passed on;
4. this process stays as bwrap's parent and passes on the signals the runner sends (SIGABRT at a timeout, so that
   faulthandler writes a hang's stacks; SIGTERM, SIGINT, SIGHUP) to the smoke's own process, the first child of
   the sandbox's init (bwrap's ``--json-status-fd`` names the init), and exits with bwrap's status.

A failure before the exec is infrastructure, not a smoke result: its line goes to the spec's ``error_file`` and
stderr, and the exit status is 125.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys

SETUP_FAILED = 125
PR_SET_PDEATHSIG = 1
TOKEN = "PINMATRIX_SMOKE_TOKEN"  # smoke/guard.py's TOKEN_ENV: the guard finds the smoke's processes by it


CLONE_NEWNS = 0x00020000
MS_NOSUID = 2
MS_NODEV = 4
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)


def _call(result: int, what: str) -> None:
    if result != 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = [None if v is None else os.fsencode(v) for v in (source, target, fstype, data)]
    _call(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {source or fstype} on {target}")


def stage(sources: list[str], where: str) -> list[str]:
    """Each source bind-mounted at ``where/N`` in a mount namespace of this process's own (see the module's text)."""
    _call(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here reaches the host
    mount("tmpfs", where, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
    staged = []
    for n, source in enumerate(sources):
        target = os.path.join(where, str(n))
        if os.path.isdir(source):
            os.mkdir(target, 0o755)
        else:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        mount(source, target, None, MS_BIND | MS_REC)
        staged.append(target)
    return staged


def arguments(spec: dict) -> list[str]:  # type: ignore[type-arg]
    """bwrap's argv: each ``{"path": p}`` item becomes ``p``, or its staged place when the spec says ``stage``."""
    sources = [item["path"] for item in spec["setup"] if isinstance(item, dict)]
    places = iter(stage(sources, spec["stage"]) if spec.get("stage") else sources)
    argv = [spec["bwrap"]] + [next(places) if isinstance(item, dict) else str(item) for item in spec["setup"]]
    token = os.environ.get(TOKEN)
    if token:
        argv += ["--setenv", TOKEN, token]
    return [*argv, "--", *spec["command"]]


def drop(uid: int, gid: int, parent: int) -> None:
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
        raise OSError(f"the drop to {uid}:{gid} did not hold")
    _libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(137)  # the runner is already gone


FORWARDED = (signal.SIGABRT, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def smoke_process(init: int) -> int | None:
    """The smoke's own process: the first child of the sandbox's init (bwrap's, pid 1 inside). Read as bytes, as
    the status pipe is: after the drop, no module of the standard library that is not loaded yet can be (root's
    interpreter may live under /root), an encoding's codec included."""
    try:
        with open(f"/proc/{init}/task/{init}/children", "rb") as fh:
            children = fh.read().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def supervise(bwrap: str, args: list[str], error_fd: int) -> int:
    """bwrap started as a child of this process, the runner's signals passed on to the smoke; bwrap's status."""
    status_r, status_w = os.pipe()
    os.set_inheritable(status_w, True)
    cut = args.index("--")
    args = [*args[:cut], "--json-status-fd", str(status_w), *args[cut:]]
    child = os.fork()
    if child == 0:
        try:
            os.execve(bwrap, args, {})
        except OSError as err:
            os.write(error_fd, f"pinmatrix sandbox: setup failed: cannot start {bwrap}: {err}\n".encode())
        os._exit(SETUP_FAILED)
    os.close(status_w)
    init: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        target = smoke_process(init[0]) if init else None
        try:
            os.kill(target or child, signum)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    with os.fdopen(status_r, "rb") as status:
        for line in status:  # until bwrap closes it; a signal's handler runs between reads
            try:
                document = json.loads(line)
            except ValueError:
                continue
            if isinstance(document, dict) and isinstance(document.get("child-pid"), int):
                init.append(document["child-pid"])
    code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    return code if code >= 0 else 128 - code


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: sandbox_launch.py SPEC.json", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as fh:
        spec = json.load(fh)  # written by the runtime (sandbox.py) a moment ago
    error_fd = os.open(spec["error_file"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        args = arguments(spec)
        if spec.get("drop"):
            uid, gid = spec["drop"]
            drop(int(uid), int(gid), int(spec["parent"]))
        return supervise(spec["bwrap"], args, error_fd)
    except Exception as err:  # noqa: BLE001 - whatever stops the start is infrastructure, said in one line
        line = f"pinmatrix sandbox: setup failed: {type(err).__name__}: {err}"
    os.write(error_fd, (line + "\n").encode())
    print(line, file=sys.stderr)
    return SETUP_FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv))
