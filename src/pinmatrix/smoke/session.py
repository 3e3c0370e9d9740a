"""One ``smoke`` run over cells: in the host's own environment, in each cell's image in an engine's container,
or in its image unpacked from an OCI layout (the sandbox runtime, or the chroot that trusts the image with root).
The command builds ``SmokeSettings`` and prints; this module decides where each cell runs and records the results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from pinmatrix.engine import get_engine
from pinmatrix.errors import PinmatrixError
from pinmatrix.imageref import image_ref
from pinmatrix.paths import KERNEL_CACHE_DIR, OCI_DIR, ROOTS_DIR
from pinmatrix.project.catalogue import Smoke, find_smoke_dir
from pinmatrix.project.matrix_toml import Matrix
from pinmatrix.results.store import HostFingerprint, ResultsStore, SmokeRecord
from pinmatrix.smoke.cellrun import CellRun, run_cell, run_cells
from pinmatrix.smoke.chroot import find_image
from pinmatrix.smoke.chroot import prepare as prepare_chroot
from pinmatrix.smoke.container import ContainerSmokes, image_digest
from pinmatrix.smoke.kernel_cache import prepare_cache
from pinmatrix.smoke.runner import HostProcesses, RunOptions, plan_smokes
from pinmatrix.smoke.sandbox import prepare as prepare_sandbox
from pinmatrix.smoke.target import SmokeTarget

Echo = Callable[[str], None]
# --runtime names whose images come from an OCI layout, and what makes each one's runtime for an image
LAYOUT_RUNTIMES: dict[str, Callable[..., Any]] = {"sandbox": prepare_sandbox, "chroot-trusting-root": prepare_chroot}


@dataclass
class SmokeSettings:
    """What one smoke run is asked for: the cells, where they run, and the runner's options."""

    cells: Sequence[SmokeTarget]
    matrix: Matrix | None  # None: the synthetic host cell, no matrix read
    catalogue: list[Smoke]
    options: RunOptions
    runtime: str = "host"  # --runtime: host, docker, podman or a LAYOUT_RUNTIMES name; run_smokes makes it
    smoke_dir: Path | None = None  # --smoke-dir; None: the project's smoke/ (project.catalogue.find_smoke_dir)
    keyword: str | None = None  # --smoke EXPR: the smokes whose names match
    image: str | None = None  # --image: one reference for every cell
    layout: Path | None = None  # the layout runtimes' OCI layout (default paths.OCI_DIR)
    roots: Path | None = None  # where the layout runtimes unpack images (default paths.ROOTS_DIR)


@dataclass
class SmokeSession:
    """The runs of the cells that ran, and a line for each cell whose image was not there."""

    runs: list[CellRun]
    no_image: list[str] = field(default_factory=list)

    @property
    def records(self) -> list[SmokeRecord]:
        return [r for run in self.runs for r in run.records]

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.records:
            counts[r.status] = counts.get(r.status, 0) + 1
        return counts

    def summary(self, run_id: str) -> str:
        """``run ID: 3 pass, 1 skip; 2 already recorded; 1 cell(s) without an image``."""
        skipped = sum(len(run.skipped_recorded) for run in self.runs)
        text = ", ".join(f"{n} {s}" for s, n in sorted(self.counts().items())) or "nothing run"
        return (f"run {run_id}: {text}" + (f"; {skipped} already recorded" if skipped else "")
                + (f"; {len(self.no_image)} cell(s) without an image" if self.no_image else ""))

    def notes(self) -> list[str]:
        """The lines for stderr: cells without an image, known issues that passed, infrastructure errors."""
        lines = [f"no image: {line}" for line in self.no_image]
        lines += [f"note: {r.smoke} on cell {r.cell_id} passed although known issue {r.known_issue} expects it "
                  "to fail: the issue may be gone" for r in self.records if r.status == "xpass"]
        lines += [f"infrastructure error: {r.smoke} on cell {r.cell_id}: {r.reason} (not counted against the cell)"
                  for r in self.records if r.status == "error"]
        return lines

    def exit_code(self) -> int:
        counts = self.counts()
        return 1 if counts.get("fail") or counts.get("error") or self.no_image else 0


def run_smokes(settings: SmokeSettings, store: ResultsStore, host: HostFingerprint, run_id: str,
               echo: Echo) -> SmokeSession:
    """Smoke every cell in the runtime ``settings.runtime`` names, chosen here once (the host's processes, or
    each cell's image from an engine's store or an OCI layout), recording each result in ``store``."""
    if settings.runtime == "host":
        options = replace(settings.options, runtime=HostProcesses())
        return SmokeSession(run_cells(settings.cells, store, options, host=host, run_id=run_id, echo=echo))
    source: ImageSource = (_LayoutRoots(settings, run_id, echo) if settings.runtime in LAYOUT_RUNTIMES
                           else _EngineImages(settings, echo))
    return _run_in(source, settings, store, host, run_id, echo)


def cell_image_ref(cell: SmokeTarget, settings: SmokeSettings) -> str:
    """The image a container or chroot run smokes for ``cell``: --image, else the cell's reference in the matrix's
    registry (the build's tag)."""
    if settings.image:
        return settings.image
    if settings.matrix is None:
        raise PinmatrixError(f"--runtime {settings.runtime} without --cell/--stack/-k needs --image REF")

    return image_ref(cell, settings.matrix.settings.registry)  # type: ignore[arg-type]


