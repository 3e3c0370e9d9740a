"""The chroot runtime that trusts the image with host root (``smoke --runtime chroot-trusting-root``): a cell's
smokes inside its own image, with no container engine and no boundary. The sandbox runtime (``smoke.sandbox``) is
the engine-less default; this one is kept for hosts where it cannot start, under a name that says what it does.

As root it runs the smoke as root with every capability, in the host's PID namespace with the host's /proc and
/sys bound in: image code can write the host's files through ``/proc/1/root`` (docs/threat-model.md,
tests/integration/test_sandbox_hostile.py). Run it only on images you would run as root on the host.

The image (an OCI layout, by manifest digest) is unpacked once into a per-digest root (``oci.unpack``). Each
smoke's first process is ``chroot_enter.py``, which makes a mount namespace, an overlay of that root, binds
``/proc``, ``/sys``, a minimal ``/dev`` with the GPU nodes, the host's NVIDIA driver libraries (``chroot_host``)
and the smoke catalogue, enters it, takes the image config's user, working directory and environment, and execs
the image's own interpreter. The runner times, signals and reaps it as any smoke (``run_process``: timeout,
crash isolation, log cap, parent-death signal, the guard). Results are recorded against the image's manifest
digest and name the runtime.

A host where this cannot work is refused before any smoke runs (``ChrootRefused``); a namespace or mount that
fails is infrastructure (``ChrootSetupError``), never a smoke's result.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pinmatrix.errors import PinmatrixError
from pinmatrix.oci.unpack import ImageRoot, force_remove, image_digest, unpack_image
from pinmatrix.project.catalogue import Smoke
from pinmatrix.project.smoke_bundle import shipped_dir
from pinmatrix.smoke.chroot_host import (
    ChrootRefused,
    DriverFiles,
    check_architecture,
    find_driver,
    gpu_device_nodes,
    privilege_mode,
)
from pinmatrix.smoke.container import OUT_MOUNT, SHIPPED_MOUNT, SMOKE_MOUNT
from pinmatrix.smoke.image_root import CACHE_FOLDER, DRIVER_DIR, ImageRootSmokes, image_environment, image_interpreter
from pinmatrix.smoke.kernel_cache import CACHE_MOUNT, KernelCache, prepare_cache
from pinmatrix.smoke.logcap import DEFAULT_LOG_CAP
from pinmatrix.smoke.runner import run_process
from pinmatrix.smoke.runtimes import ProcessResult
from pinmatrix.smoke.sandbox_user import resolve_user

RUNTIME = "chroot-trusting-root"
ENTER = Path(__file__).with_name("chroot_enter.py")
_UNSAFE_IN_OVERLAY = (",", ":", "\n", "\0")


class ChrootSetupError(PinmatrixError):
    """Entering the root failed (namespace, mount, chroot, user): infrastructure, not a smoke result."""


class ChrootSmokes(ImageRootSmokes):
    """The chroot runtime for one image (``smoke.runtimes.SmokeRuntime``): each smoke in the image's root."""

    name = RUNTIME

    def __init__(self, image: ImageRoot, smoke_dir: Path, *, driver: DriverFiles, devices: Sequence[Path],
                 mode: str, scratch_root: Path, kill_grace_s: float = 3.0, log_cap: int = DEFAULT_LOG_CAP,
                 cache: KernelCache | None = None) -> None:
        self.image = image
        self.cache = cache
        self.smoke_dir = Path(smoke_dir).resolve()
        self.driver = driver
        self.devices = [str(d) for d in devices]
        self.mode = mode
        self.scratch_root = scratch_root.resolve()
        self.kill_grace_s = kill_grace_s
        self.log_cap = log_cap
        self.user = resolve_user(image.path, image.user)
        if mode == "userns" and self.user.uid != 0:
            raise ChrootRefused(f"the image runs as uid {self.user.uid}; in a user namespace this runtime maps only "
                                "root (run as root for images with another user)")
        self.python = image_interpreter(image.path)
        for path in (str(image.path), str(self.scratch_root), *([str(cache.folder)] if cache else [])):
            if any(c in path for c in _UNSAFE_IN_OVERLAY):
                raise ChrootRefused(f"{path}: an overlay cannot name a folder with ',' or ':' in its path")

    def environment(self, passed: dict[str, str]) -> dict[str, str]:
        """The image's environment over the runner's (``image_root.image_environment``), the driver's folder on
        the library path."""
        return image_environment(passed, self.image, home=self.user.home, cache=self.cache, driver=self.driver)

    def spec(self, argv: list[str], env: dict[str, str], work: Path, scratch: Path,
             extra_binds: list[tuple[Path, str]]) -> dict[str, Any]:
        binds = [{"source": str(self.smoke_dir), "target": SMOKE_MOUNT, "readonly": True},
                 {"source": str(shipped_dir().resolve()), "target": SHIPPED_MOUNT, "readonly": True},
                 {"source": str(work), "target": OUT_MOUNT, "readonly": False}]
        binds += [{"source": str(s), "target": t, "readonly": True} for s, t in extra_binds]
        if self.cache is not None:
            binds.append({"source": str(self.cache.folder), "target": CACHE_MOUNT, "readonly": False})
        return {
            "unshared": not hasattr(os, "unshare"), "userns": self.mode == "userns", "parent": os.getpid(),
            "lower": str(self.image.path), "scratch": str(scratch), "error_file": str(self.error_file(scratch)),
            "binds": binds, "devices": self.devices,
            "driver": {"dir": DRIVER_DIR,
                       "libraries": [{"source": str(p), "names": list(n)} for p, n in self.driver.libraries.items()],
                       "binaries": [str(b) for b in self.driver.binaries]},
            "uid": self.user.uid, "gid": self.user.gid, "groups": list(self.user.groups),
            "cwd": self.image.working_dir, "env": env, "argv": argv,
        }

    def launcher(self, spec_path: Path) -> list[str]:
        enter = [sys.executable, "-I", "-S", str(ENTER), str(spec_path)]
        if hasattr(os, "unshare"):
            return enter
        unshare = shutil.which("unshare")
        if unshare is None:
            raise ChrootRefused("the chroot runtime needs Python >= 3.12 (os.unshare) or util-linux's unshare")
        user = ["--user", "--map-root-user"] if self.mode == "userns" else []
        return [unshare, "--mount", "--propagation", "private", *user, "--", *enter]

    def run(self, argv: list[str], env: dict[str, str], log_path: Path, result_path: Path, timeout: float,
            extra_binds: Sequence[tuple[Path, str]] = ()) -> ProcessResult:
        work = result_path.parent.resolve()
        if self.user.uid != 0 and os.geteuid() == 0:
            os.chown(work, self.user.uid, self.user.gid)  # the smoke writes its result file there
        scratch = self.scratch_root / f"run-{secrets.token_hex(6)}"
        scratch.mkdir(parents=True)
        try:
            spec_path = scratch / "spec.json"
            spec_path.write_text(json.dumps(self.spec(argv, env, work, scratch, list(extra_binds))), encoding="utf-8")
            host_env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
            proc = run_process(self.launcher(spec_path), host_env, log_path, result_path, timeout, cwd=work,
                               kill_grace_s=self.kill_grace_s, log_cap=self.log_cap)
            line = self.setup_error(scratch)
            if line:
                raise ChrootSetupError(f"image {self.image.digest}: {line}")
            return proc
        finally:
            force_remove(scratch)

    def probe(self, log_path: Path) -> None:
        """Enter the root once and run the image's interpreter: a host or image where that fails is named before
        any smoke runs (ChrootSetupError), and the interpreter that does not start is named too."""
        proc = self.run_probe(log_path, "chroot")
        if proc.returncode != 0 or not proc.result:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] if log_path.is_file() else []
            raise ChrootSetupError(f"image {self.image.digest}: its interpreter {self.python} does not run in the "
                                   f"root (exit {proc.returncode}{': ' + tail[0][:200] if tail else ''}; log {log_path})")


