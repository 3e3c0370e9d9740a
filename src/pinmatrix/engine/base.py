"""The engine interface and what is shared between backends: running the CLI, parsing ``inspect`` output,
detection. Modelled on cibuildwheel's OCIContainer: one class per engine, selected by name, the differences
kept in a few methods."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from pinmatrix.errors import EngineError
from pinmatrix.imageref import tls_verify_for

EngineName = Literal["docker", "podman"]
ENGINE_NAMES: tuple[EngineName, ...] = ("docker", "podman")

# "Step 3/9 : RUN ..." (docker legacy builder) and "STEP 3/9: RUN ..." (buildah)
_STEP_RE = re.compile(r"^(?:Step|STEP) (\d+)/(\d+) ?: ?(.*)$")

LineSink = Callable[[str], None]


@dataclass(frozen=True)
class ImageInfo:
    """What pinmatrix needs from ``<engine> image inspect``, the same shape for both engines."""

    id: str  # "sha256:<config digest>"
    labels: dict[str, str]
    env: tuple[str, ...]
    size: int
    repo_digests: tuple[str, ...] = ()
    layers: tuple[str, ...] = ()  # diff ids, base first
    user: str = ""  # the config's User ("" = root)


@dataclass(frozen=True)
class BuildResult:
    image_id: str
    seconds: float
    steps: int = 0


def parse_step(line: str) -> tuple[int, int, str] | None:
    m = _STEP_RE.match(line.strip())
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), m.group(3)


def host_has_gpus() -> bool:
    """True when an NVIDIA driver exposes devices on this host (then `run` passes them to the container)."""
    return Path("/dev/nvidiactl").exists() and any(Path("/dev").glob("nvidia[0-9]*"))


class OCIEngine(ABC):
    """One container engine. Every failure is an :class:`EngineError` with one line naming the engine."""

    name: ClassVar[EngineName]
    binary: ClassVar[str]
    # Whether two builds of the same inputs from a clean store give the same image id on this engine.
    reproducible: ClassVar[bool]

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        # Extra environment for every engine command (DOCKER_HOST, CONTAINERS_CONF, ...).
        self.env = {**os.environ, **(env or {})}

    # ----------------------------------------------------------------------------------------- plumbing
    def which(self, tool: str) -> str | None:
        return shutil.which(tool, path=self.env.get("PATH"))

    def executable(self) -> str | None:
        return self.which(self.binary)

    def is_installed(self) -> bool:
        return self.executable() is not None

    def _argv(self, args: Sequence[str]) -> list[str]:
        exe = self.executable()
        if exe is None:
            raise EngineError(self.not_installed_message())
        return [exe, *args]

    def reads_zstd_layers(self) -> bool:
        """Whether this engine's store can load an image whose layers are zstd-compressed."""
        return True

    def other_engine_hint(self) -> str:
        """How to choose the other engine, in the words of each command that takes one."""
        other = "podman" if self.name == "docker" else "docker"
        return f"or use {other} (`--engine {other}` for build and pull, `--runtime {other}` for smoke and bisect)"

    def not_installed_message(self) -> str:
        return f"engine {self.name}: `{self.binary}` is not installed (not on PATH)"

    def call(
        self,
        args: Sequence[str],
        *,
        check: bool = True,
        input: bytes | None = None,
        timeout: float | None = None,
        argv0: str | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        argv = [self.which(argv0) or argv0, *args] if argv0 else self._argv(args)
        try:
            proc = subprocess.run(
                argv, env=self.env, input=input, capture_output=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as err:
            raise EngineError(f"engine {self.name}: `{' '.join(argv[:3])} ...` timed out after {timeout}s") from err
        except FileNotFoundError as err:
            raise EngineError(f"engine {self.name}: {argv[0]} not found") from err
        if check and proc.returncode != 0:
            raise EngineError(
                f"engine {self.name}: `{os.path.basename(argv[0])} {' '.join(args[:2])}` failed "
                f"(exit {proc.returncode}): {last_line(proc.stderr or proc.stdout)}"
            )
        return proc

    def stream(self, argv: list[str], sink: LineSink, extra_env: Mapping[str, str] | None = None) -> int:
        """Run ``argv`` and hand every output line (stdout and stderr merged) to ``sink``; return the exit code."""
        env = {**self.env, **(extra_env or {})}
        with subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        ) as proc:
            assert proc.stdout is not None
            for raw in proc.stdout:
                sink(raw.decode("utf-8", "replace").rstrip("\n"))
            return proc.wait()

    def run_build(self, argv_for: Callable[[Path], list[str]], tag: str, sink: LineSink,
                  extra_env: Mapping[str, str]) -> BuildResult:
        """Run the build command ``argv_for(iidfile)``, which writes the image id to ``iidfile``: its output
        goes to ``sink``, the Containerfile steps it reports are counted, and it is timed."""
        with tempfile.TemporaryDirectory(prefix="pinmatrix-iid-") as tmp:
            iidfile = Path(tmp) / "iid"
            steps = 0

            def tee(line: str) -> None:
                nonlocal steps
                step = parse_step(line)
                if step:
                    steps = step[0]
                sink(line)

            start = time.monotonic()
            code = self.stream(argv_for(iidfile), tee, extra_env)
            if code != 0 or not iidfile.exists():
                raise EngineError(f"engine {self.name}: build of {tag} failed (exit {code})")
            image_id = iidfile.read_text().strip()
            if not image_id.startswith("sha256:"):
                image_id = f"sha256:{image_id}"
            return BuildResult(image_id, time.monotonic() - start, steps)

    # ---------------------------------------------------------------------------------------- interface
    @abstractmethod
    def ensure_running(self) -> None:
        """Raise EngineError with a clear line when the engine is missing or its daemon is not running."""

    @abstractmethod
    def build(
        self,
        context: Path,
        tag: str,
        *,
        containerfile: str = "Containerfile",
        source_date_epoch: int | None = None,
        sink: LineSink = lambda line: None,
        annotations: Mapping[str, str] | None = None,
    ) -> BuildResult:
        """Build ``context`` into an image tagged ``tag`` (network: host, so pip reaches the index);
        ``annotations`` go on the image's manifest where the engine's builder can put them there."""

    @abstractmethod
    def push(self, ref: str, *, tls_verify: bool | None = None) -> str:
        """Push ``ref`` (registry/repo:tag) and return the manifest digest ("sha256:...").
        ``tls_verify=None``: plain HTTP for loopback registries (127.x, localhost), TLS otherwise."""

    @abstractmethod
    def pull(self, ref: str, *, tls_verify: bool | None = None) -> None:
        """Pull ``ref`` (registry/repo@sha256:... or :tag); ``tls_verify`` as for push."""

    @abstractmethod
    def gpu_args(self) -> list[str]:
        """Arguments that hand the host's GPUs to a container."""

    def inspect(self, ref: str) -> ImageInfo | None:
        proc = self.call(["image", "inspect", ref], check=False)
        if proc.returncode != 0:
            return None
        data = json.loads(proc.stdout)[0]
        config = data.get("Config") or {}
        image_id = data["Id"] if data["Id"].startswith("sha256:") else f"sha256:{data['Id']}"
        return ImageInfo(
            id=image_id,
            labels=dict(config.get("Labels") or data.get("Labels") or {}),
            env=tuple(config.get("Env") or ()),
            size=int(data.get("Size") or 0),
            repo_digests=tuple(data.get("RepoDigests") or ()),
            layers=tuple((data.get("RootFS") or {}).get("Layers") or ()),
            user=str(config.get("User") or ""),
        )

    def exists(self, ref: str) -> bool:
        return self.inspect(ref) is not None

    def run(
        self,
        ref: str,
        command: Sequence[str],
        *,
        network: str = "none",
        gpus: bool | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``command`` in a fresh container of ``ref`` and remove it. ``gpus=None``: pass GPUs when the
        host has them."""
        args = ["run", "--rm", f"--network={network}"]
        if gpus if gpus is not None else host_has_gpus():
            args += self.gpu_args()
        for key, value in (env or {}).items():
            args += ["-e", f"{key}={value}"]
        args += [ref, *command]
        return self.call(args, check=check, timeout=timeout)

    def tag(self, source: str, target: str) -> None:
        self.call(["tag", source, target])

    def remove(self, ref: str, *, missing_ok: bool = True) -> None:
        proc = self.call(["rmi", "--force", ref], check=False)
        if proc.returncode != 0 and not (missing_ok and not self.exists(ref)):
            raise EngineError(f"engine {self.name}: could not remove {ref}: {last_line(proc.stderr)}")

    def load(self, archive: Path) -> None:
        """Load a docker-archive tarball (how the base root filesystem enters the store)."""
        self.call(["load", "-i", str(archive)])


def tls_for(ref: str, tls_verify: bool | None) -> bool:
    """Whether to verify TLS for the registry of ``ref``: as given, else off only for loopback hosts."""
    return tls_verify_for(ref.split("/", 1)[0] if "/" in ref else "", tls_verify)


def last_line(blob: bytes | None) -> str:
    lines = [ln.strip() for ln in (blob or b"").decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"
