"""Where a smoke's process runs: the one interface the runner calls (``SmokeRuntime``).

A smoke run chooses its runtime once (``smoke.session``), holds it in ``RunOptions.runtime`` and records its
``name`` with every result. The runner (``runner.run_one``, ``batch``, ``cellrun``) asks it two things: what a
cell needs before its first smoke (``prepare_cell``) and to start one smoke's process, or one batch's
(``start``), handing it what a runtime may read of the run's options (``RuntimeOptions``); it gets back a
``ProcessResult`` and classifies, applies known issues and records itself. A runtime never calls back into the
runner, and this module imports none of it. The runtimes:

- ``runner.HostProcesses``: this host's own interpreter (``--runtime host``; bisect's ``venv`` is one with another
  interpreter); each cell gets its overlay and its comparison with its lock;
- ``container.ContainerSmokes``: a fresh docker/podman container of the cell's image per smoke;
- ``sandbox.SandboxSmokes``: the cell's image unpacked from an OCI layout (``oci.unpack``) and run behind
  bubblewrap, no engine (``--runtime sandbox``);
- ``chroot.ChrootSmokes``: the same root entered by the hand-made chroot, which trusts the image with host root
  (``--runtime chroot-trusting-root``).

The last two share ``image_root.ImageRootSmokes``; another runtime is one more class with these three members."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pinmatrix.project.catalogue import Smoke
from pinmatrix.smoke.overlay import Overlay
from pinmatrix.smoke.target import SmokeTarget


@dataclass
class ProcessResult:
    """How one smoke's process (or one batch's) ended, as a runtime reports it to the runner."""

    returncode: int | None
    timed_out: bool
    result: dict[str, Any] | None
    seconds: float
    infra: str | None = None  # the runtime itself failed (no smoke ran): an infrastructure error, said how


class RuntimeOptions(Protocol):
    """What a runtime may read of the run's options (``runner.RunOptions``): the host runtime's interpreter,
    overlay and project; the process's grace and log cap."""

    @property
    def python(self) -> str: ...
    @property
    def kill_grace_s(self) -> float: ...
    @property
    def log_cap(self) -> int: ...
    @property
    def wheels_dir(self) -> Path | None: ...
    @property
    def overlay_dir(self) -> Path | None: ...
    @property
    def repo_root(self) -> Path: ...


@dataclass(frozen=True)
class CellSetup:
    """What a runtime made for a cell before its smokes: the host's overlay (extra wheels, installed-tree patches)
    and how the host differs from the cell's lock, recorded with each result; nothing for an image."""

    overlay: Overlay | None = None
    host_vs_lock: dict[str, Any] | None = None


class SmokeRuntime(Protocol):
    """One smoke run's runtime (see the module's text)."""

    @property
    def name(self) -> str: ...  # recorded with each result: host, venv, docker, podman, chroot

    def prepare_cell(self, cell: SmokeTarget, options: RuntimeOptions, echo: Callable[[str], None]) -> CellSetup: ...

    def start(self, cell: SmokeTarget, smoke: Smoke, options: RuntimeOptions, env: dict[str, str], log_path: Path,
              result_path: Path, timeout: float, work: Path) -> ProcessResult:
        """Run ``smoke.module`` with the argument ``smoke.name`` (``--batch`` for a batch), its output in
        ``log_path``, its result in ``result_path`` (in ``work``, the cell's folder), killed after ``timeout``."""
        ...