# ------------------------------------------------------------------------------------------- preparing a cell


def find_image(layout_dir: Path, ref_or_digest: str) -> str | None:
    """The manifest digest the layout's index names ``ref_or_digest`` (a reference or the digest itself)."""
    return image_digest(layout_dir, ref_or_digest)


def prepare(layout_dir: Path, digest: str, roots: Path, smoke_dir: Path, *, smokes: Sequence[Smoke],
            gpu_required: bool, log_dir: Path, kill_grace_s: float = 3.0, log_cap: int = DEFAULT_LOG_CAP,
            echo: Callable[[str], None] = print, dev: Path = Path("/dev"),
            driver: DriverFiles | None = None, kernel_cache: str = "keep") -> ChrootSmokes:
    """Check the host, unpack the image, and enter it once: the runtime for one image, or one refusal line.
    ``dev`` and ``driver`` are where the GPU nodes and the driver's files are looked for (default: this host's);
    ``kernel_cache`` is the mode of the image's kernel cache under ``roots/kernel-cache`` (smoke/kernel_cache.py)."""
    mode = privilege_mode()
    image = unpack_image(layout_dir, digest, roots, echo=echo)
    check_architecture(image.architecture, image.path)
    devices = gpu_device_nodes(dev)
    driver = find_driver() if driver is None else driver
    needs_gpu = gpu_required or any(s.gpu for s in smokes)
    if devices and needs_gpu and not driver.found:
        raise ChrootRefused(f"this host has GPU device nodes ({', '.join(d.name for d in devices[:4])}) but no NVIDIA "
                            "driver library (libcuda.so*) in the ldconfig cache or the known folders "
                            "(/usr/local/nvidia/lib64, /usr/lib/x86_64-linux-gnu, ...), and a smoke needs a GPU")
    user = resolve_user(image.path, image.user)
    cache = prepare_cache(roots / CACHE_FOLDER, digest, kernel_cache, uid=user.uid, gid=user.gid)
    runtime = ChrootSmokes(image, smoke_dir, driver=driver if devices else DriverFiles(), devices=devices,
                           mode=mode, scratch_root=roots / digest[7:] / "runs", kill_grace_s=kill_grace_s,
                           log_cap=log_cap, cache=cache)
    libs = len(runtime.driver.libraries)
    echo(f"  root {image.path} ({'reused' if image.reused else 'unpacked'}), {mode}, "
         f"{len(devices)} GPU node(s), {libs} driver file(s), interpreter {runtime.python}, kernel cache "
         f"{cache.folder if cache else 'off'}{' (emptied)' if kernel_cache == 'cold' else ''}")
    runtime.probe(log_dir / "chroot-probe.log")
    return runtime
