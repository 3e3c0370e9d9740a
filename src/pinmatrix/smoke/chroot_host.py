"""What the host gives a chroot smoke, found the way nvidia-container-toolkit finds it: the NVIDIA driver's
user-space libraries (the ``ldconfig -p`` cache first, then the folders drivers are known to live in), the
``nvidia-smi`` binary, the GPU device nodes; and whether this host can run an image at all (privileges: root, or
user namespaces; the image's architecture: natively or through a binfmt_misc handler)."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from pinmatrix.errors import PinmatrixError

# The compute and utility libraries nvidia-container-toolkit mounts (its "compute" and "utility" capabilities).
DRIVER_LIBRARIES = (
    "libcuda.so", "libcudadebugger.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so", "libnvidia-nvvm.so",
    "libnvidia-gpucomp.so", "libnvidia-allocator.so", "libnvidia-cfg.so", "libnvidia-opencl.so",
)
KNOWN_LIBRARY_DIRS = (
    "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64", "/usr/lib", "/usr/lib/x86_64-linux-gnu/nvidia/current", "/usr/lib/aarch64-linux-gnu/nvidia/current",
)
KNOWN_BIN_DIRS = ("/usr/local/nvidia/bin", "/usr/bin", "/usr/local/bin", "/bin")
BASIC_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
_GPU_NODE = re.compile(r"^nvidia(\d+|ctl|-uvm|-uvm-tools|-modeset)$")
# image config architecture -> (uname machine, ELF e_machine as the two little-endian bytes at offset 18)
ARCHITECTURES = {"amd64": ("x86_64", "3e00"), "arm64": ("aarch64", "b700"), "ppc64le": ("ppc64le", "1500"),
                 "s390x": ("s390x", "0016"), "riscv64": ("riscv64", "f300")}
_LDCONFIG_ABI = {"x86_64": "x86-64", "aarch64": "AArch64"}


class ChrootRefused(PinmatrixError):
    """The chroot runtime cannot work on this host: one line saying why."""


@dataclass(frozen=True)
class DriverFiles:
    """The driver files to bind into a root: real files, and the names (symlinks) each goes by."""

    libraries: dict[Path, tuple[str, ...]] = field(default_factory=dict)  # real file -> names in the lib folder
    binaries: tuple[Path, ...] = ()  # nvidia-smi

    @property
    def found(self) -> bool:
        return any(p.name.startswith("libcuda.so") for p in self.libraries)


def _ldconfig_cache(machine: str) -> dict[str, Path]:
    """soname -> path from ``ldconfig -p`` for this machine's ABI."""
    ldconfig = shutil.which("ldconfig") or ("/sbin/ldconfig" if os.path.exists("/sbin/ldconfig") else None)
    if ldconfig is None:
        return {}
    try:
        text = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    abi = _LDCONFIG_ABI.get(machine, machine)
    out: dict[str, Path] = {}
    for line in text.splitlines()[1:]:
        m = re.match(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)\s*$", line)
        if m and (abi in m.group(2) or "," not in m.group(2)):
            out.setdefault(m.group(1), Path(m.group(3)))
    return out


def find_driver(machine: str | None = None, *, library_dirs: tuple[str, ...] = KNOWN_LIBRARY_DIRS,
                bin_dirs: tuple[str, ...] = KNOWN_BIN_DIRS, use_ldconfig: bool = True) -> DriverFiles:
    """The host's NVIDIA driver libraries and nvidia-smi. Each library is taken from the folder where libcuda
    was found (the ldconfig cache first, then the known folders), so all of them are of one driver."""
    machine = machine or platform.machine()
    folders: list[Path] = []
    if use_ldconfig:
        cached = _ldconfig_cache(machine)
        for soname in ("libcuda.so.1", "libcuda.so"):
            if soname in cached:
                folders.append(cached[soname].parent)
    folders += [Path(d) for d in library_dirs]
    home = next((d for d in folders if any(d.glob("libcuda.so*"))), None)
    libraries: dict[Path, set[str]] = {}
    if home is not None:
        for base in DRIVER_LIBRARIES:
            names = sorted(home.glob(base + "*"))
            for path in names:
                try:
                    real = path.resolve(strict=True)
                except (OSError, RuntimeError):
                    continue
                if not real.is_file():
                    continue
                aliases = libraries.setdefault(real, set())
                aliases.add(path.name)
                aliases.add(real.name)
            reals = {p.resolve() for p in names if p.exists()}
            if len(reals) == 1:  # the names toolkits and linkers look for (-lcuda needs libcuda.so)
                libraries[next(iter(reals))] |= {base, base + ".1"}
    binaries = []
    for folder in bin_dirs:
        smi = Path(folder) / "nvidia-smi"
        if smi.is_file() and os.access(smi, os.X_OK):
            binaries.append(smi.resolve())
            break
    return DriverFiles({p: tuple(sorted(n)) for p, n in sorted(libraries.items())}, tuple(binaries))


