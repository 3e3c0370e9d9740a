"""Where a probe runs, and how its point is made:

- ``host``: the current interpreter, plus the cell's overlay (extra wheels, installed-tree patches) made once;
- ``venv``: the cell locked with uv, then installed from its lock (hashes required, no dependencies) into a
  venv that uv creates for that cell alone;
- ``docker`` / ``podman``: the cell locked and built as an image with the project's image builder, the smoke
  run in a fresh container of it.

A point that cannot be made raises :class:`CannotProbe` with one line (does not resolve, does not build) and
the search skips it. Each cell is made at most once per bisect.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from pinmatrix.bisect.probe import CannotProbe, PointEnv
from pinmatrix.cell import Cell
from pinmatrix.hashing import sha256_file
from pinmatrix.image.build import CellBuilder
from pinmatrix.image.settings import BuildSettings
from pinmatrix.index.uv import find_uv
from pinmatrix.lock.resolve import lock_cell
from pinmatrix.project.lockfile import lock_path
from pinmatrix.sanitize import file_slug
from pinmatrix.smoke.container import ContainerSmokes, image_digest
from pinmatrix.smoke.overlay import build_overlay
from pinmatrix.smoke.runner import HostProcesses, RunOptions
from pinmatrix.smoke.target import SmokeTarget

Echo = Callable[[str], None]


class HostRuntime:
    """The current environment; a cell's overlay is built the first time one of its probes has to run."""

    name = "host"

    def __init__(self, options: RunOptions, *, overlay_root: Path, wheels_dir: Path | None, repo_root: Path,
                 echo: Echo) -> None:
        self.options = options
        self.overlay_root = overlay_root
        self.wheels_dir = wheels_dir
        self.repo_root = repo_root
        self.echo = echo
        self._made: dict[str, PointEnv] = {}

    def prepare(self, cell: SmokeTarget) -> PointEnv:
        if cell.id not in self._made:
            overlay = None
            if self.wheels_dir or cell.patches:
                overlay = build_overlay(cell, self.overlay_root, wheels_dir=self.wheels_dir, repo_root=self.repo_root,
                                        python=self.options.python, log=self.echo)
            self._made[cell.id] = PointEnv(self.options, overlay)
        return self._made[cell.id]


def cell_lock(cell: Cell, project_root: Path, work_root: Path, exclude_newer: str | None, echo: Echo) -> Path:
    """The cell's lock: the project's ``locks/<id>.txt`` when it has one, else one made with uv under
    ``work_root/locks`` (a bisect point outside the matrix does not add files to the project)."""
    shipped = lock_path(cell, project_root)
    if shipped.is_file():
        return shipped
    made = lock_path(cell, work_root)
    if made.is_file():
        return made
    echo(f"  lock {cell.name}: uv pip compile")
    res = lock_cell(cell, work_root, exclude_newer)
    if not res.ok:
        raise CannotProbe(f"does not resolve: {res.reason}")
    return res.path


