"""The facts the canary compares, gathered for one cell: its latest plain results per smoke x host (the results
store), its known issues' expectations (its cell, where the matrix can make it), its pins (the cell, a promotion
record, or its lock), the arch coverage of an arch-scan document, its image's size in the OCI layout and its build
time in a build record (``pinmatrix build --metadata-file``, or what a canary run wrote). Files from elsewhere are
read bounded into lax models of the few keys used; a bad one is one line naming it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict, Field, RootModel

from pinmatrix.cell import AXIS_DISTRIBUTION, Cell
from pinmatrix.imageref import DEFAULT_REPOSITORY
from pinmatrix.oci.layout import OCILayout
from pinmatrix.oci.manifest import image_bytes as manifest_bytes
from pinmatrix.paths import STATE_DIR
from pinmatrix.project.document import document_text, load_document
from pinmatrix.project.lockfile import parse_lock
from pinmatrix.results.store import ResultsStore
from pinmatrix.upgrade.canary import CanarySide, RecordedSmoke

CANARY_DIR = STATE_DIR / "canary"
BUILD_RECORD = CANARY_DIR / "builds.json"  # cell id -> what `build --metadata-file` writes of it
MAX_RECORD_BYTES = 64 << 20
_HEADER = re.compile(r"^# pinmatrix lock for cell ([0-9a-f]{12}): (\S+)")


class _Lax(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Binary(_Lax):
    sass: list[str] = []
    ptx: list[str] = []


class _Package(_Lax):
    name: str
    binaries: list[_Binary] = []


class _ScanCell(_Lax):
    id: str
    packages: list[_Package] = []


class ArchScanDoc(_Lax):
    """``pinmatrix arch-scan --out DIR``'s ``arch-scan.json``: what the canary reads of it."""

    schema_id: str = Field(alias="schema", pattern=r"^pinmatrix-arch-scan/1$")
    cells: list[_ScanCell]


class _Built(_Lax):
    seconds: float | None = None
    status: str | None = None


class BuildRecord(RootModel[dict[str, _Built]]):
    """``pinmatrix build --metadata-file``'s JSON: cell id -> its build."""


def read_arch_scans(paths: list[Path]) -> list[ArchScanDoc]:
    return [load_document(p, ArchScanDoc, what="an arch-scan document", form="json", max_bytes=MAX_RECORD_BYTES)
            for p in paths]


def arch_coverage(docs: list[ArchScanDoc], cell_id: str) -> frozenset[str] | None:
    """Every SASS and PTX target of the cell's scanned binaries; None when no document scanned the cell."""
    found = [c for d in docs for c in d.cells if c.id == cell_id]
    if not found:
        return None
    return frozenset(t for p in found[-1].packages for b in p.binaries for t in (*b.sass, *b.ptx))


def read_build_records(paths: list[Path]) -> dict[str, float]:
    """cell id -> build seconds of a successful build ("cached" builds took no build: not a build time)."""
    out: dict[str, float] = {}
    for path in paths:
        if not path.is_file():
            continue
        doc = load_document(path, BuildRecord, what="a build record", form="json", max_bytes=MAX_RECORD_BYTES)
        out.update({cell: b.seconds for cell, b in doc.root.items() if b.seconds is not None and b.status == "built"})
    return out


def image_bytes(layout_dir: Path, ref: str) -> int | None:
    """The size of the image ``ref`` in the OCI layout (config and layers as its manifest declares them, compressed:
    what a pull moves); None when it is not there."""
    layout = OCILayout(layout_dir)
    image = layout.image(ref) if layout.has_index() else None
    return None if image is None else manifest_bytes(image.manifest)


def latest_results(store: ResultsStore, cell_id: str) -> dict[tuple[str, str], RecordedSmoke]:
    """(smoke, host) -> the cell's latest plain result there (bisect probes left out, as the store does)."""
    if not store.path.is_file():
        return {}
    return {(r.smoke, r.host.label()): RecordedSmoke(r.status, r.reason, r.known_issue)
            for r in store.query(cell_id=cell_id, latest_only=True)}


def _matches(pattern: str, smoke: str) -> bool:
    return smoke == pattern or (pattern.endswith("*") and smoke.startswith(pattern[:-1]))


def expectations(cell: Cell) -> dict[str, str]:
    """smoke -> the known issues that expect it not to pass ("xformers-1347: fail")."""
    out = {}
    for smoke in cell.smokes:
        hits = [f"{ki.id}: {ki.expect}" for ki in cell.known_issues if any(_matches(p, smoke) for p in ki.smokes)]
        if hits:
            out[smoke] = ", ".join(hits)
    return out


def lock_pins(lock: Path, axes: list[str]) -> tuple[str, dict[str, str]]:
    """(the cell name its header gives, axis -> value) from a lock: the axes its name shows, and each package
    axis's locked version."""
    text = document_text(lock, what="a lock", max_bytes=MAX_RECORD_BYTES)
    header = _HEADER.match(text)
    name = header.group(2) if header else lock.stem
    inner = name.partition("[")[2].rpartition("]")[0]  # "d[env=default,six=1.17.0]": the axes the stack varies
    pins = dict(part.split("=", 1) for part in inner.split(",") if "=" in part)
    by_name = parse_lock(text, str(lock)).by_name()
    for axis in axes:
        entry = by_name.get(canonicalize_name(AXIS_DISTRIBUTION.get(axis, axis)))
        if entry is not None:
            pins.setdefault(axis, entry.version)  # the name's value first: a variant's label ("0.0.35-int64")
    return name, pins


@dataclass(frozen=True)
class CanaryFacts:
    """Where the facts of both sides are read."""

    store: ResultsStore
    layout: Path  # the OCI layout the images were built into
    registry: str | None  # the matrix's registry: the images' references
    scans: list[ArchScanDoc] = field(default_factory=list)
    builds: dict[str, float] = field(default_factory=dict)

    def side(self, stack: str, cell_id: str, name: str, pins: dict[str, str], cell: Cell | None) -> CanarySide:
        """Everything known of one cell; ``cell``: the matrix's cell of that id, where it can make it."""
        ref = f"{(self.registry or DEFAULT_REPOSITORY).rstrip('/')}/{stack}:{cell_id}"
        return CanarySide(cell_id, name, pins, latest_results(self.store, cell_id),
                          expectations(cell) if cell is not None else None, arch_coverage(self.scans, cell_id),
                          image_bytes(self.layout, ref), self.builds.get(cell_id))

    def of_cell(self, cell: Cell) -> CanarySide:
        return self.side(cell.stack, cell.id, cell.name, dict(cell.pins), cell)