def gpu_device_nodes(dev: Path = Path("/dev")) -> list[Path]:
    """/dev/nvidia0, nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset, and the nvidia-caps folder."""
    try:
        entries = sorted(os.listdir(dev))
    except OSError:
        return []
    nodes = [dev / e for e in entries if _GPU_NODE.match(e)]
    if (dev / "nvidia-caps").is_dir():
        nodes.append(dev / "nvidia-caps")
    return nodes


def user_namespaces_available() -> bool:
    """Whether an unprivileged process may make a user namespace here (``unshare --user`` works)."""
    try:
        if int(Path("/proc/sys/user/max_user_namespaces").read_text().strip() or "0") <= 0:
            return False
    except (OSError, ValueError):
        return False
    try:
        if Path("/proc/sys/kernel/unprivileged_userns_clone").read_text().strip() == "0":
            return False
    except OSError:
        pass
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    try:
        return subprocess.run([unshare, "--user", "--map-root-user", "true"], capture_output=True, timeout=20,
                              check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def privilege_mode(euid: int | None = None, userns: bool | None = None) -> str:
    """"root", or "userns" for a user that may make user namespaces; ChrootRefused otherwise."""
    euid = os.geteuid() if euid is None else euid
    if euid == 0:
        return "root"
    if userns if userns is not None else user_namespaces_available():
        return "userns"
    raise ChrootRefused("the chroot runtime needs root or user namespaces, and this user (uid "
                        f"{euid}) has neither (sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone)")


def host_architecture(machine: str | None = None) -> str:
    machine = machine or platform.machine()
    for arch, (uname, _) in ARCHITECTURES.items():
        if uname == machine:
            return arch
    return machine


def check_architecture(image_arch: str, root: Path, *, machine: str | None = None,
                       binfmt: Path = Path("/proc/sys/fs/binfmt_misc")) -> str | None:
    """None when the image runs natively; the binfmt_misc handler's name when one runs it; ChrootRefused when
    nothing can. A handler must be enabled, match the architecture's ELF machine, and either be preloaded
    (flag F) or have its interpreter inside the root."""
    here = host_architecture(machine)
    if not image_arch or image_arch == here:
        return None
    known = ARCHITECTURES.get(image_arch)
    if known is None:
        raise ChrootRefused(f"the image is for architecture {image_arch!r}, this host is {here}, and pinmatrix knows "
                            "no binfmt_misc signature for it")
    _, machine_bytes = known
    try:
        entries = sorted(os.listdir(binfmt))
    except OSError:
        entries = []
    for name in entries:
        if name in ("register", "status"):
            continue
        try:
            text = (binfmt / name).read_text(errors="replace")
        except OSError:
            continue
        fields = dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
        if not text.startswith("enabled") or fields.get("offset", "0").strip() != "0":
            continue
        magic = fields.get("magic", "").strip()
        if len(magic) < 40 or not magic.startswith("7f454c46") or magic[36:40] != machine_bytes:
            continue
        interpreter = fields.get("interpreter", "").strip()
        preloaded = "F" in _flags(text)
        if preloaded or (interpreter and (root / interpreter.lstrip("/")).exists()):
            return name
    raise ChrootRefused(f"the image is for {image_arch}, this host is {here}, and no enabled binfmt_misc handler "
                        f"runs {image_arch} binaries here (Debian: apt-get install qemu-user-static binfmt-support; "
                        "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc)")


def _flags(text: str) -> str:
    m = re.search(r"^flags:\s*(\S*)", text, re.MULTILINE)
    return m.group(1) if m else ""