def _container_cache(engine: Any, ref: str, digest: str, root: Path, mode: str | None,
                     echo: Echo) -> tuple[Any, dict[str, str]]:
    """The image's kernel cache for docker/podman and the image's own Env: none for an image that runs as
    another user than root (its folder would not be writable there)."""

    info = engine.inspect(ref)
    image_env = dict(e.split("=", 1) for e in (info.env if info else ()) if "=" in e)
    user = info.user if info else ""
    if user not in ("", "root", "0", "0:0", "root:root"):
        echo(f"  kernel cache off: the image runs as {user!r}, not root")
        return None, image_env
    cache = prepare_cache(root / KERNEL_CACHE_DIR, digest, mode or "keep")
    if cache is not None:
        echo(f"  kernel cache {cache.folder}{' (emptied)' if mode == 'cold' else ''}")
    return cache, image_env


class ImageSource(Protocol):
    """Where each cell's image is found and the runtime its smokes then run in: an engine's store (a container of
    the image, ``ContainerSmokes``) or an OCI layout (the image unpacked, ``ChrootSmokes``)."""

    where: str  # for the run's first line: "runtime podman", "runtime sandbox, layout <the layout>"

    def digest(self, ref: str) -> str | None: ...
    def absent(self, ref: str) -> tuple[str, str]: ...  # (the session's no-image line, the progress line)
    def options(self, cell: SmokeTarget, ref: str, digest: str) -> RunOptions: ...  # its runtime and digest


def _run_in(source: ImageSource, settings: SmokeSettings, store: ResultsStore, host: HostFingerprint, run_id: str,
            echo: Echo) -> SmokeSession:
    """Smoke each cell in its image; a cell whose image is not there gets a line in ``no_image`` (naming the
    cell and the reference) and is passed over."""
    session = SmokeSession([])
    echo(f"run {run_id} on {host.label()} (host {host.id}), {source.where}")
    for cell in settings.cells:
        ref = cell_image_ref(cell, settings)
        digest = source.digest(ref)
        if digest is None:
            missing, progress = source.absent(ref)
            session.no_image.append(f"cell {cell.id} {cell.name}: {missing}")
            echo(f"cell {cell.id} {cell.name}: {progress}; passed over")
            continue
        opts = source.options(cell, ref, digest)
        session.runs.append(run_cell(cell, settings.catalogue, store, opts, host=host, run_id=run_id, echo=echo))
    return session


class _EngineImages:
    """Each cell's image in docker's or podman's store, smoked in a container of it."""

    def __init__(self, settings: SmokeSettings, echo: Echo) -> None:
        self.settings, self.echo = settings, echo
        self.runtime = settings.runtime
        self.engine = get_engine(self.runtime)
        self.engine.ensure_running()
        self.smoke_dir = find_smoke_dir(settings.smoke_dir)
        self.where = f"runtime {self.runtime}"

    def digest(self, ref: str) -> str | None:
        return image_digest(self.engine, ref)

    def absent(self, ref: str) -> tuple[str, str]:
        return (f"{ref} is not in the {self.runtime} store (build it with `pinmatrix build`, or pull it)",
                f"no image {ref} in the {self.runtime} store")

    def options(self, cell: SmokeTarget, ref: str, digest: str) -> RunOptions:
        options = self.settings.options
        cache, image_env = _container_cache(self.engine, ref, digest, options.repo_root, options.kernel_cache,
                                            self.echo)
        return replace(options, image_digest=digest, kernel_cache=options.kernel_cache if cache else "off",
                       runtime=ContainerSmokes(self.engine, ref, self.smoke_dir, log_cap=options.log_cap,
                                               cache=cache, image_env=image_env))


class _LayoutRoots:
    """Each cell's image in an OCI layout, unpacked into a root and smoked there (``LAYOUT_RUNTIMES``)."""

    def __init__(self, settings: SmokeSettings, run_id: str, echo: Echo) -> None:
        self.settings, self.run_id, self.echo = settings, run_id, echo
        options = settings.options
        self.layout = settings.layout or options.repo_root / OCI_DIR
        self.roots = settings.roots or options.repo_root / ROOTS_DIR
        self.smoke_dir = find_smoke_dir(settings.smoke_dir)
        self.where = f"runtime {settings.runtime}, layout {self.layout}"

    def digest(self, ref: str) -> str | None:
        return find_image(self.layout, ref)

    def absent(self, ref: str) -> tuple[str, str]:
        return (f"{ref} is not in the OCI layout {self.layout} (build it with `pinmatrix build --engine none`, or "
                "unpack its bundle there)", f"no image {ref} in {self.layout}")

    def options(self, cell: SmokeTarget, ref: str, digest: str) -> RunOptions:
        options = self.settings.options
        self.echo(f"cell {cell.id} {cell.name}: image {digest}")
        prepare = LAYOUT_RUNTIMES[self.settings.runtime]
        runtime = prepare(self.layout, digest, self.roots, self.smoke_dir,
                          smokes=plan_smokes(cell, self.settings.catalogue, self.settings.keyword),
                          gpu_required=cell.gpu_required,
                          log_dir=options.logs_dir / self.run_id / self.settings.runtime / digest[7:19],
                          kill_grace_s=options.kill_grace_s, log_cap=options.log_cap, echo=self.echo,
                          kernel_cache=options.kernel_cache or "keep")
        return replace(options, image_digest=digest, runtime=runtime)
