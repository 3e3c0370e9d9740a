"""Podman/buildah backend: daemonless, containers-storage configured by the usual files or by
``CONTAINERS_STORAGE_CONF`` / ``CONTAINERS_CONF``; without either, the project's own configuration
(``engine.services.project_podman_env``), in every shell, the same one ``pinmatrix engine-env`` prints. Builds go through ``buildah bud --layers --isolation chroot
--timestamp EPOCH``, which clamps every timestamp (config, history and file mtimes) so the same inputs give
the same image id; podman runs, pushes and pulls against the same store."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path

from pinmatrix.engine.base import BuildResult, LineSink, OCIEngine, last_line, tls_for
from pinmatrix.engine.services import project_podman_env
from pinmatrix.errors import EngineError
from pinmatrix.paths import state_dir


class PodmanEngine(OCIEngine):
    name = "podman"
    binary = "podman"
    builder = "buildah"
    reproducible = True

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        super().__init__(env)
        self.env.update(project_podman_env(state_dir(), self.env))

    def ensure_running(self) -> None:
        for tool in (self.binary, self.builder):
            if not self.which(tool):
                raise EngineError(
                    f"engine podman: `{tool}` is not installed (not on PATH); install podman and buildah "
                    f"{self.other_engine_hint()}"
                )
        proc = self.call(["info", "--format", "json"], check=False, timeout=60)
        if proc.returncode != 0:
            raise EngineError(f"engine podman: `podman info` failed: {last_line(proc.stderr)}")
        try:
            json.loads(proc.stdout)
        except json.JSONDecodeError as err:
            raise EngineError("engine podman: `podman info` printed no JSON") from err

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
        builder = self.which(self.builder)
        if builder is None:
            raise EngineError(f"engine podman: `{self.builder}` is not installed (not on PATH)")
        def argv_for(iidfile: Path) -> list[str]:
            argv = [builder, "bud", "--layers", "--isolation=chroot", "--network=host", f"--iidfile={iidfile}",
                    "-f", str(context / containerfile), "-t", tag]
            if source_date_epoch is not None:
                argv.append(f"--timestamp={source_date_epoch}")
            argv += [f"--annotation={key}={value}" for key, value in (annotations or {}).items()]
            return [*argv, str(context)]

        extra = {} if source_date_epoch is None else {"SOURCE_DATE_EPOCH": str(source_date_epoch)}
        return self.run_build(argv_for, tag, sink, extra)

    def push(self, ref: str, *, tls_verify: bool | None = None) -> str:
        with tempfile.TemporaryDirectory(prefix="pinmatrix-digest-") as tmp:
            digestfile = Path(tmp) / "digest"
            self.call(["push", f"--tls-verify={str(tls_for(ref, tls_verify)).lower()}", f"--digestfile={digestfile}", ref])
            digest = digestfile.read_text().strip() if digestfile.exists() else ""
        if not digest.startswith("sha256:"):
            raise EngineError(f"engine podman: push of {ref} wrote no digest")
        return digest

    def pull(self, ref: str, *, tls_verify: bool | None = None) -> None:
        self.call(["pull", f"--tls-verify={str(tls_for(ref, tls_verify)).lower()}", ref])

    def gpu_args(self) -> list[str]:
        # CDI: `nvidia-ctk cdi generate` writes the spec that names nvidia.com/gpu=all.
        return ["--device", "nvidia.com/gpu=all"]
