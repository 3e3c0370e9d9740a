"""Docker backend: a Docker daemon reached through ``DOCKER_HOST`` (or its default socket), legacy builder.

Docker's legacy builder stamps creation times into every image config, so two clean builds differ in their
image id; layers that come from the build cache are shared all the same. Use the podman backend when the
digest itself must be reproducible."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from pinmatrix.engine.base import BuildResult, LineSink, OCIEngine, last_line
from pinmatrix.errors import EngineError

_DIGEST_RE = re.compile(r"digest: (sha256:[0-9a-f]{64})")


class DockerEngine(OCIEngine):
    name = "docker"
    binary = "docker"
    reproducible = False
    _version: subprocess.CompletedProcess[bytes] | None = None

    def ensure_running(self) -> None:
        if not self.is_installed():
            raise EngineError(f"{self.not_installed_message()}; install docker.io {self.other_engine_hint()}")
        proc = self._server_version()
        if proc.returncode != 0:
            host = self.env.get("DOCKER_HOST", "unix:///var/run/docker.sock")
            raise EngineError(
                f"engine docker: the Docker daemon is not running at {host} ({last_line(proc.stderr)}); "
                f"start dockerd {self.other_engine_hint()}"
            )

    def reads_zstd_layers(self) -> bool:
        """Docker reads zstd layers from 23.0 on; Debian's docker.io 20.10 does not (nor an unknown version)."""
        proc = self._server_version()
        head = proc.stdout[:64].decode("ascii", "replace").strip().split(".", 1)[0]
        return proc.returncode == 0 and head.isdigit() and int(head) >= 23

    def _server_version(self) -> subprocess.CompletedProcess[bytes]:
        """``docker version`` of the daemon, asked once per engine object (a daemon that answered keeps its
        version; one that did not is asked again)."""
        if self._version is None or self._version.returncode != 0:
            self._version = self.call(["version", "--format", "{{.Server.Version}}"], check=False, timeout=30)
        return self._version

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
        # the classic builder (DOCKER_BUILDKIT=0) has no --annotation, and the schema 2 manifest it pushes none:
        # ``annotations`` are not put anywhere (docs/images.md says so)
        def argv_for(iidfile: Path) -> list[str]:
            return self._argv(["build", "--network=host", "--force-rm", f"--iidfile={iidfile}",
                               "-f", str(context / containerfile), "-t", tag, str(context)])

        extra = {"DOCKER_BUILDKIT": "0"}
        if source_date_epoch is not None:
            extra["SOURCE_DATE_EPOCH"] = str(source_date_epoch)
        return self.run_build(argv_for, tag, sink, extra)

    def push(self, ref: str, *, tls_verify: bool | None = None) -> str:
        # Docker treats 127.0.0.0/8 registries as insecure on its own; others must be configured in the daemon.
        proc = self.call(["push", ref])
        match = _DIGEST_RE.search(proc.stdout.decode("utf-8", "replace"))
        if not match:
            raise EngineError(f"engine docker: push of {ref} printed no digest")
        return match.group(1)

    def pull(self, ref: str, *, tls_verify: bool | None = None) -> None:
        self.call(["pull", ref])

    def gpu_args(self) -> list[str]:
        return ["--gpus", "all"]
