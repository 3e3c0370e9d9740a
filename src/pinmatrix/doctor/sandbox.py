"""What a sandbox would need on this host, each checked for real: whether this user can make a user namespace
(a child process asks the kernel, ``unshare(CLONE_NEWUSER)``), whether ``bwrap`` (bubblewrap) is on PATH and
answers ``--version``, and whether the GPU's device nodes can be opened for reading and writing by this user.
pinmatrix's sandbox runtime is not built yet: these are its prerequisites, not a promise that one starts."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLONE_NEWUSER = 0x10000000
DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0")
NOT_BUILT = "the sandbox runtime is not built yet: pinmatrix cannot start a sandbox here; listed are what it will need"


def can_make_user_namespace() -> tuple[bool, str]:
    """Ask the kernel in a forked child (the namespace dies with it): (ok, words)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError as err:
        return False, f"cannot load the C library to ask: {err}"
    pid = os.fork()
    if pid == 0:  # the child: try, report through the exit status, never return into the caller
        code = 0 if libc.unshare(CLONE_NEWUSER) == 0 else min(ctypes.get_errno(), 254) or 254
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    uid = os.getuid()
    if code == 0:
        return True, f"this user (uid {uid}) can make a user namespace"
    why = os.strerror(code) if 0 < code < 254 else f"exit status {code}"
    return False, f"this user (uid {uid}) cannot make a user namespace: {why}"


def bwrap_version(timeout: float = 2.0) -> tuple[str | None, str]:
    """(path, words): where bwrap is and what ``bwrap --version`` says; (None, why) when it is not there or fails."""
    exe = shutil.which("bwrap")
    if not exe:
        return None, "bwrap (bubblewrap) is not on PATH"
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=timeout, check=False,
                             errors="replace")
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"{exe} --version did not answer: {err}"
    words = " ".join(out.stdout.split())[:80]
    if out.returncode != 0 or not words:
        return None, f"{exe} --version failed (exit status {out.returncode})"
    return exe, f"{exe}: {words}"


@dataclass(frozen=True)
class SandboxCheck:
    userns: bool
    userns_words: str
    bwrap: str | None
    bwrap_words: str
    devices: dict[str, str]  # node -> "read-write" | "no access" | "absent"

    @property
    def ready(self) -> bool:
        """Whether both prerequisites a user-namespace sandbox needs are here."""
        return self.userns and self.bwrap is not None

    def lines(self) -> list[str]:
        out = [NOT_BUILT, f"user namespaces: {self.userns_words}", f"bubblewrap: {self.bwrap_words}"]
        out += [f"{node}: {state}" for node, state in self.devices.items()]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"runtime": "not built", "note": NOT_BUILT, "user_namespaces": self.userns,
                "user_namespaces_words": self.userns_words, "bwrap": self.bwrap, "bwrap_words": self.bwrap_words,
                "device_nodes": self.devices}


def _device_state(node: str) -> str:
    if not Path(node).exists():
        return "absent"
    return "read-write" if os.access(node, os.R_OK | os.W_OK) else "no access for this user"


def check_sandbox() -> SandboxCheck:
    userns, words = can_make_user_namespace()
    exe, bwords = bwrap_version()
    return SandboxCheck(userns, words, exe, bwords, {node: _device_state(node) for node in DEVICE_NODES})
