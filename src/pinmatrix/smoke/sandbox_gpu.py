"""What of the host's GPU a sandboxed smoke sees: the device nodes, the driver's files (read-only) and the
variables, the standard way first. Where the host has a Container Device Interface spec (``/etc/cdi``,
``/var/run/cdi``, as ``nvidia-ctk cdi generate`` writes them) its device nodes, mounts and env are applied
(the spec's hooks are not run: the driver's libraries go into pinmatrix's driver folder with their usual names
instead of through ``ldconfig``); else the nodes and the driver files are discovered as the chroot runtime
always did (``chroot_host``). Which of the two, and the driver's version, go into each record."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pinmatrix.sizes import read_capped
from pinmatrix.smoke.chroot_host import DRIVER_LIBRARIES, DriverFiles, find_driver, gpu_device_nodes
from pinmatrix.smoke.sandbox_user import ImageRunRefused

CDI_FOLDERS = (Path("/etc/cdi"), Path("/var/run/cdi"))
CDI_SUFFIXES = (".yaml", ".yml", ".json")
MAX_CDI_BYTES = 1 << 20
MAX_CDI_FILES = 64
NVIDIA_KINDS = ("nvidia.com/gpu",)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_VERSION = re.compile(r"^libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$")
_BIN_FOLDERS = ("/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/nvidia/bin")


class _Node(BaseModel):
    model_config = ConfigDict(extra="ignore")
    path: str = Field(max_length=4096)
    hostPath: str | None = Field(default=None, max_length=4096)  # noqa: N815 - the CDI spec's field name


class _Mount(BaseModel):
    model_config = ConfigDict(extra="ignore")
    hostPath: str = Field(max_length=4096)  # noqa: N815
    containerPath: str = Field(max_length=4096)  # noqa: N815


class _Edits(BaseModel):
    model_config = ConfigDict(extra="ignore")
    env: list[str] = Field(default_factory=list, max_length=256)
    deviceNodes: list[_Node] = Field(default_factory=list, max_length=256)  # noqa: N815
    mounts: list[_Mount] = Field(default_factory=list, max_length=2048)


class _Device(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str = Field(max_length=256)
    containerEdits: _Edits = Field(default_factory=_Edits)  # noqa: N815


class _Spec(BaseModel):
    model_config = ConfigDict(extra="ignore")
    cdiVersion: str = Field(max_length=32)  # noqa: N815
    kind: str = Field(max_length=256)
    devices: list[_Device] = Field(default_factory=list, max_length=1024)
    containerEdits: _Edits = Field(default_factory=_Edits)  # noqa: N815


@dataclass(frozen=True)
class GpuWiring:
    """The host's GPU as a sandbox binds it: each device node at its own path, the driver's libraries and
    binaries in pinmatrix's driver folder, other files a CDI spec mounts (host path, path in the image)."""

    source: str  # "cdi /etc/cdi/nvidia.yaml", "discovered" or "none"
    devices: tuple[tuple[str, str], ...] = ()  # (host node, node in the sandbox)
    driver: DriverFiles = field(default_factory=DriverFiles)
    mounts: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    driver_version: str | None = None

    def record(self) -> dict[str, str]:
        """What a record says about it (environment.sandbox)."""
        return {"gpu": self.source, "driver": self.driver_version or "none"}


def cdi_specs(folders: tuple[Path, ...] = CDI_FOLDERS) -> list[Path]:
    """The spec files of the CDI folders, in the order the CDI library reads them (later folders win)."""
    found: list[Path] = []
    for folder in folders:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        found += [folder / n for n in names if n.endswith(CDI_SUFFIXES) and (folder / n).is_file()]
    return found[:MAX_CDI_FILES]


