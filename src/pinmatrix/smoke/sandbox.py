"""The sandbox runtime (``smoke --runtime sandbox``): a cell's smokes inside its own image, with no container
engine, behind bubblewrap's boundary, as root or as an ordinary user.

The image (an OCI layout, by manifest digest) is unpacked once into a per-digest root (``oci.unpack``). Each smoke
is a bwrap sandbox of that root (``sandbox_launch.py`` opens what it binds, drops root's ids, execs bwrap):

- new user, mount, PID, IPC, UTS, network (loopback only) and, where the kernel has it, cgroup namespaces; its
  own /proc; no capability kept; no_new_privs (bwrap's default); a new session; it dies with the runner;
- the image root read-only, every mount nosuid (and nodev but for the GPU nodes); of the host only: a minimal /dev
  with the GPU device nodes, the driver's files read-only (``sandbox_gpu``: a CDI spec's, else discovered), a
  per-smoke scratch (/tmp, the user's home, the output folder), the image's own kernel cache (per digest, 0700),
  the smoke catalogue and the shipped stdlib files read-only;
- root in the image is an unprivileged id outside: an ordinary user's own id, or 65534 when pinmatrix runs as
  root (``sandbox_tool``); the image's ``User`` is the id inside (bwrap --uid/--gid).

The runner times, signals and reaps the sandbox as any smoke. What the smoke writes in the output folder is
copied back into the cell's folder (regular files only, never through a link), each result file marked with the
sandbox's GPU wiring and driver. A host where the sandbox cannot start is one line before any smoke runs; a
sandbox that fails to start at a smoke is an infrastructure error, never the smoke's result.
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import stat
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pinmatrix.oci.unpack import ImageRoot, force_remove, unpack_image
from pinmatrix.project.catalogue import Smoke
from pinmatrix.project.smoke_bundle import shipped_dir
from pinmatrix.smoke.chroot_host import check_architecture
from pinmatrix.smoke.container import (
    LIB_MOUNT,
    OUT_MOUNT,
    SHIPPED_MOUNT,
    SMOKE_MOUNT,
    TOOL_MOUNT,
)
from pinmatrix.smoke.image_root import CACHE_FOLDER, DRIVER_DIR, ImageRootSmokes, image_environment, image_interpreter
from pinmatrix.smoke.kernel_cache import CACHE_MOUNT, KernelCache, prepare_cache
from pinmatrix.smoke.logcap import DEFAULT_LOG_CAP
from pinmatrix.smoke.runner import read_result_file, run_process
from pinmatrix.smoke.runtimes import ProcessResult
from pinmatrix.smoke.sandbox_gpu import GpuWiring, gpu_wiring
from pinmatrix.smoke.sandbox_tool import (
    UNPRIVILEGED,
    USERNS_NEEDS,
    Bwrap,
    find_bwrap,
    runnable_by_unprivileged,
    user_namespaces,
)
from pinmatrix.smoke.sandbox_user import (
    ImageRunRefused,
    ImageUser,
    in_root,
    resolve_user,
    working_dir,
)

RUNTIME = "sandbox"
LAUNCH = Path(__file__).with_name("sandbox_launch.py")
MAX_OUT_FILES = 10_000
MAX_RESULT_BYTES = 16 << 20
BWRAP_FAILED = "bwrap: "  # how bwrap starts the line it dies with when it cannot set the sandbox up


class SandboxSmokes(ImageRootSmokes):
    """The sandbox runtime for one image (``smoke.runtimes.SmokeRuntime``)."""

    name = RUNTIME

    def __init__(self, image: ImageRoot, smoke_dir: Path, *, bwrap: Path, gpu: GpuWiring, user: ImageUser,
                 cwd: str, scratch_root: Path, drop: tuple[int, int] | None, cache: KernelCache | None = None,
                 kill_grace_s: float = 3.0, log_cap: int = DEFAULT_LOG_CAP) -> None:
        self.image, self.gpu, self.user, self.cwd, self.cache = image, gpu, user, cwd, cache
        self.smoke_dir = Path(smoke_dir).resolve()
        self.bwrap = bwrap
        self.drop = drop
        self.scratch_root = scratch_root
        self.kill_grace_s = kill_grace_s
        self.log_cap = log_cap
        self.python = image_interpreter(image.path)
        self.driver_dir = self._driver_folder()

    def _driver_folder(self) -> Path | None:
        """A host folder bound at DRIVER_DIR: an empty file (a mount point) per driver file, and the other names of
        each library as symlinks beside it."""
        driver = self.gpu.driver
        if not driver.libraries and not driver.binaries:
            return None
        folder = self.scratch_root / f"driver-{os.getpid()}"
        force_remove(folder)
        atexit.register(force_remove, folder)
        (folder / "lib").mkdir(parents=True)
        (folder / "bin").mkdir()
        for real, names in driver.libraries.items():
            (folder / "lib" / real.name).touch()
            for alias in names:
                if alias != real.name and "/" not in alias and not os.path.lexists(folder / "lib" / alias):
                    os.symlink(real.name, folder / "lib" / alias)
        for binary in driver.binaries:
            (folder / "bin" / binary.name).touch()
        for dirpath, _dirs, files in os.walk(folder):
            os.chmod(dirpath, 0o755)
            for name in files:
                os.chmod(os.path.join(dirpath, name), 0o644)
        return folder

    def environment(self, passed: dict[str, str]) -> dict[str, str]:
        """The image's environment over the runner's (``image_root.image_environment``), a CDI spec's env over
        both, the driver's folder on the library path."""
        return image_environment(passed, self.image, home=self.user.home, cache=self.cache,
                                 driver=self.gpu.driver, over=self.gpu.env)

    def setup(self, scratch: Path, env: dict[str, str], extra_binds: Sequence[tuple[Path, str]]) -> list[Any]:
        """bwrap's options (``{"path": p}``: a host path, which the launcher stages when run as root) for one smoke."""
        args: list[Any] = ["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
                           "--cap-drop", "ALL", "--hostname", "pinmatrix-sandbox",
                           "--uid", str(self.user.uid), "--gid", str(self.user.gid),
                           "--ro-bind", {"path": str(self.image.path)}, "/", "--proc", "/proc", "--dev", "/dev"]
        for host, inside in self.gpu.devices:
            args += ["--dev-bind", host, inside]
        args += ["--bind", {"path": str(scratch / "tmp")}, "/tmp",
                 "--bind", {"path": str(scratch / "out")}, OUT_MOUNT,
                 "--ro-bind", {"path": str(self.smoke_dir)}, SMOKE_MOUNT,
                 "--ro-bind", {"path": str(shipped_dir().resolve())}, SHIPPED_MOUNT]
        if self.user.home != "/":
            args += ["--bind", {"path": str(scratch / "home")}, self.user.home]
        for source, target in extra_binds:
            args += ["--ro-bind", {"path": str(source)}, target]
        if self.cache is not None:
            args += ["--bind", {"path": str(self.cache.folder)}, CACHE_MOUNT]
        if self.driver_dir is not None:
            args += ["--ro-bind", {"path": str(self.driver_dir)}, DRIVER_DIR]
            for real in self.gpu.driver.libraries:
                args += ["--ro-bind", {"path": str(real)}, f"{DRIVER_DIR}/lib/{real.name}"]
            for binary in self.gpu.driver.binaries:
                args += ["--ro-bind", {"path": str(binary)}, f"{DRIVER_DIR}/bin/{binary.name}"]
        for host_path, inside in self.gpu.mounts:
            args += ["--ro-bind", {"path": host_path}, inside]
        for key, value in sorted(env.items()):
            args += ["--setenv", key, value]
        return [*args, "--chdir", self.cwd]

    def _scratch(self) -> Path:
        """A fresh per-smoke folder: /tmp, the home and the output folder, owned by the sandbox's id outside."""
        scratch = self.scratch_root / f"run-{secrets.token_hex(6)}"
        for sub in ("tmp", "home", "out"):
            (scratch / sub).mkdir(parents=True, mode=0o700)
        if self.drop is not None:
            for sub in ("tmp", "home", "out"):
                os.chown(scratch / sub, *self.drop)
        return scratch

    def run(self, argv: list[str], env: dict[str, str], log_path: Path, result_path: Path, timeout: float,
            extra_binds: Sequence[tuple[Path, str]] = ()) -> ProcessResult:
        work = result_path.parent.resolve()
        scratch = self._scratch()
        try:
            spec = {"bwrap": str(self.bwrap), "drop": list(self.drop) if self.drop else None, "parent": os.getpid(),
                    "stage": str(stage_folder()) if self.drop else None,
                    "error_file": str(self.error_file(scratch)), "setup": self.setup(scratch, env, extra_binds),
                    "command": argv}
            spec_path = scratch / "spec.json"
            spec_path.write_text(json.dumps(spec), encoding="utf-8")
            launcher = [sys.executable, "-I", "-S", str(LAUNCH), str(spec_path)]
            host_env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
            proc = run_process(launcher, host_env, log_path, result_path, timeout, cwd=work,
                               kill_grace_s=self.kill_grace_s, log_cap=self.log_cap)
            copy_out(scratch / "out", work, {"sandbox": {**self.gpu.record(), "uid_outside": self._outside()}})
            proc.result = read_result_file(result_path) or proc.result
            proc.infra = proc.infra or self._failed_start(scratch, proc, log_path)
            return proc
        finally:
            force_remove(scratch)

    def _outside(self) -> int:
        return self.drop[0] if self.drop is not None else os.getuid()

    def _failed_start(self, scratch: Path, proc: ProcessResult, log_path: Path) -> str | None:
        line = self.setup_error(scratch)
        if line:
            return f"image {self.image.digest}: {line}"
        if proc.returncode == 1 and proc.result is None:
            last = _last_line(log_path)
            if last.startswith(BWRAP_FAILED):
                return f"image {self.image.digest}: the sandbox did not start: {last[:300]}"
        return None

    def probe(self, log_path: Path) -> None:
        """Start the sandbox once and run the image's interpreter: a host or image where that fails is named
        before any smoke runs, and the interpreter that does not start is named too."""
        proc = self.run_probe(log_path, "sandbox")
        if proc.infra:
            raise ImageRunRefused(proc.infra)
        if proc.returncode != 0 or not proc.result:
            tail = _last_line(log_path)
            raise ImageRunRefused(f"image {self.image.digest}: its interpreter {self.python} does not run in the "
                                  f"sandbox (exit {proc.returncode}{': ' + tail[:200] if tail else ''}; log {log_path})")


