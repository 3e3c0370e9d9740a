"""The docker/podman runtime: each smoke runs in a fresh container of the cell's image (``--rm``, no
network), with the smoke catalogue mounted read-only and the smoke's work directory mounted for its
result file. The host's GPUs are passed when it has them (the engine layer decides how)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from pathlib import Path

from pinmatrix.engine import OCIEngine, host_has_gpus
from pinmatrix.errors import PinmatrixError
from pinmatrix.imageref import ImageRef
from pinmatrix.project.catalogue import Smoke
from pinmatrix.project.smoke_bundle import shipped_dir
from pinmatrix.registry.client import Registry
from pinmatrix.smoke.kernel_cache import CACHE_MOUNT, KernelCache
from pinmatrix.smoke.logcap import DEFAULT_LOG_CAP
from pinmatrix.smoke.runner import run_process
from pinmatrix.smoke.runtimes import CellSetup, ProcessResult, RuntimeOptions
from pinmatrix.smoke.target import SmokeTarget

SMOKE_MOUNT = "/opt/pinmatrix-smoke"
SHIPPED_MOUNT = "/opt/pinmatrix-shipped"
OUT_MOUNT = "/pinmatrix-out"
LIB_MOUNT = "/opt/pinmatrix-lib"  # the pinmatrix package, for the arch-coverage smoke
TOOL_MOUNT = "/opt/pinmatrix-cuda"  # cuobjdump from its wheel
IMAGE_PYTHON = "/opt/venv/bin/python"
# Variables that describe the host, not the cell: never copied into the container.
ENGINE_FAILED = 125  # `docker run` / `podman run`: the error is the engine's, not the command's
_HOST_ONLY = {"PATH", "HOME", "PYTHONPATH", "VIRTUAL_ENV", "PWD", "OLDPWD", "SHELL", "USER", "LOGNAME",
              "TMPDIR", "LD_LIBRARY_PATH", "TERM", "HOSTNAME"}


class ContainerSmokes:
    """The docker/podman runtime for one image (``smoke.runtimes.SmokeRuntime``)."""

    def __init__(self, engine: OCIEngine, image: str, smoke_dir: Path, *, python: str = IMAGE_PYTHON,
                 gpus: bool | None = None, kill_grace_s: float = 3.0, log_cap: int = DEFAULT_LOG_CAP,
                 cache: KernelCache | None = None, image_env: Mapping[str, str] | None = None) -> None:
        self.engine = engine
        self.cache = cache
        self.image_env = dict(image_env or {})
        self.image = image
        self.smoke_dir = Path(smoke_dir).resolve()
        self.python = python
        self.gpus = host_has_gpus() if gpus is None else gpus
        self.kill_grace_s = kill_grace_s
        self.log_cap = log_cap

    @property
    def name(self) -> str:
        return str(self.engine.name)

    def prepare_cell(self, cell: SmokeTarget, options: RuntimeOptions, echo: Callable[[str], None]) -> CellSetup:
        return CellSetup()  # the image is the cell's environment

    def start(self, cell: SmokeTarget, smoke: Smoke, options: RuntimeOptions, env: dict[str, str], log_path: Path,
              result_path: Path, timeout: float, work: Path) -> ProcessResult:
        work = result_path.parent.resolve()
        name = f"pinmatrix-smoke-{secrets.token_hex(4)}"
        args = ["run", "--rm", "--name", name, "--network=none",
                "-v", f"{self.smoke_dir}:{SMOKE_MOUNT}:ro", "-v", f"{shipped_dir()}:{SHIPPED_MOUNT}:ro",
                "-v", f"{work}:{OUT_MOUNT}"]
        if self.gpus:
            args += self.engine.gpu_args()
        passed = image_smoke_env(env, result_path.name)
        for source, target in archscan_binds(passed):
            args += ["-v", f"{source}:{target}:ro"]
        if self.cache is not None:  # the image's kernel cache, unless the cell or the image names its own
            args += ["-v", f"{self.cache.folder}:{CACHE_MOUNT}"]
            passed.update(self.cache.environment({**self.image_env, **passed}))
        for key, value in sorted(passed.items()):
            args += ["-e", f"{key}={value}"]
        module = f"{SMOKE_MOUNT}/{smoke.module.name}"
        args += [self.image, self.python, "-X", "faulthandler", "-u", module, smoke.name]
        argv = self.engine._argv(args)
        try:
            # cleanup: the container goes too when the runner is killed (the guard runs it; guard.py)
            proc = run_process(argv, dict(self.engine.env), log_path, result_path, timeout, cwd=work,
                               kill_grace_s=self.kill_grace_s, log_cap=self.log_cap,
                               cleanup=self.engine._argv(["rm", "--force", name]))
            if proc.returncode == ENGINE_FAILED and proc.result is None and not proc.timed_out:
                # docker/podman run: 125 is the engine's own failure (the container never started)
                last = _last_log_line(log_path)
                proc.infra = f"{self.engine.name} could not start the container (exit status 125){last}"
            return proc
        finally:
            self.engine.call(["rm", "--force", name], check=False, timeout=60)


def _last_log_line(log_path: Path) -> str:
    try:
        lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines()[-20:] if ln.strip()]
    except OSError:
        return ""
    return f": {lines[-1][:300]}" if lines else ""


def image_smoke_env(env: dict[str, str], result_name: str) -> dict[str, str]:
    """What of a smoke's environment goes into an image (docker, podman, chroot): the cell's and the smoke's
    variables, never the host's paths; the result file in the output mount, the in-cell runtime on PYTHONPATH."""
    passed = {k: v for k, v in env.items() if k.startswith(("PINMATRIX_", "VLLM_", "FLASHINFER_", "TORCH_",
                                                             "XFORMERS_", "NCCL_", "CUDA_", "NVIDIA_",
                                                             "TRITON_"))
              and k not in _HOST_ONLY}
    passed["PINMATRIX_SMOKE_RESULT"] = f"{OUT_MOUNT}/{result_name}"
    passed.pop("PINMATRIX_OVERLAY", None)
    passed["PYTHONUNBUFFERED"] = "1"
    passed["PYTHONPATH"] = SHIPPED_MOUNT  # _smokelib and _oracles, shipped with pinmatrix
    return passed