def read_cdi(path: Path) -> _Spec:
    """One CDI spec file as typed data, at most MAX_CDI_BYTES; one line naming the file when it is not one."""
    data = read_capped(path, MAX_CDI_BYTES, "a CDI spec", ImageRunRefused)
    try:
        value = json.loads(data) if path.suffix == ".json" else yaml.safe_load(data)
        return _Spec.model_validate(value)
    except (ValueError, yaml.YAMLError, RecursionError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        if isinstance(err, ValidationError):
            first = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:3])
        raise ImageRunRefused(f"CDI spec {path}: not a CDI spec ({first[:300]})") from None


def _library_names(real: Path) -> tuple[str, ...]:
    """A driver library's names in the driver folder: its own, and the ones loaders and linkers look for."""
    names = {real.name}
    for base in DRIVER_LIBRARIES:
        if real.name.startswith(base + "."):
            names |= {base, base + ".1"}
    return tuple(sorted(names))


def _from_cdi(path: Path, spec: _Spec) -> GpuWiring:
    edits = [spec.containerEdits] + [d.containerEdits for d in spec.devices if d.name == "all"]
    if len(edits) == 1:  # no "all" device: every device the spec names
        edits += [d.containerEdits for d in spec.devices]
    devices: list[tuple[str, str]] = []
    libraries: dict[Path, tuple[str, ...]] = {}
    binaries: list[Path] = []
    mounts: list[tuple[str, str]] = []
    env: list[tuple[str, str]] = []
    for edit in edits:
        for node in edit.deviceNodes:
            if not node.path.startswith("/dev/") or ".." in node.path.split("/"):
                raise ImageRunRefused(f"CDI spec {path}: device node {node.path[:200]!r} is not under /dev")
            devices.append((node.hostPath or node.path, node.path))
        for mount in edit.mounts:
            host = Path(mount.hostPath)
            if not host.is_absolute() or not mount.containerPath.startswith("/"):
                raise ImageRunRefused(f"CDI spec {path}: mount {mount.hostPath[:200]!r} -> "
                                      f"{mount.containerPath[:200]!r} is not between absolute paths")
            if ".so" in host.name and host.is_file():
                libraries[host.resolve()] = _library_names(host.resolve())
            elif str(host.parent) in _BIN_FOLDERS and host.is_file():
                binaries.append(host)
            else:
                mounts.append((mount.hostPath, mount.containerPath))
        for item in edit.env:
            name, sep, value = item.partition("=")
            if not sep or not _ENV_NAME.match(name) or "\0" in value:
                raise ImageRunRefused(f"CDI spec {path}: env entry {item[:80]!r} is not NAME=VALUE")
            env.append((name, value))
    driver = DriverFiles(libraries, tuple(binaries))
    return GpuWiring(f"cdi {path}", tuple(dict.fromkeys(devices)), driver, tuple(dict.fromkeys(mounts)),
                     tuple(env), driver_version(driver))


def driver_version(driver: DriverFiles, proc_version: Path = Path("/proc/driver/nvidia/version")) -> str | None:
    """The driver's version: libcuda's file name (``libcuda.so.580.159.04``), else the kernel module's."""
    for real in driver.libraries:
        m = _VERSION.match(real.name)
        if m:
            return m.group(1)
    try:
        m2 = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", proc_version.read_text(errors="replace"))
    except OSError:
        return None
    return m2.group(1) if m2 else None


def gpu_wiring(*, dev: Path = Path("/dev"), driver: DriverFiles | None = None,
               cdi_folders: tuple[Path, ...] = CDI_FOLDERS) -> GpuWiring:
    """The host's GPU from its NVIDIA CDI spec where it has one, else discovered; "none" without GPU nodes."""
    for path in cdi_specs(cdi_folders):
        spec = read_cdi(path)
        if spec.kind in NVIDIA_KINDS:
            return _from_cdi(path, spec)
    nodes = gpu_device_nodes(dev)
    if not nodes:
        return GpuWiring("none")
    found = find_driver() if driver is None else driver
    return GpuWiring("discovered", tuple((str(n), f"/dev/{n.name}") for n in nodes), found,
                     driver_version=driver_version(found))
