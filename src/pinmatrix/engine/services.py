"""Container services started by pinmatrix itself: Debian's docker-registry on 127.0.0.1 (the embedded
registry, ``registry/local``, and the tests'), the project's podman/buildah configuration with its own storage
(``project_podman_env``, every podman run), and for tests and benchmarks a dockerd with its own data root and
socket.
Each is started in a directory of its own and stopped by PID; nothing under /etc or /var is touched."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pinmatrix.atomic import locked
from pinmatrix.errors import EngineError
from pinmatrix.paths import PODMAN_DIR, STATE_DIR

PODMAN_ULIMITS = '["nofile=20000:20000", "nproc=32768:32768"]'


def _wait_for(check, timeout: float, what: str, log: Path | None = None) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    tail = ""
    if log is not None and log.exists():
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        tail = f": {lines[-1]}" if lines else ""
    raise EngineError(f"{what} did not come up within {timeout:.0f}s{tail}")


def _stop(pid: int, timeout: float = 30) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            finished, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            finished = pid if not Path(f"/proc/{pid}").exists() else 0
        if finished == pid:
            return
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


@dataclass
class Service:
    """A started service: its PID, the environment that reaches it, and its private directory."""

    name: str
    pid: int
    directory: Path
    env: dict[str, str] = field(default_factory=dict)
    address: str = ""

    def stop(self, *, remove: bool = True) -> None:
        if self.pid:
            _stop(self.pid)
            self.pid = 0
        # dockerd leaves its default netns (nsfs) mounted under the exec root after it exits
        unmount_under(self.directory)
        if remove:
            shutil.rmtree(self.directory, ignore_errors=True)


def unmount_under(directory: Path) -> None:
    """Lazily unmount whatever is still mounted below ``directory`` (deepest first)."""
    prefix = str(directory.resolve()) + "/"
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return
    points = [line.split()[1].replace("\\040", " ") for line in mounts if len(line.split()) > 1]
    for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def podman_config(directory: Path, tools: Sequence[str] = ("podman", "buildah")) -> Service:
    """storage.conf (vfs) and containers.conf (runc, cgroupfs, ulimits) in ``directory``; podman and buildah
    read them through CONTAINERS_STORAGE_CONF and CONTAINERS_CONF. Nothing runs, so there is no PID."""
    for tool in tools:
        if shutil.which(tool) is None:
            raise EngineError(f"{tool} is not installed (apt-get install podman buildah)")
    directory.mkdir(parents=True, exist_ok=True)
    storage = directory / "storage.conf"

    def write_storage(driver: str) -> None:
        storage.write_text(
            "[storage]\n"
            f'driver = "{driver}"\n'
            f'graphroot = "{directory / "graph"}"\n'
            f'runroot = "{directory / "run"}"\n'
        )

    (directory / "tmp").mkdir(exist_ok=True)
    containers = directory / "containers.conf"
    runtime = "runc" if shutil.which("runc") else "crun"
    containers.write_text(
        "[containers]\n"
        f"default_ulimits = {PODMAN_ULIMITS}\n"
        "[engine]\n"
        f'runtime = "{runtime}"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
        f'tmp_dir = "{directory / "tmp"}"\n'
    )
    env = {"CONTAINERS_STORAGE_CONF": str(storage), "CONTAINERS_CONF": str(containers)}
    # Native overlay when the kernel and filesystem allow it (one copy of each layer); vfs copies every layer
    # in full for every image above it, which a GPU image of dozens of layers cannot afford.
    wanted = os.environ.get("PINMATRIX_PODMAN_DRIVER", "overlay")
    write_storage(wanted)
    if wanted != "vfs":
        probe = subprocess.run(["podman", "info", "--format", "{{.Store.GraphDriverName}}"], capture_output=True,
                               text=True, env={**os.environ, **env}, timeout=60, check=False)
        if probe.returncode != 0 or probe.stdout.strip() != wanted:
            write_storage("vfs")
    return Service("podman", 0, directory, env)


SYSTEM_STORAGE_CONF = Path("/etc/containers/storage.conf")


def project_podman_env(state: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The CONTAINERS_STORAGE_CONF / CONTAINERS_CONF that pinmatrix runs podman and buildah with, in any shell:
    nothing when the user or the system configures containers-storage (CONTAINERS_STORAGE_CONF set, or
    /etc/containers/storage.conf present), else the project's own configuration in ``state``/podman (vfs or
    overlay, runc, ulimits the host allows), written on first use and reused after. ``pinmatrix engine-env``
    prints the same variables for a shell, so a plain ``podman run`` sees the same store."""
    environ = os.environ if environ is None else environ
    if environ.get("CONTAINERS_STORAGE_CONF") or SYSTEM_STORAGE_CONF.exists():
        return {}
    if shutil.which("podman", path=environ.get("PATH")) is None:
        return {}  # the engine reports podman missing in its own words
    directory = (state / PODMAN_DIR.relative_to(STATE_DIR)).resolve()
    storage, containers = directory / "storage.conf", directory / "containers.conf"
    with locked(directory / ".config.lock"):  # a second process waits for the first one's probe
        if storage.is_file() and containers.is_file() and PODMAN_ULIMITS in containers.read_text():
            return {"CONTAINERS_STORAGE_CONF": str(storage), "CONTAINERS_CONF": str(containers)}
        return podman_config(directory, tools=("podman",)).env


def _port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_registry(directory: Path, port: int | None = 5000, timeout: float = 30, *, host: str = "127.0.0.1",
                   exact: bool = False) -> Service:
    """Debian's docker-registry on ``host`` (port 5000, or a free one when 5000 is taken; with ``exact``, that
    port or an EngineError), with its config and log in ``directory`` and its blobs in ``directory``/data."""
    exe = shutil.which("docker-registry")
    if exe is None:
        raise EngineError("docker-registry is not installed (apt-get install docker-registry)")
    directory.mkdir(parents=True, exist_ok=True)
    if exact and (port is None or not _port_free(port, host)):
        raise EngineError(f"cannot start docker-registry on {host}:{port}: the port is taken")
    if port is None or not _port_free(port, host):
        port = _free_port()
    config = directory / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {directory / 'data'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: {host}:{port}\n"
    )
    log = directory / "registry.log"
    with open(log, "wb") as handle:
        proc = subprocess.Popen([exe, "serve", str(config)], stdout=handle, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)

    def ready() -> bool:
        if proc.poll() is not None:
            raise EngineError(f"docker-registry exited with {proc.returncode}; see {log}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            return s.connect_ex((host, port)) == 0

    try:
        _wait_for(ready, timeout, "docker-registry", log)
    except EngineError:
        _stop(proc.pid)
        raise
    return Service("docker-registry", proc.pid, directory, {}, f"{host}:{port}")
