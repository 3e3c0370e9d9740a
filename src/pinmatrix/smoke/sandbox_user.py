"""What an image's config asks of the process that runs in it, resolved inside the unpacked root and never
through a symlink: its ``User`` (against the image's own /etc/passwd and /etc/group, as engines read them) and its
``WorkingDir``, and the folders and files pinmatrix mounts over (made where missing, so that a read-only root can
take them). A value that cannot be honoured is one line (``ImageRunRefused``, exit 2): a user the image does not
list, an id no kernel takes, a working directory under /proc or /sys or through a link."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from pinmatrix.errors import PinmatrixError

MAX_ACCOUNT_FILE = 1 << 20
MAX_ID = (1 << 32) - 2  # uid_t is 32 bits and (uid_t)-1 means "unchanged" to the kernel
KERNEL_FOLDERS = ("proc", "sys")  # the sandbox's own /proc, and no /sys: nothing of the image's may sit there


class ImageRunRefused(PinmatrixError):
    """This image cannot run here as its config asks (its user, its working directory, a mount point), or this
    host cannot run it: one line saying why."""


@dataclass(frozen=True)
class ImageUser:
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str


def _parts(path: str, what: str) -> list[str]:
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not path.startswith("/") or ".." in parts or "\0" in path or len(path) > 4096:
        raise ImageRunRefused(f"{what} {path[:200]!r}: not a plain absolute path (no '..')")
    return parts


def in_root(root: Path, path: str, *, what: str, make: str | None = None) -> Path:
    """``path`` (absolute, inside the image) under ``root``, walked one component at a time without following any
    symlink; with ``make`` ("dir" or "file") the missing components are made (the last one as ``make`` says),
    so that a mount point exists in a root the sandbox binds read-only."""
    current = root
    parts = _parts(path, what)
    for n, part in enumerate(parts):
        current = current / part
        last = n == len(parts) - 1
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            if make is None:
                raise ImageRunRefused(f"{what} {path!r}: /{'/'.join(parts[:n + 1])} is not in the image") from None
            _make(current, "file" if last and make == "file" else "dir")
            continue
        except OSError as err:  # a folder of the image this user may not enter (mode 0644)
            raise ImageRunRefused(f"{what} {path!r}: /{'/'.join(parts[:n + 1])}: {err.strerror or err} in the "
                                  "unpacked root") from None
        if stat.S_ISLNK(st.st_mode):
            raise ImageRunRefused(f"{what} {path!r}: /{'/'.join(parts[:n + 1])} is a symlink in the image "
                                  "(pinmatrix follows none inside a root)")
        if not last and not stat.S_ISDIR(st.st_mode):
            raise ImageRunRefused(f"{what} {path!r}: /{'/'.join(parts[:n + 1])} is not a folder in the image")
        if last and make == "dir" and not stat.S_ISDIR(st.st_mode):
            raise ImageRunRefused(f"{what} {path!r}: a file in the image, where a folder is mounted")
    return current


def _make(path: Path, kind: str) -> None:
    """A missing folder or empty file, made in a folder of the root that may be read-only for its owner (an image
    folder of mode 0555 unpacked by an ordinary user): write permission is lent for the moment and given back."""
    parent = path.parent
    mode = stat.S_IMODE(os.lstat(parent).st_mode)
    lent = not os.access(parent, os.W_OK) and os.lstat(parent).st_uid == os.geteuid()
    if lent:
        os.chmod(parent, mode | stat.S_IWUSR | stat.S_IXUSR)
    try:
        if kind == "dir":
            os.mkdir(path, 0o755)
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644))
    finally:
        if lent:
            os.chmod(parent, mode)


def working_dir(root: Path, path: str) -> str:
    """The image's WorkingDir, made in the root where missing (as engines do); refused under /proc or /sys (the
    sandbox's own, or the host's in another runtime) and through any symlink."""
    parts = _parts(path, "WorkingDir")
    if parts and parts[0] in KERNEL_FOLDERS:
        raise ImageRunRefused(f"WorkingDir {path!r}: under /{parts[0]}, which is the kernel's, not the image's")
    in_root(root, path, what="WorkingDir", make="dir")
    return "/" + "/".join(parts)


def _read_in_root(root: Path, path: str) -> str | None:
    """A small file of the image (``/etc/passwd``), read without following any link out of the root."""
    try:
        found = in_root(root, path, what="account file")
    except ImageRunRefused:
        return None
    st = os.lstat(found)
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ACCOUNT_FILE:
        return None
    return found.read_text(encoding="utf-8", errors="replace")


def _an_id(value: str, what: str, user: str) -> int:
    number = int(value)
    if number > MAX_ID:
        raise ImageRunRefused(f"the image's User {user[:80]!r}: {what} {value[:40]} is above {MAX_ID}, the largest "
                              "id the kernel takes")
    return number


def resolve_user(root: Path, user: str) -> ImageUser:
    """The image config's ``User`` (``name``, ``uid``, ``name:group``, ``uid:gid``; empty: root) against the
    image's own /etc/passwd and /etc/group, as engines do."""
    passwd = [line.split(":") for line in (_read_in_root(root, "/etc/passwd") or "").splitlines()]
    groups = [line.split(":") for line in (_read_in_root(root, "/etc/group") or "").splitlines()]
    passwd = [p for p in passwd if len(p) >= 7 and p[2].isdigit() and p[3].isdigit()]
    groups = [g for g in groups if len(g) >= 4 and g[2].isdigit()]
    name, _, group = (user or "0").partition(":")
    entry = next((p for p in passwd if p[0] == name), None) or next((p for p in passwd if p[2] == name), None)
    if entry is not None:
        uid, gid = _an_id(entry[2], "uid", user), _an_id(entry[3], "gid", user)
        home, login = entry[5] or "/", entry[0]
    elif name.isdigit():  # a uid the image does not list: its own group, as engines do
        uid = gid = _an_id(name, "uid", user)
        home, login = "/", ""
    else:
        raise ImageRunRefused(f"the image's user {user[:80]!r} is not in its /etc/passwd")
    if group:
        found = next((g for g in groups if g[0] == group), None) or next((g for g in groups if g[2] == group), None)
        if found is not None:
            gid = _an_id(found[2], "gid", user)
        elif group.isdigit():
            gid = _an_id(group, "gid", user)
        else:
            raise ImageRunRefused(f"the image's group {group[:80]!r} is not in its /etc/group")
    extra = sorted({_an_id(g[2], "gid", user) for g in groups if login and login in g[3].split(",")} | {gid})
    return ImageUser(uid, gid, tuple(extra), home if uid != 0 or home != "/" else "/root")