def _uv_env() -> dict[str, str]:
    return {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"}


class VenvRuntime:
    """One uv-created venv per cell under ``work_root/venvs/<cell id>``, installed from the cell's lock."""

    name = "venv"

    def __init__(self, options: RunOptions, *, project_root: Path, work_root: Path, exclude_newer: str | None,
                 echo: Echo, python: str | None = None) -> None:
        self.options = options
        self.python = python  # the interpreter uv makes the venvs from; None: the cell's Python version
        self.project_root = project_root
        self.work_root = work_root
        self.exclude_newer = exclude_newer
        self.echo = echo
        self._made: dict[str, PointEnv] = {}

    def prepare(self, cell: Cell) -> PointEnv:
        if cell.id in self._made:
            return self._made[cell.id]
        lock = cell_lock(cell, self.project_root, self.work_root, self.exclude_newer, self.echo)
        request = self.python or cell.python
        venv = (self.work_root / "venvs" / f"{cell.id}-py{file_slug(request)[-40:]}").resolve()
        python = venv / "bin" / "python"
        stamp = venv / ".pinmatrix-lock-sha256"
        want = sha256_file(lock)
        if not (python.exists() and stamp.is_file() and stamp.read_text().strip() == want):
            uv = find_uv()
            self.echo(f"  venv {cell.name}: uv venv --python {request} + install from {lock.name}")
            made = subprocess.run([uv, "venv", "--quiet", "--clear", "--python", request, str(venv)],
                                  capture_output=True, text=True, env=_uv_env(), check=False)
            if made.returncode != 0:
                raise CannotProbe(f"no venv for python {request} ({_last(made.stderr)}); --runtime podman or "
                                  "--runtime docker probes in an image of the cell, with its own Python")
            inst = subprocess.run([uv, "pip", "install", "--quiet", "--python", str(python), "--require-hashes",
                                   "--no-deps", "-r", str(lock.resolve())],
                                  capture_output=True, text=True, env=_uv_env(), check=False)
            if inst.returncode != 0:
                raise CannotProbe(f"does not install: {_last(inst.stderr)}")
            stamp.write_text(want + "\n")
        env = PointEnv(replace(self.options, python=str(python), runtime=HostProcesses(name="venv")))
        self._made[cell.id] = env
        return env


class ImageRuntime:
    """One image per cell, made by the project's image builder (``pinmatrix build``'s code path:
    ``pinmatrix.image.build.CellBuilder``) and loaded into the engine; the smoke runs in a fresh container of
    it, and its results carry the image digest."""

    def __init__(self, options: RunOptions, *, engine: Any, project_root: Path, work_root: Path,
                 exclude_newer: str | None, cache_dir: Path, smoke_dir: Path, ca_certificates: tuple[Path, ...],
                 ca_in_images: bool, echo: Echo) -> None:
        self.options = options
        self.engine = engine
        self.name = engine.name
        self.project_root = project_root
        self.work_root = work_root
        self.exclude_newer = exclude_newer
        self.smoke_dir = smoke_dir
        self.echo = echo
        self.builder = image_builder(engine, project_root, cache_dir, work_root / "logs" / "build", smoke_dir,
                                     ca_certificates, ca_in_images)
        self._made: dict[str, PointEnv] = {}

    def prepare(self, cell: Cell) -> PointEnv:
        if cell.id in self._made:
            return self._made[cell.id]

        lock = cell_lock(cell, self.project_root, self.work_root, self.exclude_newer, self.echo)
        self.echo(f"  image {cell.name}: building with the image builder, loading into {self.engine.name}")
        result = self.builder.build(cell, lock.read_text(encoding="utf-8"))
        if not result.ok:
            raise CannotProbe(f"does not build: {result.reason or 'build failed'} (log: {result.log})")
        digest = image_digest(self.engine, result.ref) or result.digest
        if digest is None:
            raise CannotProbe(f"built {result.ref}, but the {self.engine.name} store does not have it")
        env = PointEnv(replace(self.options, image_digest=digest,
                               runtime=ContainerSmokes(self.engine, result.ref, self.smoke_dir)))
        self._made[cell.id] = env
        return env


def image_builder(engine: Any, root: Path, cache_dir: Path, logs_dir: Path, smoke_dir: Path,
                  ca_certificates: tuple[Path, ...], ca_in_images: bool) -> Any:
    """The project's image builder, set up as ``pinmatrix build`` sets it up (no registry, no push, images
    loaded into ``engine``). The only place the bisect touches image building."""

    settings = BuildSettings(root=root, cache_dir=cache_dir, logs_dir=logs_dir, registry=None,
                             ca_certificates=ca_certificates, ca_in_images=ca_in_images, push=False,
                             check_registry=False, smoke_dir=smoke_dir)
    return CellBuilder(settings, engine, None, jobs=1)


def _last(text: str) -> str:
    """uv's error line (else its last line)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    return (errors or lines or ["no output"])[0 if errors else -1][:300]