def archscan_binds(passed: dict[str, str]) -> list[tuple[Path, str]]:
    """The arch-coverage smoke's pinmatrix package and cuobjdump, as (host folder, path in the image) to mount
    read-only; ``passed`` is rewritten to the paths inside the image."""
    binds: list[tuple[Path, str]] = []
    lib = passed.pop("PINMATRIX_LIB", None)
    if lib and (Path(lib) / "pinmatrix").is_dir():
        binds.append(((Path(lib) / "pinmatrix").resolve(), f"{LIB_MOUNT}/pinmatrix"))
        passed["PINMATRIX_LIB"] = LIB_MOUNT
    tool = passed.pop("PINMATRIX_CUOBJDUMP", None)
    if tool and Path(tool).is_file():
        root = Path(tool).resolve().parent.parent  # .../nvidia/cu13
        binds.append((root, TOOL_MOUNT))
        passed["PINMATRIX_CUOBJDUMP"] = f"{TOOL_MOUNT}/bin/{Path(tool).name}"
    return binds


def _registry_digest(ref: str, image_id: str) -> str | None:
    """The registry's manifest digest for the tag ``ref`` when that manifest is this very image (its config
    digest is the local image id), else None. An engine's local digest of an image it built is not the one
    the registry holds after the push recompressed the layers; promotion checks the registry's."""

    try:
        parsed = ImageRef.parse(ref)
        manifest = Registry(parsed.registry, timeout=10).get_manifest(parsed.repository, parsed.reference)
    except PinmatrixError:
        return None  # no registry in the reference, or none reachable: the local digest is all there is
    if manifest is None:
        return None
    config = (manifest.json.get("config") or {}).get("digest")
    return manifest.digest if config and config == image_id else None


def image_digest(engine: OCIEngine, ref: str) -> str | None:
    """The registry digest the smokes run against. A reference by digest names it; for a tag, the repo
    digest of the same repository is preferred (an image pushed to several repositories, or built by podman
    and then pulled, lists several digests, and only the one of ``ref``'s repository is meaningful)."""
    info = engine.inspect(ref)
    if info is None:
        return None
    if "@sha256:" in ref:
        return ref.split("@", 1)[1]
    pushed = _registry_digest(ref, info.id)
    if pushed is not None:
        return pushed
    name = ref.rsplit(":", 1)[0] if ref.rfind(":") > ref.rfind("/") else ref
    digests = [rd for rd in info.repo_digests if "@sha256:" in rd]
    for rd in digests:
        if rd.split("@", 1)[0] == name:
            return rd.split("@", 1)[1]
    for rd in digests:
        return rd.split("@", 1)[1]
    return info.id