_STAGE: list[Path] = []


def stage_folder() -> Path:
    """An empty root-owned 0755 folder on which each launcher, as root, mounts its staging tmpfs in a mount
    namespace of its own (sandbox_launch.py); made once per process, removed when it ends."""
    if not _STAGE:
        folder = Path(tempfile.mkdtemp(prefix="pinmatrix-sandbox-stage-"))
        os.chmod(folder, 0o755)
        atexit.register(os.rmdir, folder)
        _STAGE.append(folder)
    return _STAGE[0]


def _last_line(log_path: Path) -> str:
    try:
        lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines()[-20:] if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def copy_out(out: Path, work: Path, note: dict[str, Any]) -> None:
    """What the smoke left in its output folder, into the cell's folder: regular files only, each opened without
    following a link; a result file (``*.result.json``) gets ``note`` in its environment."""
    try:
        names = sorted(os.listdir(out))[:MAX_OUT_FILES]
    except OSError:
        return
    for name in names:
        try:
            fd = os.open(out / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue  # a link, a node or a fifo: never followed, never copied
        with os.fdopen(fd, "rb") as src:
            if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
                continue
            data = src.read(MAX_RESULT_BYTES + 1) if name.endswith(".result.json") else None
            target = work / name
            target.unlink(missing_ok=True)
            with open(target, "xb") as dst:
                if data is not None:
                    dst.write(_noted(data, note))
                else:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)


