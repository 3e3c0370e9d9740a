"""What a build of cells is asked to do (``BuildSettings``) and what it reports per cell (``CellBuildResult``):
shared by the assembler path (``build``) and the Containerfile path (``containerfile``), which therefore do not
import each other."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pinmatrix.cell import Cell
from pinmatrix.errors import PinmatrixError
from pinmatrix.image.annotations import ImageOrigin
from pinmatrix.image.assembly.assemble import AssembledImage, AssemblySettings
from pinmatrix.image.assembly.merge import DEFAULT_MERGE_BELOW
from pinmatrix.imageref import image_ref
from pinmatrix.oci.compression import DEFAULT_COMPRESSION, LayerCompression
from pinmatrix.paths import CACHE_DIR, LOGS_DIR

Status = Literal["built", "cached", "failed"]


@dataclass(frozen=True)
class BuildSettings:
    root: Path = Path(".")  # the project: smoke/, patches/, locks/, images/ (Containerfile path)
    cache_dir: Path = CACHE_DIR
    logs_dir: Path = LOGS_DIR
    registry: str | None = None  # "127.0.0.1:5000/pinmatrix": image refs are <registry>/<stack>:<cell id>
    ca_certificates: tuple[Path, ...] = ()  # trusted for downloads; in images only with ca_in_images
    ca_in_images: bool = False
    push: bool = False
    check_registry: bool = True  # a tag with the same inputs in the registry counts as built
    smoke_dir: Path | None = None  # default: <root>/smoke
    layout_dir: Path | None = None  # default: <cache_dir>/../oci
    compression: LayerCompression = DEFAULT_COMPRESSION  # the cell layers'; the base is always the default
    load: bool = True  # load each image into the engine's store
    authfile: Path | None = None
    merge_below: int = DEFAULT_MERGE_BELOW  # wheels smaller than this many bytes share one layer; 0: each its own
    origin: ImageOrigin = ImageOrigin()  # source, revision, SOURCE_DATE_EPOCH: the manifests' annotations

    @property
    def images_dir(self) -> Path:
        return self.root / "images"

    @property
    def layout(self) -> Path:
        return self.layout_dir or self.cache_dir.parent / "oci"

    def assembly(self, jobs: int = 4) -> AssemblySettings:
        return AssemblySettings(root=self.root, cache_dir=self.cache_dir, layout_dir=self.layout,
                                smoke_dir=self.smoke_dir, extra_ca=self.ca_certificates,
                                ca_in_images=self.ca_in_images, compression=self.compression, jobs=jobs,
                                registry_authfile=self.authfile, merge_below=self.merge_below,
                                origin=self.origin)


@dataclass
class CellBuildResult:
    cell: Cell
    ref: str
    status: Status
    log: Path
    image_id: str | None = None  # the config digest (what engines call the image id)
    digest: str | None = None  # manifest digest (the same in the layout and in the registry)
    cached_in: str | None = None  # "layout", "local" or "registry"
    seconds: float = 0.0
    reason: str = ""
    layers: list[str] = field(default_factory=list)
    assembled: AssembledImage | None = None

    @property
    def ok(self) -> bool:
        return self.status != "failed"

    def fail(self, reason: str, note: Callable[[str], None]) -> None:
        """Mark the cell failed with a one-line reason, and say so in its build log."""
        self.status, self.reason = "failed", reason
        note(f"# FAILED: {reason}")

    def to_json(self) -> dict[str, object]:
        return {"cell": self.cell.id, "name": self.cell.name, "ref": self.ref, "status": self.status,
                "digest": self.digest, "image_id": self.image_id, "cached_in": self.cached_in,
                "seconds": round(self.seconds, 3), "reason": self.reason or None, "log": str(self.log),
                "layers": self.layers}


def needs_containerfile(cell: Cell) -> bool:
    return any(p.kind == "source" for p in cell.patches_to_apply)


@contextmanager
def cell_build(cell: Cell, settings: BuildSettings, first_line: str,
               keep: list[str] | None = None) -> Iterator[tuple[CellBuildResult, Callable[[str], None]]]:
    """One cell's build, as both paths run it: its log (``logs_dir/<id>.log``, each line flushed, and kept in
    ``keep`` too when given) opened with ``first_line``, and a result that stays ``failed`` unless the block sets
    it. A PinmatrixError or OSError in the block is the cell's failure, in one line in the result and the log,
    never a traceback (one cell cannot stop the others); the result's seconds cover the block."""
    settings.logs_dir.mkdir(parents=True, exist_ok=True)
    log = settings.logs_dir / f"{cell.id}.log"
    result = CellBuildResult(cell=cell, ref=image_ref(cell, settings.registry), status="failed", log=log)
    start = time.monotonic()
    with open(log, "w", encoding="utf-8") as handle:

        def note(line: str) -> None:
            if keep is not None:
                keep.append(line)
            handle.write(line + "\n")
            handle.flush()

        note(first_line)
        try:
            yield result, note
        except PinmatrixError as err:
            result.fail(str(err), note)
        except OSError as err:
            result.fail(f"{type(err).__name__}: {err}", note)
    result.seconds = time.monotonic() - start
