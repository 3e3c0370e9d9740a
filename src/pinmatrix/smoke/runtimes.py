"""Where a smoke's process runs: the one interface the runner calls (``SmokeRuntime``).

A smoke run chooses its runtime once (``smoke.session``), holds it in ``RunOptions.runtime`` and records its
``name`` with every result. The runner (``runner.run_one``, ``batch``, ``cellrun``) asks it two things: what a
cell needs before its first smoke (``prepare_cell``) and to start one smoke's process, or one batch's
(``start``); it gets back a ``ProcessResult`` and classifies, applies known issues and records itself. A runtime
never calls back into the runner. The runtimes:

- ``runner.HostProcesses``: this host's own interpreter (``--runtime host``; bisect's ``venv`` is one with another
  interpreter); each cell gets its overlay and its comparison with its lock;
- ``container.ContainerSmokes``: a fresh docker/podman container of the cell's image per smoke;
- ``chroot.ChrootSmokes``: the cell's image unpacked from an OCI layout and entered without an engine.

Another (a sandbox) is one more class with these three members."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pinmatrix.project.catalogue import Smoke
from pinmatrix.smoke.overlay import Overlay
from pinmatrix.smoke.target import SmokeTarget

if TYPE_CHECKING:  # the runner's types: the runner imports this module, never the other way round at run time
    from pinmatrix.smoke.runner import ProcessResult, RunOptions


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

    def prepare_cell(self, cell: SmokeTarget, options: RunOptions, echo: Callable[[str], None]) -> CellSetup: ...

    def start(self, cell: SmokeTarget, smoke: Smoke, options: RunOptions, env: dict[str, str], log_path: Path,
              result_path: Path, timeout: float, work: Path) -> ProcessResult:
        """Run ``smoke.module`` with the argument ``smoke.name`` (``--batch`` for a batch), its output in
        ``log_path``, its result in ``result_path`` (in ``work``, the cell's folder), killed after ``timeout``."""
        ...