def _noted(data: bytes, note: dict[str, Any]) -> bytes:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return data
    if isinstance(value, dict) and isinstance(value.get("environment", {}), dict):
        value["environment"] = {**value.get("environment", {}), **note}
        return json.dumps(value).encode()
    return data


# ------------------------------------------------------------------------------------------- preparing a cell


def mount_points(root: Path, user: ImageUser, gpu: GpuWiring) -> None:
    """The folders and files the sandbox mounts over, made in the root (it is bound read-only), never through a
    symlink of the image."""
    folders = ["/proc", "/dev", "/tmp", OUT_MOUNT, SMOKE_MOUNT, SHIPPED_MOUNT, CACHE_MOUNT, DRIVER_DIR,
               f"{LIB_MOUNT}/pinmatrix", TOOL_MOUNT]
    if user.home != "/":
        folders.append(user.home)
    for folder in folders:
        in_root(root, folder, what="mount point", make="dir")
    for host_path, inside in gpu.mounts:
        if inside.split("/")[1:2] in (["proc"], ["sys"], ["dev"]):
            raise ImageRunRefused(f"CDI mount {host_path} -> {inside}: under /proc, /sys or /dev")
        in_root(root, inside, what="CDI mount", make="dir" if os.path.isdir(host_path) else "file")


