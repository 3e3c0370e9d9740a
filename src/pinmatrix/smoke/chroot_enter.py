"""Enter an unpacked image root and become its smoke (run by path with ``python -I -S``: standard library only).

    python -I -S chroot_enter.py SPEC.json

The runner starts this as the smoke's first process; it ends by exec'ing the smoke, so the process the runner
times, signals and reaps (and whose group the guard sweeps) is the smoke itself. In order:

1. a mount namespace of its own, nothing propagating back to the host (``os.unshare`` on Python >= 3.12, else the
   runtime started it under util-linux ``unshare --mount --propagation private``), and a user namespace too when
   the runner is not root (the caller maps this user to root inside);
2. the root: an overlay of the unpacked image (read-only below, this smoke's writes in a scratch folder above,
   so no smoke changes the image for the next); where overlayfs is missing the root is bound in place;
3. ``/proc`` and ``/sys`` bound from the host, a fresh ``/dev`` holding only null, zero, full, random, urandom,
   tty, a private ``/dev/shm`` and the GPU nodes named in the spec;
4. the driver's libraries (each real file bound read-only, its other names as symlinks beside it) and nvidia-smi
   in a folder of their own; the smoke catalogue, the in-cell runtime and the smoke's output folder;
5. chroot, the image's working directory, its user and groups, parent-death signal again (a change of user clears
   it), then exec of the image's interpreter with the image's environment.

A failure before the exec is infrastructure, not a smoke result: its line goes to the spec's ``error_file`` and
stderr, and the exit status is 125.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import stat
import sys

SETUP_FAILED = 125
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
BASIC_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")

_libc = ctypes.CDLL(None, use_errno=True)


class SetupError(Exception):
    pass


PHASE = ["starting"]  # what enter() was doing, for the one line a failure becomes


def phase(what: str) -> None:
    PHASE[0] = what


def _b(value: str | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if _libc.mount(_b(source), _b(target), _b(fstype), ctypes.c_ulong(flags), _b(data)) != 0:
        err = ctypes.get_errno()
        raise SetupError(f"mount {source or fstype} on {target}: {os.strerror(err)}")


def bind(source: str, target: str, *, readonly: bool = False, recursive: bool = False) -> None:
    mount(source, target, None, MS_BIND | (MS_REC if recursive else 0))
    if readonly:
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)


def inside(root: str, path: str, *, kind: str) -> str:
    """``path`` (absolute, inside the image) under ``root``, its folders made where missing, never through a
    symlink; the last component made as a folder or an empty file (a mount point) when ``kind`` says so."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts or not parts:
        raise SetupError(f"mount point {path!r} is not a plain absolute path")
    current = root
    for n, part in enumerate(parts):
        current = os.path.join(current, part)
        last = n == len(parts) - 1
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            if last and kind == "file":
                os.close(os.open(current, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
            elif not last or kind == "dir":
                os.mkdir(current, 0o755)
            continue
        if stat.S_ISLNK(st.st_mode) and not (last and kind == "none"):
            raise SetupError(f"the image has a symlink at /{'/'.join(parts[:n + 1])}, where pinmatrix mounts {path}")
    return current


def make_root(spec: dict) -> str:  # type: ignore[type-arg]
    scratch, lower = spec["scratch"], spec["lower"]
    root = os.path.join(scratch, "mnt")
    os.makedirs(root, exist_ok=True)
    for where in (scratch, None):
        if where is None:  # the scratch folder's filesystem cannot hold an overlay's upper layer: memory then
            where = os.path.join(scratch, "tmpfs")
            os.makedirs(where, exist_ok=True)
            try:
                mount("tmpfs", where, "tmpfs", MS_NOSUID, "mode=0700")
            except SetupError:
                break
        upper, work = os.path.join(where, "upper"), os.path.join(where, "work")
        os.makedirs(upper, exist_ok=True)
        os.makedirs(work, exist_ok=True)
        try:
            mount("overlay", root, "overlay", 0, f"lowerdir={lower},upperdir={upper},workdir={work}")
            return root
        except SetupError as err:
            note = str(err)
    print(f"pinmatrix chroot: no overlay ({note}): the unpacked root is used in place", file=sys.stderr)
    bind(lower, root)
    return root


def populate(spec: dict, root: str) -> None:  # type: ignore[type-arg]
    bind("/proc", inside(root, "/proc", kind="dir"), recursive=True)
    sys_dir = inside(root, "/sys", kind="dir")
    bind("/sys", sys_dir, recursive=True)
    try:
        mount(None, sys_dir, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    except SetupError:
        pass  # read-only where the kernel allows it
    dev = inside(root, "/dev", kind="dir")
    mount("tmpfs", dev, "tmpfs", MS_NOSUID, "mode=0755,size=65536k")
    for name in BASIC_DEVICES:
        if os.path.exists(f"/dev/{name}"):
            bind(f"/dev/{name}", inside(root, f"/dev/{name}", kind="file"))
    mount("tmpfs", inside(root, "/dev/shm", kind="dir"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, os.path.join(dev, name))
    for node in spec.get("devices", []):
        name = node.rsplit("/", 1)[-1]
        if os.path.isdir(node):
            bind(node, inside(root, f"/dev/{name}", kind="dir"), recursive=True)
        else:
            bind(node, inside(root, f"/dev/{name}", kind="file"))
    driver = spec.get("driver") or {}
    if driver.get("libraries") or driver.get("binaries"):
        lib_dir = inside(root, driver["dir"] + "/lib", kind="dir")
        for lib in driver.get("libraries", []):
            real = os.path.basename(lib["source"])
            bind(lib["source"], inside(root, f"{driver['dir']}/lib/{real}", kind="file"), readonly=True)
            for alias in lib["names"]:
                if alias != real and "/" not in alias and not os.path.lexists(os.path.join(lib_dir, alias)):
                    os.symlink(real, os.path.join(lib_dir, alias))
        for binary in driver.get("binaries", []):
            name = os.path.basename(binary)
            bind(binary, inside(root, f"{driver['dir']}/bin/{name}", kind="file"), readonly=True)
    for item in spec.get("binds", []):
        kind = "dir" if os.path.isdir(item["source"]) else "file"
        bind(item["source"], inside(root, item["target"], kind=kind), readonly=item.get("readonly", True),
             recursive=kind == "dir")


def enter(spec: dict) -> None:  # type: ignore[type-arg]
    phase("making the mount namespace")
    if not spec.get("unshared"):
        flags = CLONE_NEWNS | (CLONE_NEWUSER if spec.get("userns") else 0)
        uid, gid = os.getuid(), os.getgid()
        try:
            os.unshare(flags)  # type: ignore[attr-defined]  # Python >= 3.12; else the runtime used unshare(1)
        except (AttributeError, OSError) as err:
            raise SetupError(f"cannot make a mount namespace: {err}") from None
        if spec.get("userns"):
            with open("/proc/self/setgroups", "w") as fh:
                fh.write("deny")
            with open("/proc/self/uid_map", "w") as fh:
                fh.write(f"0 {uid} 1")
            with open("/proc/self/gid_map", "w") as fh:
                fh.write(f"0 {gid} 1")
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here reaches the host
    phase("mounting the root")
    root = make_root(spec)
    phase("binding /proc, /sys, /dev, the driver and the catalogue into the root")
    populate(spec, root)
    phase("entering the root")
    os.chroot(root)
    os.chdir("/")
    cwd = spec.get("cwd") or "/"
    phase(f"entering the working directory {cwd}")
    os.makedirs(cwd, exist_ok=True)
    os.chdir(cwd)
    uid, gid = int(spec.get("uid", 0)), int(spec.get("gid", 0))
    groups = sorted({int(g) for g in spec.get("groups", [])})
    phase(f"becoming uid {uid} gid {gid} groups {groups}")
    if spec.get("userns"):  # this user is root in here and may not set groups: the image's user must be root
        if (uid, gid) != (0, 0):
            raise SetupError(f"in a user namespace only root is mapped, and the image runs as {uid}:{gid}")
    elif (uid, gid) != (os.getuid(), os.getgid()) or groups != sorted(set(os.getgroups())):
        os.setgroups(groups)
        os.setgid(gid)
        os.setuid(uid)
    _libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)  # cleared by the change of user
    if os.getppid() != int(spec["parent"]):
        os._exit(137)  # the runner is already gone


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: chroot_enter.py SPEC.json", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as fh:
        spec = json.load(fh)  # written by the runtime (chroot.py) a moment ago
    # opened now, before the chroot hides the host's folders; closed by the exec when all went well
    error_fd = os.open(spec["error_file"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        enter(spec)
        env = dict(spec["env"])
        token = os.environ.get("PINMATRIX_SMOKE_TOKEN")
        if token:
            env["PINMATRIX_SMOKE_TOKEN"] = token  # the guard finds the smoke's processes by it
        program = spec["argv"][0]
        if "/" not in program:
            for folder in env.get("PATH", "/usr/bin:/bin").split(":"):
                if folder and os.access(os.path.join(folder, program), os.X_OK):
                    program = os.path.join(folder, program)
                    break
        phase(f"starting {program}")
        os.execve(program, spec["argv"], env)
    except SetupError as err:
        line = f"pinmatrix chroot: setup failed: {err}"
    except Exception as err:  # noqa: BLE001 - whatever stops the setup is infrastructure, said in one line
        line = f"pinmatrix chroot: setup failed while {PHASE[0]}: {type(err).__name__}: {err}"
    os.write(error_fd, (line + "\n").encode())
    print(line, file=sys.stderr)
    return SETUP_FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv))
