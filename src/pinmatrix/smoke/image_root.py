"""What the two runtimes that run a smoke in an unpacked image root share (``smoke.sandbox``, the default, and
``smoke.chroot``): the image's interpreter, the smoke's environment and command line, the probe that starts that
interpreter once, the launcher's setup-error file and the kernel caches' folder under --roots. Each runtime says
how a process is started in the root (``run``)."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from pinmatrix.oci.unpack import ImageRoot
from pinmatrix.project.catalogue import Smoke
from pinmatrix.smoke.chroot_host import DriverFiles
from pinmatrix.smoke.container import (
    IMAGE_PYTHON,
    OUT_MOUNT,
    SHIPPED_MOUNT,
    SMOKE_MOUNT,
    archscan_binds,
    image_smoke_env,
)
from pinmatrix.smoke.kernel_cache import KernelCache
from pinmatrix.smoke.runtimes import CellSetup, ProcessResult, RuntimeOptions
from pinmatrix.smoke.target import SmokeTarget

CACHE_FOLDER = "kernel-cache"  # under --roots: one folder per image digest (smoke/kernel_cache.py)
DRIVER_DIR = "/opt/pinmatrix-driver"  # the driver's libraries (lib/) and binaries (bin/) inside the root
SETUP_ERROR = "setup-error"
_PROBE_CODE = ("import json, os, sys; json.dump({'python': sys.version.split()[0], 'uid': os.getuid(), "
               "'cwd': os.getcwd()}, open(os.environ['PINMATRIX_SMOKE_RESULT'], 'w'))")


def image_interpreter(root: Path) -> str:
    """The image's own Python: pinmatrix images have /opt/venv/bin/python; other images their PATH's python3."""
    return IMAGE_PYTHON if os.path.lexists(root / IMAGE_PYTHON.lstrip("/")) else "python3"


def image_environment(passed: dict[str, str], image: ImageRoot, *, home: str, cache: KernelCache | None,
                      driver: DriverFiles, over: Iterable[tuple[str, str]] = ()) -> dict[str, str]:
    """The image config's Env over what the runner passes from the host (a host's CUDA_HOME must not hide the
    image's own toolchain), ``over`` (a CDI spec's env) over both, the runner's PINMATRIX_* controls over all, the
    shipped runtime first on PYTHONPATH, the driver folder first on the library path."""
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", **passed, **image.env}
    env.update(dict(over))
    env.setdefault("HOME", home)
    if cache is not None:  # the image's kernel cache, unless the cell or the image names its own
        env.update(cache.environment(env))
    env.update({k: v for k, v in passed.items() if k.startswith("PINMATRIX_")})
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = ":".join(filter(None, [SHIPPED_MOUNT, image.env.get("PYTHONPATH")]))
    if driver.libraries:
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, [f"{DRIVER_DIR}/lib", image.env.get("LD_LIBRARY_PATH")]))
    if driver.binaries:
        env["PATH"] = f"{env['PATH']}:{DRIVER_DIR}/bin"
    return env


class ImageRootSmokes(ABC):
    """A runtime (``smoke.runtimes.SmokeRuntime``) that runs each smoke with the image's own interpreter in the
    image's unpacked root; ``environment`` and ``run`` are the runtime's own."""

    image: ImageRoot
    python: str

    @abstractmethod
    def environment(self, passed: dict[str, str]) -> dict[str, str]:
        """The environment a process in the root gets, from what the runner passes."""

    @abstractmethod
    def run(self, argv: list[str], env: dict[str, str], log_path: Path, result_path: Path, timeout: float,
            extra_binds: Sequence[tuple[Path, str]] = ()) -> ProcessResult:
        """Run ``argv`` in the root, its log at ``log_path``, its result file read from ``result_path``."""

    @staticmethod
    def error_file(scratch: Path) -> Path:
        """In a run's scratch folder: where the launcher writes its one line when it could not start the smoke."""
        return scratch / SETUP_ERROR

    @staticmethod
    def setup_error(scratch: Path) -> str:
        """The launcher's line in ``scratch``: written only when it failed before the smoke's exec (on success the
        exec closed the file empty); "" when there is none."""
        error = scratch / SETUP_ERROR
        return error.read_text(encoding="utf-8", errors="replace").strip() if error.is_file() else ""

    def prepare_cell(self, cell: SmokeTarget, options: RuntimeOptions, echo: Callable[[str], None]) -> CellSetup:
        return CellSetup()  # the image is the cell's environment, unpacked and entered once by prepare()

    def start(self, cell: SmokeTarget, smoke: Smoke, options: RuntimeOptions, env: dict[str, str], log_path: Path,
              result_path: Path, timeout: float, work: Path) -> ProcessResult:
        passed = image_smoke_env(env, result_path.name)
        extra = archscan_binds(passed)
        argv = [self.python, "-X", "faulthandler", "-u", f"{SMOKE_MOUNT}/{smoke.module.name}", smoke.name]
        return self.run(argv, self.environment(passed), log_path, result_path, timeout, extra)

    def run_probe(self, log_path: Path, name: str) -> ProcessResult:
        """The image's interpreter run once in the root, writing its version, uid and working directory to
        ``.<name>-probe.result.json`` beside ``log_path``."""
        out = log_path.parent
        out.mkdir(parents=True, exist_ok=True)
        result = out / f".{name}-probe.result.json"
        env = self.environment({"PINMATRIX_SMOKE_RESULT": f"{OUT_MOUNT}/{result.name}"})
        return self.run([self.python, "-c", _PROBE_CODE], env, log_path, result, 120)