def _private(folder: Path) -> Path:
    """``folder`` made (absolute, so a relative --roots works) and kept 0700."""
    folder = folder.absolute()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if folder.stat().st_uid == os.geteuid():
            os.chmod(folder, 0o700)
    except OSError as err:
        raise ImageRunRefused(f"{folder}: {err.strerror or err} (the sandbox runtime keeps its roots and kernel "
                              "caches there; name a folder this user owns with --roots)") from None
    return folder


def check_host() -> None:
    """One line when this host's kernel forbids the user namespaces the sandbox needs."""
    forbidden = user_namespaces()
    if forbidden is not None:
        raise ImageRunRefused(f"{USERNS_NEEDS}; here {forbidden}")


def prepare(layout_dir: Path, digest: str, roots: Path, smoke_dir: Path, *, smokes: Sequence[Smoke],
            gpu_required: bool, log_dir: Path, kill_grace_s: float = 3.0, log_cap: int = DEFAULT_LOG_CAP,
            echo: Callable[[str], None] = print, dev: Path = Path("/dev"), gpu: GpuWiring | None = None,
            kernel_cache: str = "keep", tool: Bwrap | None = None) -> SandboxSmokes:
    """Check the host, unpack the image, and start its sandbox once: the runtime for one image, or one refusal
    line. ``dev`` and ``gpu`` are where the GPU nodes are looked for and what is wired (default: this host's)."""
    tool = tool or find_bwrap()
    check_host()
    roots = _private(roots)
    try:
        image = unpack_image(layout_dir.absolute(), digest, roots, echo=echo)
    except PermissionError as err:
        raise ImageRunRefused(f"--roots {roots}: {err.strerror or err}") from None
    check_architecture(image.architecture, image.path)
    gpu = gpu or gpu_wiring(dev=dev)
    if gpu.devices and (gpu_required or any(s.gpu for s in smokes)) and not gpu.driver.found:
        raise ImageRunRefused(f"this host has GPU device nodes ({', '.join(h for h, _ in gpu.devices[:4])}) but no "
                              "NVIDIA driver library (libcuda.so*) in its CDI spec, the ldconfig cache or the known "
                              "folders, and a smoke needs a GPU")
    user = resolve_user(image.path, image.user)
    cwd = working_dir(image.path, image.working_dir)
    mount_points(image.path, user, gpu)
    drop = (UNPRIVILEGED, UNPRIVILEGED) if os.geteuid() == 0 else None
    outside = drop or (os.getuid(), os.getgid())
    cache = prepare_cache(_private(roots / CACHE_FOLDER), digest, kernel_cache, uid=outside[0], gid=outside[1])
    if cache is not None:
        os.chmod(cache.folder, 0o700)
    scratch_root = roots / digest[7:] / "runs"
    scratch_root.mkdir(parents=True, exist_ok=True)
    runtime = SandboxSmokes(image, smoke_dir, bwrap=runnable_by_unprivileged(tool) if drop else tool.path, gpu=gpu,
                            user=user, cwd=cwd, scratch_root=scratch_root, drop=drop, cache=cache,
                            kill_grace_s=kill_grace_s, log_cap=log_cap)
    echo(f"  root {image.path} ({'reused' if image.reused else 'unpacked'}), bwrap {tool.version} ({tool.origin}), "
         f"uid {user.uid} inside = {outside[0]} outside, GPU {gpu.source} ({len(gpu.devices)} node(s), "
         f"{len(gpu.driver.libraries)} driver file(s), driver {gpu.driver_version or 'none'}), interpreter "
         f"{runtime.python}, kernel cache {cache.folder if cache else 'off'}"
         f"{' (emptied)' if kernel_cache == 'cold' else ''}")
    if len(user.groups) > 1 or user.groups[:1] != (user.gid,):
        echo(f"  the image's user's other groups {list(user.groups)} are not set: one id is mapped in the sandbox")
    runtime.probe(log_dir / "sandbox-probe.log")
    return runtime
