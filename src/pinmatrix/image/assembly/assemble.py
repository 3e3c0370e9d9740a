"""Assemble one cell's image as data, without running a container (the way Nix dockerTools, apko and ko do):

    lock check -> base layers -> venv layer -> one layer per locked wheel -> patch layer -> smoke layer
    -> (CA layer) -> config -> manifest, all into the OCI layout.

Every layer is keyed by what it contains (a wheel's layer by the wheel's sha256, the Python and the layout
format), so any two cells that hold the same wheel share that layer whatever else differs. The image's
``io.pinmatrix.inputs`` is the hash of every layer key and the config: when the layout already holds the cell's
image with the same inputs, nothing is done (but its manifest's annotations, image/annotations.py, when they
changed: a new commit or SOURCE_DATE_EPOCH names the same config and layers anew)."""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import stat
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from packaging.utils import canonicalize_name

from pinmatrix.atomic import atomic_write_text
from pinmatrix.cell import Cell, CellPatch
from pinmatrix.engine.base import tls_for
from pinmatrix.errors import PatchError, PinmatrixError
from pinmatrix.hashing import sha256_bytes, sha256_file
from pinmatrix.image import cached_choices, runnable_verdict
from pinmatrix.image.annotations import ImageOrigin, image_annotations
from pinmatrix.image.assembly import aot_plan, crossaot, merge
from pinmatrix.image.assembly.loadcheck import check_layers, scanned_beside, summary
from pinmatrix.image.assembly.lockcheck import checked_lock
from pinmatrix.image.assembly.patching import apply_patch, parse_patch
from pinmatrix.image.assembly.rootfs import (
    BaseLayers,
    adopt_debian_base,
    debian_base,
    debian_base_as,
    debian_base_record,
    pinned_base,
)
from pinmatrix.image.build_cache import Found
from pinmatrix.image.cellconfig import CELL_CMD, cell_env, cell_labels
from pinmatrix.image.containerfile.patch_sources import resolve_patch
from pinmatrix.index.install import VenvLayout, install_wheel
from pinmatrix.index.wheel_index import Target, WheelFetcher, WheelFile, cell_target, ssl_context
from pinmatrix.oci.compression import DEFAULT_COMPRESSION, LayerCompression
from pinmatrix.oci.config import image_config, oci_arch
from pinmatrix.oci.layer import (
    LayerDescriptor,
    LayerWriter,
    open_layer,
)
from pinmatrix.oci.layout import OCILayout
from pinmatrix.oci.scratch_unpack import RootLayers
from pinmatrix.project.lockfile import LockEntry
from pinmatrix.project.smoke_bundle import smoke_bundle, smoke_files
from pinmatrix.registry.auth import find_credentials

LAYOUT_FORMAT = 2  # bump when a layer's bytes for the same inputs would change (2: scripts' #!python rewritten)
PATCH_FORMAT = 2  # a patch layer's own: 2 keeps a patched file's executable bit from its wheel
# The RECORD and scripts a wheel's layer holds are written by pypa's installer: its version is part of the key.
INSTALLER_VERSION = importlib.metadata.version("installer")
PREFETCH = 8  # layers fetched from the build cache at once
MAX_LAYERS = 100  # like buildLayeredImage: the smallest wheels share one layer past this many
SMOKE_DIR = "pinmatrix/smoke"
INPUTS = "io.pinmatrix.inputs"


class AssemblyError(PinmatrixError):
    """A cell's image cannot be assembled; the message names the cell and the reason."""


@dataclass(frozen=True)
class AssemblySettings:
    root: Path  # the project: smoke/, patches/
    cache_dir: Path  # wheels, layer records, rootfs records
    layout_dir: Path  # the OCI layout all images go to
    smoke_dir: Path | None = None
    extra_ca: tuple[Path, ...] = ()  # trusted for downloads; in images only with ca_in_images
    ca_in_images: bool = False
    compression: LayerCompression = DEFAULT_COMPRESSION  # every layer (a pinned base image's are kept as they are)
    jobs: int = 4  # wheels fetched and laid out at once
    max_layers: int = MAX_LAYERS
    merge_below: int = 0  # wheels smaller than this many bytes share one layer (image/assembly/merge.py); 0: none
    registry_authfile: Path | None = None
    check_runnable: bool = True  # every ELF's interpreter and libraries resolve in the image (loadcheck.py)
    origin: ImageOrigin = ImageOrigin()  # source, revision, SOURCE_DATE_EPOCH: the manifests' annotations

    def layout(self) -> OCILayout:
        return OCILayout(self.layout_dir).init()


@dataclass
class PlannedLayer:
    """One layer of a cell's image: what it holds, its cache key, and (once known) its descriptor."""

    name: str  # "base", "venv", "wheel:torch==2.11.0", "patch:ID", "smoke", "ca"
    key: str
    descriptor: LayerDescriptor | None = None
    cached: bool = False
    seconds: float = 0.0
    download: int | None = None  # bytes to fetch for it: a wheel not in the cache, as its index declared them
    fetched: bool = False  # found in the shared build cache (``RemoteLayers``) rather than built or kept here


@dataclass
class AssembledImage:
    cell: Cell
    ref: str
    digest: str = ""  # manifest digest
    config_digest: str = ""
    inputs: str = ""
    cached: bool = False
    layers: list[PlannedLayer] = field(default_factory=list)
    seconds: float = 0.0
    merge_by_size: list[str] = field(default_factory=list)  # the wheel layers the plan merges into one (merge.by_size)
    merged: PlannedLayer | None = None  # the layer they make, while ``layers`` still lists them (the plan)

    @property
    def size(self) -> int:
        return sum(layer.descriptor.size for layer in self.layers if layer.descriptor)


def _key(*parts: object) -> str:
    return sha256_bytes(json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str).encode())


class LayerCache:
    """layer key -> descriptor records under ``<cache>/layers``; a record counts only while its blob exists."""

    def __init__(self, cache_dir: Path, layout: OCILayout) -> None:
        self.dir = cache_dir / "layers"
        self.layout = layout
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, key: str) -> LayerDescriptor | None:
        path = self.dir / f"{key}.json"
        if not path.is_file():
            return None
        try:
            desc = LayerDescriptor.from_json(json.loads(path.read_text()))
        except (ValueError, KeyError):
            return None
        return desc if self.layout.intact_blob(desc.digest, desc.size) else None  # re-hashed; damaged: rebuilt

    def put(self, key: str, desc: LayerDescriptor, what: str) -> None:
        atomic_write_text(self.dir / f"{key}.json", json.dumps({**desc.to_json(), "what": what}, sort_keys=True))

    def lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())


class RemoteLayers(Protocol):
    """A shared build cache by layer key (image/build_cache.py): asked for a layer before it is built here, told
    of each layer built here. Its failures are its own to report: it answers None and the layer is built."""

    def fetch(self, key: str, what: str, layout: OCILayout, extras_dir: Path | None = None, *,
              progress: Callable[[str], None] | None = None) -> tuple[LayerDescriptor, dict[str, str]] | None:
        """The layer stored under ``key`` (its blob now in ``layout``, the files made from it into ``extras_dir``)
        and what was stored with it, or None; ``progress`` hears its bytes come."""

    def lookup(self, key: str, what: str) -> Found | None:
        """The verified entry under ``key`` (its blob not fetched yet), or None."""

    def complete(self, found: Found, what: str, layout: OCILayout, extras_dir: Path | None = None) -> bool:
        """The looked-up entry's blob into ``layout`` and its files into ``extras_dir``: whether they came."""

    def fetch_document(self, key: str, what: str) -> dict[str, Any] | None:
        """The signed document under ``key`` (a lock's wheel choices), or None."""

    def store_document(self, key: str, what: str, doc: dict[str, Any]) -> None:
        """Keep ``doc`` under ``key``."""

    def store(self, key: str, layer: LayerDescriptor, what: str, layout: OCILayout,
              meta: dict[str, str] | None = None, extras: Sequence[Path] = ()) -> None:
        """Keep a layer built here under ``key``, with ``meta`` (what else a user of the layer must know) and the
        files made from it (``extras``: its runnable scans)."""


class WheelChoices:
    """Which of a lock line's hashes is the wheel for a target: remembered, so a warm build asks no index."""

    def __init__(self, cache_dir: Path, fetcher: WheelFetcher) -> None:
        self.dir = cache_dir / "wheel-choices"
        self.fetcher = fetcher

    def _path(self, entry: LockEntry, target: Target, cell: Cell) -> Path:
        return self.dir / f"{_key('choice', entry.text, target.python, target.platform, [i.url for i in cell.indexes])}.json"

    def known(self, entry: LockEntry, target: Target, cell: Cell) -> bool:
        return self._path(entry, target, cell).is_file()

    def remember(self, entry: LockEntry, target: Target, cell: Cell, wheel: WheelFile) -> None:
        atomic_write_text(self._path(entry, target, cell), json.dumps(wheel.__dict__, sort_keys=True))

    def choose(self, entry: LockEntry, target: Target, cell: Cell) -> WheelFile:
        path = self._path(entry, target, cell)
        if path.is_file():
            data = json.loads(path.read_text())
            return WheelFile(**data)
        wheel = self.fetcher.choose(entry, target, cell.indexes)
        self.remember(entry, target, cell, wheel)
        return wheel


class Assembler:
    """Assembles cells into one OCI layout; shares the wheel cache, layer cache and layout between cells."""

    def __init__(self, settings: AssemblySettings) -> None:
        self.settings = settings
        self.layout = settings.layout()
        self.fetcher = WheelFetcher(settings.cache_dir / "wheels", context=ssl_context(settings.extra_ca))
        self.choices = WheelChoices(settings.cache_dir, self.fetcher)
        self.layers = LayerCache(settings.cache_dir, self.layout)
        self.smoke_dir = settings.smoke_dir if settings.smoke_dir is not None else settings.root / "smoke"
        self.remote: RemoteLayers | None = None  # the build cache in a registry (build --cache-from/--cache-to)
        # Debian bases to store with the image's layers (once their runnable scans exist): key -> layer, name, meta
        self._bases: dict[str, tuple[LayerDescriptor, str, dict[str, str]]] = {}
        self._missed: set[str] = set()  # keys the build cache has been asked for and lacks
        # Debian bases planned on their build cache entry while their blob comes (_base_coming): inputs key -> ...
        self._bases_coming: dict[str, tuple[BaseLayers, Future[bool]]] = {}
        self._base_guard = threading.Lock()
        self._base_fetches = ThreadPoolExecutor(max_workers=2, thread_name_prefix="pinmatrix-base")
        self.clock: Callable[[], float] = time.monotonic  # what a layer's write progress measures time with

    # -- the parts of an image -------------------------------------------------------------------------------

    def base(self, cell: Cell, log: Path, *, dry: bool = False) -> BaseLayers:
        if cell.base.kind == "image":
            if dry:
                return BaseLayers((), (), cell.base.image or "", f"image:{cell.base.image}", cell.python)
            image = cell.base.image or ""
            host, _, rest = image.partition("/")
            creds = find_credentials(host, rest.split("@", 1)[0]) if rest else None
            base = pinned_base(cell.base, cell.platform, self.layout, tls_verify=tls_for(image, None),
                               authfile=self.settings.registry_authfile or (creds.source if creds else None))
        else:
            made = self._debian_base(cell, log) if not dry and self.remote is not None else None
            base = debian_base_as(made or debian_base(cell.base, cell.platform, self.layout, self.settings.cache_dir,
                                                      log, dry=dry), self.settings.compression, self.layout,
                                  self.settings.cache_dir, dry=dry)
        if base.python is None:
            raise AssemblyError(f"cell {cell.id} ({cell.name}): its base {base.name} has no /usr/bin/python3")
        if base.python != cell.python:
            raise AssemblyError(f"cell {cell.id} ({cell.name}): the cell wants Python {cell.python} but its base "
                                f"{base.name} has {base.python}")
        return base

    def _debian_base(self, cell: Cell, log: Path) -> BaseLayers:
        """The Debian base with the build cache: fetched when this machine has not made it and the cache has it,
        else made here and stored to the cache."""
        assert self.remote is not None
        key, record = debian_base_record(cell.base, cell.platform, self.settings.cache_dir)
        remote_key = _key("rootfs", key)
        if not record.is_file() and remote_key not in self._missed:
            what = f"base {cell.base.suite or ''} ({cell.platform})"
            with self._base_guard:
                coming = self._bases_coming.get(key)
                found = self.remote.lookup(remote_key, what) if coming is None else None
                if found is not None and self.settings.compression == DEFAULT_COMPRESSION:
                    coming = self._base_coming(cell, key, found, what, log)
            if coming is not None:
                return coming[0]
            if found is not None and self.remote.complete(found, what, self.layout, self._runnable_scans):
                adopt_debian_base(cell.base, cell.platform, self.layout, self.settings.cache_dir, found.layer,
                                  found.meta.get("python") or None)
        base = debian_base(cell.base, cell.platform, self.layout, self.settings.cache_dir, log)
        if base.layers:  # stored with the image's layers (_store_remote), unless the cache holds it already
            self._bases[remote_key] = (base.layers[0], f"base {base.name}", {"python": base.python or ""})
        return base

    def _base_coming(self, cell: Cell, key: str, found: Found, what: str,
                     log: Path) -> tuple[BaseLayers, Future[bool]]:
        """The base as its signed entry names it (the layer's descriptor, its Python), its blob fetched beside the
        rest of the plan and the other layers' fetch (the base is most of a warm machine's bytes), then recorded as
        a base made here would be. The cell waits for it (_base_settled) before anything reads the blob."""
        assert self.remote is not None
        remote = self.remote
        named = debian_base(cell.base, cell.platform, self.layout, self.settings.cache_dir, log, dry=True)
        base = replace(named, layers=(found.layer,), python=found.meta.get("python") or None)

        def arrive() -> bool:
            if not remote.complete(found, what, self.layout, self._runnable_scans):
                self._missed.add(found.key)
                return False
            adopt_debian_base(cell.base, cell.platform, self.layout, self.settings.cache_dir, found.layer, base.python)
            return True

        coming = (base, self._base_fetches.submit(arrive))
        self._bases_coming[key] = coming
        self._bases[found.key] = (found.layer, f"base {base.name}", {"python": base.python or ""})
        return coming

    def _base_settled(self, ctx: dict[str, object]) -> bool:
        """False when a base the plan ``ctx`` uses (the cell's; a foreign cell's builder root's) was planned on a
        build cache entry whose blob then did not come (refused, or the cache went down): the cell is planned again
        and that base made here. Waits for a blob still on its way. The very objects the plan holds are matched."""
        aot = ctx.get("aot")
        cross = aot.cross if isinstance(aot, aot_plan.AotPlan) else None
        with self._base_guard:
            waits = [future for planned, future in self._bases_coming.values()
                     if planned is ctx["base"] or (cross is not None and planned.layers is cross.base_layers)]
        return all(future.result() for future in waits)

    def _cached_or_build(self, planned: PlannedLayer, build: Callable[[LayerWriter], None], epoch: int,
                         on_step: Callable[[str], None] | None = None) -> None:
        """``planned``'s layer from the layer cache or the build cache, else written by ``build``; ``on_step``
        hears, about once a second while it is written, ``layer NAME: bytes of tar so far, rate``."""
        start = time.monotonic()
        with self.layers.lock(planned.key):
            found = self.layers.get(planned.key)
            if found is not None:
                planned.descriptor, planned.cached = found, True
                return
            if self._fetched(planned, on_step):
                planned.seconds = time.monotonic() - start
                return
            writer = LayerWriter(self.layout.blobs, epoch=epoch, compression=self.settings.compression,
                                 progress=on_step, what=f"layer {planned.name}", clock=self.clock)
            try:
                build(writer)
            except BaseException:
                writer.abort()
                raise
            planned.descriptor = writer.close()
            self.layout.written(planned.descriptor.digest, planned.descriptor.size)  # hashed as it was written
            self.layers.put(planned.key, planned.descriptor, planned.name)
        planned.seconds = time.monotonic() - start

    def _fetched(self, planned: PlannedLayer, on_step: Callable[[str], None] | None = None) -> bool:
        """Whether ``planned`` came from the build cache (verified there: signed for its key, re-hashed to its
        digest) and is now recorded here; the caller holds the key's lock. ``on_step`` hears its bytes come."""
        if self.remote is None or planned.key in self._missed:
            return False
        fetched = self.remote.fetch(planned.key, planned.name, self.layout, self._runnable_scans, progress=on_step)
        if fetched is None:
            self._missed.add(planned.key)
            return False
        self._took(planned, fetched[0])
        return True

    def _prefetch(self, image: AssembledImage) -> None:
        """Each planned layer the build cache holds, fetched ``PREFETCH`` at once before any is built: first every
        entry (small requests), then the blobs, the largest first. In the plan's order (by name) a cell's largest
        layers (torch, triton) come last, and the fetch ended on them alone, one stream where eight could run."""
        with ThreadPoolExecutor(max_workers=PREFETCH) as pool:
            entries = [e for e in pool.map(self._entry, [p for p in image.layers[1:] if p.descriptor is None]) if e]
            list(pool.map(self._arrive, sorted(entries, key=lambda entry: -entry[1].layer.size)))

    def _entry(self, planned: PlannedLayer) -> tuple[PlannedLayer, Found] | None:
        """``planned``'s verified build cache entry, when it is not here yet (kept here: taken) and the cache has
        one; a miss is remembered (the layer is built)."""
        with self.layers.lock(planned.key):
            if self._kept(planned) or self.remote is None or planned.key in self._missed:
                return None
            found = self.remote.lookup(planned.key, planned.name)
            if found is None:
                self._missed.add(planned.key)
                return None
            return planned, found

    def _arrive(self, entry: tuple[PlannedLayer, Found]) -> None:
        """A looked-up entry's blob (re-hashed to the signed digest as it comes), recorded here as a layer made
        here would be; one whose blob does not come is remembered as a miss (the layer is built)."""
        planned, found = entry
        assert self.remote is not None
        with self.layers.lock(planned.key):
            if self._kept(planned):
                return
            if not self.remote.complete(found, planned.name, self.layout, self._runnable_scans):
                self._missed.add(planned.key)
                return
            self._took(planned, found.layer)

    def _took(self, planned: PlannedLayer, layer: LayerDescriptor) -> None:
        """``layer``, fetched from the build cache for ``planned``, recorded here as a layer made here would be."""
        self.layers.put(planned.key, layer, planned.name)
        planned.descriptor, planned.cached, planned.fetched = layer, True, True

    def _kept(self, planned: PlannedLayer) -> bool:
        """Whether ``planned``'s layer is in this machine's layer cache (then taken as cached); the caller holds the
        key's lock."""
        found = self.layers.get(planned.key)
        if found is not None:
            planned.descriptor, planned.cached = found, True
        return found is not None

    def _patch_layer(self, cell: Cell, patch: CellPatch, wheel: Path, venv: VenvLayout, writer: LayerWriter) -> None:
        """The files an installed-tree patch changes, patched (no fuzz) in a scratch copy of just those files."""
        resolved = resolve_patch(patch, self.settings.root, self.settings.cache_dir)
        targets = [fp.target(1) for fp in parse_patch(resolved.path.read_text(encoding="utf-8"), patch.id)]
        with tempfile.TemporaryDirectory(prefix="pinmatrix-patch-") as tmp, zipfile.ZipFile(wheel) as zf:
            scratch = Path(tmp)
            names = set(zf.namelist())
            for rel in targets:
                if rel in names:
                    out = scratch / rel
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(zf.read(rel))
                    mode = zf.getinfo(rel).external_attr >> 16  # as install.py reads it: the patched file keeps it
                    out.chmod(0o755 if stat.S_ISREG(mode) and mode & 0o111 else 0o644)
            before = {rel: sha256_file(scratch / rel) for rel in targets if (scratch / rel).is_file()}
            try:
                result = apply_patch(resolved.path, scratch, strip=1, expected_sha256=patch.sha256)
            except PatchError as err:
                raise AssemblyError(f"cell {cell.id} ({cell.name}): patch {patch.id} does not apply to "
                                    f"{patch.package} {patch.version}: {err}") from None
            if result.outcome == "already-applied":
                raise AssemblyError(f"cell {cell.id}: patch {patch.id} is already in {patch.package} {patch.version}; "
                                    "declare contained_in instead")
            for rel in sorted(targets):
                path = scratch / rel
                dest = f"{venv.site_packages}/{rel}"
                if path.is_file():
                    if before.get(rel) != sha256_file(path):
                        data = path.read_bytes()
                        writer.add_bytes(dest, data, executable=bool(path.stat().st_mode & 0o111))
                elif rel in before:
                    parent, _, name = dest.rpartition("/")
                    writer.add_bytes(f"{parent}/.wh.{name}", b"")

    def _ca_layer(self, base: BaseLayers, writer: LayerWriter) -> None:
        """The base's CA bundle with the extra certificates appended, and the certificates themselves."""
        bundle = b""
        for layer in base.layers:
            with open_layer(self.layout.blob_path(layer.digest), layer.media_type) as tar:
                for member in tar:
                    if member.name.removeprefix("./") == "etc/ssl/certs/ca-certificates.crt" and member.isreg():
                        handle = tar.extractfile(member)
                        bundle = handle.read() if handle else bundle
        extra = []
        for path in self.settings.extra_ca:
            extra.extend(sorted(path.glob("*.crt")) if path.is_dir() else [path])
        for cert in extra:
            data = cert.read_bytes()
            writer.add_bytes(f"usr/local/share/ca-certificates/pinmatrix/{cert.name}", data)
            bundle += (b"" if bundle.endswith(b"\n") or not bundle else b"\n") + data
        writer.add_bytes("etc/ssl/certs/ca-certificates.crt", bundle)

    def _check_disk(self, cell: Cell, missing: Sequence[WheelFile]) -> None:
        """Refuse, before anything is written, a cell whose new layers would not fit: each missing wheel is
        downloaded (its size) and written as a layer (about its size again, compressed)."""
        known = [w.size for w in missing if w.size is not None]
        need = int(2.2 * sum(known)) + (512 << 20 if missing else 0)
        if not missing:
            return
        for directory in {self.settings.cache_dir, self.settings.layout_dir}:
            directory.mkdir(parents=True, exist_ok=True)
        free = min(shutil.disk_usage(d).free for d in (self.settings.cache_dir, self.settings.layout_dir))
        if free < need:
            raise AssemblyError(f"cell {cell.id} ({cell.name}): not enough disk: its {len(missing)} new layer(s) need "
                                f"about {need / 1e9:.1f} GB free under {self.settings.cache_dir} and "
                                f"{self.settings.layout_dir}, {free / 1e9:.1f} GB are")

    @contextmanager
    def _beside_aot(self, job: _CellJob) -> Iterator[None]:
        """What is made while the AOT layer compiles (it leaves a core idle much of the time): the runnable check's
        scans of the layers built so far, and the merged layer of small wheels (handed over as soon as it is
        written). A merge that fails here is left to ``_write_image``, which makes it again and raises."""
        with ExitStack() as stack:
            if self.settings.check_runnable:
                stack.enter_context(scanned_beside(self._blobs(job.descriptors()), oci_arch(job.cell.platform)[0],
                                                   self._runnable_scans))
            merging = threading.Thread(target=self._merge_early, args=(job,), name="pinmatrix-merge", daemon=True)
            merging.start()
            stack.callback(merging.join)
            yield

    def _merge_early(self, job: _CellJob) -> None:
        try:
            layers = _merge_small(list(job.image.layers), job.image.merge_by_size, self.settings.max_layers, self,
                                  job.epoch)
        except (PinmatrixError, OSError):
            return
        job.hand_over([p.descriptor for p in layers if p.name.startswith("wheels:") and p.descriptor])

    @property
    def _runnable_scans(self) -> Path:
        """Where each layer's scan for the runnable check is kept, by digest (loadcheck.layer_scan)."""
        return self.settings.cache_dir / "runnable"

    def _check_runnable(self, cell: Cell, descriptors: Sequence[LayerDescriptor], base: BaseLayers,
                        env: dict[str, str], on_step: Callable[[str], None]) -> None:
        """Refuse an image whose ELF files would not start in it (loadcheck.py), before its manifest exists."""
        variables = {k: v for k, _, v in (e.partition("=") for e in base.env)}
        variables.update(env)
        arch, _ = oci_arch(cell.platform)
        # a verdict on these very layers signed by a machine that checked them (image/runnable_verdict.py)
        key = runnable_verdict.verdict_key([d.digest for d in descriptors], arch, variables)
        what = f"runnable check of cell {cell.id}"
        doc = self.remote.fetch_document(key, what) if self.remote is not None else None
        try:
            if doc is not None:
                for note in runnable_verdict.from_document(doc):
                    on_step(note)
                return
        except ValueError:
            pass  # checked here
        found = check_layers(self._blobs(descriptors), arch, variables, scans=self._runnable_scans)
        notes = [f"runnable: {p.path} {p.what.split(' (searched ', 1)[0]}: optional, {p.optional}"
                 for p in found if p.optional]
        for note in notes:
            on_step(note)
        problems = [p for p in found if not p.optional]
        if problems:
            raise AssemblyError(f"cell {cell.id} ({cell.name}): the image would not run: {summary(problems)}")
        if self.remote is not None:
            self.remote.store_document(key, what, runnable_verdict.to_document(notes))

    # -- one cell --------------------------------------------------------------------------------------------

    def _patch_layers(self, cell: Cell, wheels: dict[str, WheelFile], epoch: int, level: str) -> list[PlannedLayer]:
        """A layer per installed-tree patch, each patch's file checked and its wheel in the lock. They go after the
        link and AOT layers, which do not depend on them: an image that only adds a patch to a sibling's shares every
        layer below it (an engine reuses a layer only on the same layers below)."""
        layers: list[PlannedLayer] = []
        for patch in cell.patches_to_apply:
            resolve_patch(patch, self.settings.root, self.settings.cache_dir)  # sha256 checked before any layer
            target_wheel = wheels.get(_canonical(patch.package))
            if target_wheel is None:
                raise AssemblyError(f"cell {cell.id}: patch {patch.id} targets {patch.package}, which is not in the lock")
            layers.append(PlannedLayer(f"patch:{patch.id}", _key("patch", LAYOUT_FORMAT, PATCH_FORMAT, patch.sha256,
                                                                  target_wheel.sha256, cell.python, epoch, level)))
        return layers

    def _chosen_wheels(self, cell: Cell, entries: Sequence[LockEntry], target: Target, log: Path, *,
                       dry: bool) -> dict[str, WheelFile]:
        """Each lock line's wheel for ``target``: remembered here, else from the build cache's signed document of
        the lock's choices (image/cached_choices.py: each checked), else asked of the index. A machine writing the
        cache stores the document it did not fetch."""
        remote = None if dry else self.remote
        key = cached_choices.choices_key(entries, target, [i.url for i in cell.indexes])
        what = f"wheel choices of cell {cell.id}"
        found: dict[str, WheelFile] = {}  # used as they come, not written here one file each (an fsync a line)
        if remote is not None and not all(self.choices.known(e, target, cell) for e in entries):
            doc = remote.fetch_document(key, what)
            try:
                found = cached_choices.from_document(doc, entries, target) if doc is not None else {}
            except ValueError as err:
                with open(log, "a", encoding="utf-8") as handle:
                    handle.write(f"build cache: the {what} not used, the index asked instead: {err}\n")
        chosen = {e.name: found.get(e.name) or self.choices.choose(e, target, cell) for e in entries}
        if remote is not None and not found:
            remote.store_document(key, what, cached_choices.to_document(chosen))
        return chosen

    def plan(self, cell: Cell, lock_text: str, log: Path, *, dry: bool = False) -> tuple[AssembledImage, dict[str, object]]:
        """Everything about the cell's image that needs no download: layer keys, config inputs, cache state.
        ``dry``: make nothing, not even the base (the plan then says the base is not built yet)."""
        lock = checked_lock(cell, lock_text, f"locks/{cell.id}.txt")
        if any(p.kind == "source" for p in cell.patches_to_apply):
            raise AssemblyError(f"cell {cell.id} ({cell.name}): a source patch must be compiled; "
                                "it builds through the Containerfile path (pinmatrix build routes it there)")
        base = self.base(cell, log, dry=dry)
        venv = VenvLayout(cell.python)
        target = cell_target(cell)
        epoch = cell.base.source_date_epoch or 0
        level = self.settings.compression.key
        image = AssembledImage(cell=cell, ref="")
        image.layers.append(PlannedLayer("base", base.key, base.layers[-1] if base.layers else None,
                                         cached=bool(base.layers)))
        image.layers.append(PlannedLayer("venv", _key("venv", LAYOUT_FORMAT, cell.python, epoch, level)))
        wheels: dict[str, WheelFile] = {}
        chosen = self._chosen_wheels(cell, lock.entries, target, log, dry=dry)
        for entry in sorted(lock.entries, key=lambda e: e.name):
            wheel = chosen[entry.name]
            wheels[entry.name] = wheel
            fetch = None if self.fetcher.path(wheel).is_file() else (wheel.size or 0)
            image.layers.append(PlannedLayer(f"wheel:{entry.name}=={entry.version}",
                                             _key("wheel", LAYOUT_FORMAT, INSTALLER_VERSION, wheel.sha256, cell.python, epoch, level),
                                             download=fetch))
        patch_layers = self._patch_layers(cell, wheels, epoch, level)  # checked now, placed after the AOT layer
        # The CUDA toolchain's link files and FlashInfer's modules compiled ahead of time (image/assembly/aot_plan.py).
        aot = aot_plan.plan(cell, {n: w.sha256 for n, w in wheels.items()}, base.key, epoch=epoch, level=level)
        if aot is not None and aot.wants_cross:  # a foreign cell: its modules cross-compiled (image/assembly/crossaot.py)
            cross = crossaot.inputs(cell, aot, lock.entries, lambda entry, t: self.choices.choose(entry, t, cell),
                                    lambda builder: self.base(builder, log, dry=dry))
            aot = aot_plan.plan(cell, {n: w.sha256 for n, w in wheels.items()}, base.key, epoch=epoch, level=level,
                                cross=cross)
        if aot is not None:
            image.layers.append(PlannedLayer("cuda-link", aot.link_key))
            if aot.builds:
                image.layers.append(PlannedLayer("flashinfer-aot", aot.key))
        image.layers.extend(patch_layers)
        smoke = smoke_bundle(self.smoke_dir) if smoke_files(self.smoke_dir) else []
        if smoke:
            tree = [(name, sha256_file(p)) for name, p in smoke]
            image.layers.append(PlannedLayer("smoke", _key("smoke", LAYOUT_FORMAT, tree, epoch, level)))
        if self.settings.ca_in_images:
            certs = [(p.name, sha256_file(p)) for p in self.settings.extra_ca if p.is_file()]
            certs += [(p.name, sha256_file(p)) for d in self.settings.extra_ca if d.is_dir()
                      for p in sorted(d.glob("*.crt"))]
            image.layers.append(PlannedLayer("ca", _key("ca", LAYOUT_FORMAT, base.key, certs, epoch, level)))
        for planned in image.layers[1:]:
            found = self.layers.get(planned.key)
            if found is not None:
                planned.descriptor, planned.cached = found, True
        image.merge_by_size = merge.by_size({p.name: wheels[_wheel_name(p)].size for p in image.layers
                                             if p.name.startswith("wheel:")}, self.settings.merge_below)
        if image.merge_by_size:
            by_name = {p.name: p for p in image.layers}  # in the order _merge_small keys them: by layer name
            image.merged = PlannedLayer(merge.merged_name(image.merge_by_size), _merged_key(
                [by_name[n] for n in image.merge_by_size]))
            found = self.layers.get(image.merged.key)
            if found is not None:
                image.merged.descriptor, image.merged.cached = found, True
        lock_sha = sha256_bytes(lock_text.encode())
        labels = cell_labels(cell, base=base.name, lock_sha=lock_sha,
                             layers=[p.name for p in image.layers], epoch=epoch)
        env = cell_env(cell)
        # the small layers are merged after the plan, so the merge's format, bound and choice are inputs here (the
        # choice only when there is one: images made before --merge-below keep their inputs)
        merged = [image.merge_by_size] if image.merge_by_size else []
        image.inputs = _key("image", LAYOUT_FORMAT, [p.key for p in image.layers], labels, env, list(base.env),
                            [d.digest for d in base.layers], merge.MERGE_FORMAT, self.settings.max_layers, *merged)
        labels[INPUTS] = image.inputs
        context: dict[str, object] = {"base": base, "venv": venv, "wheels": wheels, "labels": labels, "env": env,
                                      "epoch": epoch, "smoke": smoke, "aot": aot,
                                      "annotations": image_annotations(cell, self.settings.origin, epoch)}
        return image, context

    def assemble(self, cell: Cell, lock_text: str, ref: str, log: Path,
                 on_step: Callable[[str], None] = lambda what: None,
                 on_blob: Callable[[LayerDescriptor], None] = lambda layer: None) -> AssembledImage:
        """``cell``'s image in the layout under ``ref``. ``on_step`` hears each step; ``on_blob`` gets each layer
        as soon as its blob is in the layout (``build --push`` sends it ahead: image/blobsahead.py), the
        base's first; a cached image hands over none."""
        start = time.monotonic()
        on_step("plan")
        image, ctx = self.plan(cell, lock_text, log)
        image.ref = ref
        stored = self.layout.image(ref)
        if stored is not None and not self._base_settled(ctx):
            image, ctx = self.plan(cell, lock_text, log)  # the base's cache entry came without its blob
            image.ref = ref
        if stored is not None and stored.annotations.get(INPUTS) == image.inputs and not self.layout.missing_blobs(stored):
            image.digest, image.config_digest, image.cached = stored.digest, stored.config_digest, True
            if stored.manifest.get("annotations") != ctx["annotations"]:  # another revision or SOURCE_DATE_EPOCH:
                image.digest = self.layout.put_image(ref, {**stored.manifest, "annotations": ctx["annotations"]},
                                                     stored.annotations)  # the same config and layers, annotated anew
            self._store_remote([*image.layers[1:], *([image.merged] if image.merged else [])])
            if image.merged is not None:  # the layers as the image holds them, as a build would have left them
                image.layers, image.merged = _spliced(image.layers, set(image.merge_by_size), image.merged), None
            image.seconds = time.monotonic() - start
            return image
        if self.remote is not None:
            self._prefetch(image)  # while the base's blob may still be coming (_base_coming)
        if not self._base_settled(ctx):
            on_step("plan again: the base's blob did not come from the build cache; it is made here")
            image, ctx = self.plan(cell, lock_text, log)
            image.ref = ref
            if self.remote is not None:
                self._prefetch(image)
        job = _CellJob(cell=cell, image=image, log=log, on_step=on_step, on_blob=on_blob,
                       base=ctx["base"], venv=ctx["venv"], wheels=ctx["wheels"],  # type: ignore[arg-type]
                       epoch=ctx["epoch"], by_name={p.name: p for p in image.layers},  # type: ignore[arg-type]
                       annotations=ctx["annotations"])  # type: ignore[arg-type]
        job.hand_over()
        self._check_disk(cell, [job.wheels[_wheel_name(p)] for p in image.layers
                                if p.name.startswith("wheel:") and p.descriptor is None])
        self._build_wheels(job)
        self._build_patches(job)
        job.hand_over()
        aot: aot_plan.AotPlan | None = ctx["aot"]  # type: ignore[assignment]
        if aot is not None:
            self._build_aot(job, aot)
        self._build_smoke_and_ca(job, ctx["smoke"])  # type: ignore[arg-type]
        job.hand_over()
        self._write_image(job, ref, ctx["env"], ctx["labels"])  # type: ignore[arg-type]
        self._store_remote([*job.by_name.values(), *image.layers[1:]])
        image.seconds = time.monotonic() - start
        return image

    def _store_remote(self, layers: Sequence[PlannedLayer]) -> None:
        """Every layer of the image (and each wheel layer merged into one), into the build cache where it lacks
        them: a machine whose own cache made them earlier fills the registry's too."""
        remote = self.remote
        if remote is None:
            return
        unique: dict[str, tuple[LayerDescriptor | None, str, dict[str, str] | None]] = {
            p.key: (p.descriptor, p.name, None) for p in layers if p.name != "base"}
        unique.update(self._bases)
        with ThreadPoolExecutor(max_workers=max(1, self.settings.jobs)) as pool:
            for future in [pool.submit(remote.store, key, descriptor, name, self.layout, meta,
                                       self._scans_of(descriptor))
                           for key, (descriptor, name, meta) in unique.items() if descriptor is not None]:
                future.result()

    def _scans_of(self, layer: LayerDescriptor) -> list[Path]:
        """The runnable check's kept scans of ``layer`` (loadcheck.layer_scan names them for its digest)."""
        folder = self._runnable_scans
        return sorted(folder.glob(f"{layer.digest.split(':')[1]}-*.json")) if folder.is_dir() else []

    # -- the steps of assemble -------------------------------------------------------------------------------

    def _wheel_layer(self, job: _CellJob, planned: PlannedLayer, source: dict[str, WheelFile] | None = None) -> None:
        """A wheel's layer (``source``: the wheels it is one of, the cell's by default), fetched and laid out."""
        wheel = (job.wheels if source is None else source)[_wheel_name(planned)]

        def build(writer: LayerWriter) -> None:
            job.on_step(f"fetch {wheel.filename}")
            path = self.fetcher.fetch(wheel, progress=job.on_step)  # "fetch NAME: bytes of size, rate, left"
            job.on_step(f"layer {wheel.filename}")
            writer.expect(_unpacked_size(path))
            install_wheel(path, writer, job.venv)

        self._cached_or_build(planned, build, job.epoch, job.on_step)
        if source is None:
            job.hand_over()

    def _build_wheels(self, job: _CellJob) -> None:
        """The venv layer, then every wheel layer not yet in the cache, the largest first, ``jobs`` at once."""
        todo = [p for p in job.image.layers if p.name.startswith("wheel:") and p.descriptor is None]
        self._cached_or_build(job.by_name["venv"], job.venv.write_venv, job.epoch, job.on_step)
        if todo:
            with ThreadPoolExecutor(max_workers=max(1, self.settings.jobs)) as pool:
                for future in [pool.submit(self._wheel_layer, job, p)
                               for p in sorted(todo, key=lambda p: -_size(job.wheels, p))]:
                    future.result()

    def _build_patches(self, job: _CellJob) -> None:
        """One layer per installed-tree patch, made from the wheel it patches."""
        for patch in job.cell.patches_to_apply:
            planned = job.by_name[f"patch:{patch.id}"]
            wheel = job.wheels[_canonical(patch.package)]
            job.on_step(f"patch {patch.id}")

            def build(writer: LayerWriter, patch: CellPatch = patch, wheel: WheelFile = wheel) -> None:
                self._patch_layer(job.cell, patch, self.fetcher.fetch(wheel), job.venv, writer)  # fetched on a miss only

            self._cached_or_build(planned, build, job.epoch, job.on_step)

    def _build_aot(self, job: _CellJob, aot: aot_plan.AotPlan) -> None:
        """The CUDA link layer, then FlashInfer's modules: cross-compiled for a foreign cell, else built in the
        cell's own root."""
        cell = job.cell
        if aot.skip:
            with open(job.log, "a", encoding="utf-8") as handle:
                handle.write(f"flashinfer-aot: none for cell {cell.id}: {aot.skip}\n")
        self._cached_or_build(job.by_name["cuda-link"], aot_plan.link_layer_builder(
            cell, aot, job.venv.site_packages), job.epoch, job.on_step)
        job.hand_over()
        if "flashinfer-aot" not in job.by_name:
            return
        if aot.cross is not None:
            self._build_cross_aot(job, aot)
            return
        with open(job.log, "a", encoding="utf-8") as handle:
            handle.write(f"flashinfer-aot: built in cell {cell.id}'s own root: {', '.join(aot.modules)} for "
                         f"{aot.arch_list}\n")
        wheel_layers = [p.descriptor for p in job.image.layers if p.descriptor and p.name.startswith("wheel:")]
        in_order = [*job.base.layers, job.by_name["venv"].descriptor]
        root = RootLayers(self._blobs(in_order), self._blobs(wheel_layers),
                          unpacked=sum(d.unpacked for d in [*in_order, *wheel_layers] if d is not None))
        self._cached_or_build(job.by_name["flashinfer-aot"], aot_plan.aot_layer_builder(
            cell, aot, job.venv.site_packages, root, self.settings.cache_dir, job.log, job.on_step,
            beside=partial(self._beside_aot, job)), job.epoch, job.on_step)

    def _build_cross_aot(self, job: _CellJob, aot: aot_plan.AotPlan) -> None:
        """FlashInfer's modules for a foreign cell, cross-compiled in a builder root (image/assembly/crossaot.py)."""
        cell, epoch = job.cell, job.epoch
        with open(job.log, "a", encoding="utf-8") as handle:
            handle.write(crossaot.describe(cell, aot) + "\n")
        job.on_step(crossaot.describe(cell, aot))

        def builder_root() -> RootLayers:
            """The builder root's layers: the cell's base for this builder's architecture, the venv, and
            the builder-architecture wheels of the cell's pins that the generator imports."""
            own = dict(crossaot.builder_wheels(aot))
            planned = [PlannedLayer(f"wheel:{w.name}=={w.version}", _key("wheel", LAYOUT_FORMAT, INSTALLER_VERSION,
                                                                        w.sha256, cell.python, epoch,
                                                                        self.settings.compression.key))
                       for w in own.values()]
            with ThreadPoolExecutor(max_workers=max(1, self.settings.jobs)) as pool:
                for future in [pool.submit(self._wheel_layer, job, p, own) for p in planned]:
                    future.result()
            assert aot.cross is not None
            return RootLayers(self._blobs([*aot.cross.base_layers, job.by_name["venv"].descriptor]),
                              self._blobs([p.descriptor for p in planned]))

        def cell_wheels() -> list[Path]:
            assert aot.cross is not None and aot.cross.spec is not None
            return [self.fetcher.fetch(job.wheels[n]) for n in aot.cross.spec.libraries_from if n in job.wheels]

        with self._beside_aot(job):
            self._cached_or_build(job.by_name["flashinfer-aot"], crossaot.layer_builder(
                cell, aot, job.venv.site_packages, builder_root, cell_wheels, self.settings.cache_dir, job.log,
                job.on_step, jobs=max(1, min(2, self.settings.jobs))), epoch, job.on_step)

    def _blobs(self, descriptors: Sequence[LayerDescriptor | None]) -> list[tuple[Path, str]]:
        """The layers' blobs in the layout, with their media types, in order."""
        return aot_plan.layer_blobs(self.layout.blob_path, [d for d in descriptors if d is not None])

    def _build_smoke_and_ca(self, job: _CellJob, files: list[tuple[str, Path]]) -> None:
        """The smoke bundle's layer, and the CA layer when the image carries the extra certificates."""
        if "smoke" in job.by_name:
            def smoke_layer(writer: LayerWriter) -> None:
                for name, path in files:
                    with open(path, "rb") as handle:
                        writer.add_file(f"{SMOKE_DIR}/{name}", handle, path.stat().st_size)

            self._cached_or_build(job.by_name["smoke"], smoke_layer, job.epoch, job.on_step)
        if "ca" in job.by_name:
            self._cached_or_build(job.by_name["ca"], lambda w: self._ca_layer(job.base, w), job.epoch, job.on_step)

    def _write_image(self, job: _CellJob, ref: str, env: dict[str, str], labels: dict[str, str]) -> None:
        """The small wheel layers merged past ``max_layers``, the runnable check, then the config and the
        manifest, written to the layout under ``ref``."""
        cell, base, image = job.cell, job.base, job.image
        job.on_step("config")
        image.layers = _merge_small(image.layers, image.merge_by_size, self.settings.max_layers, self, job.epoch)
        image.merged = None
        descriptors = job.descriptors()
        job.hand_over()
        if self.settings.check_runnable:
            job.on_step("runnable")
            self._check_runnable(cell, descriptors, base, env, job.on_step)
        history = [f"base {base.name}"] * len(base.layers) + [p.name for p in image.layers[1:]]
        config = image_config(platform=cell.platform, env=env, labels=labels,
                              diff_ids=[d.diff_id for d in descriptors], history=history, epoch=job.epoch,
                              cmd=CELL_CMD, base_env=base.env)
        config_descriptor = self.layout.put_config(config)
        image.digest = self.layout.put_manifest(ref, config_descriptor, descriptors,
                                                {INPUTS: image.inputs, "io.pinmatrix.cell.id": cell.id},
                                                job.annotations)
        image.config_digest = config_descriptor["digest"]


@dataclass
class _CellJob:
    """One cell's image while ``Assembler.assemble`` builds it: its plan's parts, shared by the steps."""

    cell: Cell
    image: AssembledImage
    base: BaseLayers
    venv: VenvLayout
    wheels: dict[str, WheelFile]
    epoch: int
    log: Path
    on_step: Callable[[str], None]
    by_name: dict[str, PlannedLayer]  # the planned layers by name, before the small wheels are merged
    annotations: dict[str, str] = field(default_factory=dict)  # the manifest's (image/annotations.py)
    on_blob: Callable[[LayerDescriptor], None] = lambda layer: None
    _handed: set[str] = field(default_factory=set)
    _handing: threading.Lock = field(default_factory=threading.Lock)

    def hand_over(self, extra: Sequence[LayerDescriptor] = ()) -> None:
        """Each layer whose blob is now in the layout and not yet handed over, in the image's order, then
        ``extra`` (the merged layer, made before the image lists it), to ``on_blob`` (layers finish in several
        threads: one at a time here). The wheel layers the plan merges by size are not: the image holds their merged
        layer instead."""
        parts = [self.by_name[n].descriptor for n in self.image.merge_by_size if n in self.by_name]
        merged = {d.digest for d in parts if d is not None}
        with self._handing:
            for descriptor in [*self.descriptors(), *extra]:
                if descriptor.digest not in self._handed and descriptor.digest not in merged:
                    self._handed.add(descriptor.digest)
                    self.on_blob(descriptor)

    def descriptors(self) -> list[LayerDescriptor]:
        """The image's layers built so far, in order: the base's, then each planned layer's past the base."""
        return [*self.base.layers, *(p.descriptor for p in self.image.layers[1:] if p.descriptor)]


def _wheel_name(planned: PlannedLayer) -> str:
    """The package of a ``wheel:NAME==VERSION`` layer."""
    return planned.name.split(":", 1)[1].split("==", 1)[0]

def _canonical(name: str) -> str:
    return str(canonicalize_name(name))


def _size(wheels: dict[str, WheelFile], planned: PlannedLayer) -> int:
    return wheels[_wheel_name(planned)].size or 0


def _merge_small(layers: list[PlannedLayer], chosen: Sequence[str], max_layers: int, assembler: Assembler,
                 epoch: int) -> list[PlannedLayer]:
    """The wheel layers ``chosen`` by size in the plan and, past ``max_layers``, the smallest others, replaced by one
    layer holding all of them (image/assembly/merge.py; its key is made of theirs, so it is shared too)."""
    wheel_layers = {p.name: p for p in layers if p.name.startswith("wheel:")}
    names = merge.parts_to_merge(len(layers), {n: p.descriptor.size if p.descriptor else 0
                                               for n, p in wheel_layers.items()}, chosen, max_layers)
    if not names:
        return layers
    small = [wheel_layers[n] for n in names]
    merged = PlannedLayer(merge.merged_name(names), _merged_key(small))
    blobs = []
    for part in small:
        assert part.descriptor is not None
        blobs.append((assembler.layout.blob_path(part.descriptor.digest), part.descriptor.media_type))
    assembler._cached_or_build(merged, merge.merged_layer(blobs), epoch)
    return _spliced(layers, set(names), merged)


def _spliced(layers: list[PlannedLayer], parts: set[str], merged: PlannedLayer) -> list[PlannedLayer]:
    """``layers`` with the ``parts`` taken out and ``merged`` put where the image holds it."""
    out = [p for p in layers if p.name not in parts]
    out.insert(merge.insert_position([p.name for p in out]), merged)
    return out


def _merged_key(parts: Sequence[PlannedLayer]) -> str:
    return _key("merged", LAYOUT_FORMAT, merge.MERGE_FORMAT, [p.key for p in parts])


def describe(images: Sequence[AssembledImage]) -> list[dict[str, object]]:
    """The build plan / metadata as JSON-ready data; in a plan, the wheel layers merged by size are listed as the
    ``parts`` of the layer they make."""
    return [{
        "cell": img.cell.id, "name": img.cell.name, "ref": img.ref, "digest": img.digest or None,
        "config": img.config_digest or None, "inputs": img.inputs, "cached": img.cached,
        "download_bytes": sum(p.download or 0 for p in img.layers if not p.cached),
        "layers": _described_layers(img),
    } for img in images]


def _described_layers(img: AssembledImage) -> list[dict[str, object]]:
    if img.merged is None:
        return [_described(p) for p in img.layers]
    parts = set(img.merge_by_size)
    return [{**_described(p), "download": None, "parts": [_described(q) for q in img.layers if q.name in parts]}
            if p is img.merged else _described(p) for p in _spliced(img.layers, parts, img.merged)]


def _described(p: PlannedLayer) -> dict[str, object]:
    return {"name": p.name, "key": p.key, "cached": p.cached, "digest": p.descriptor.digest if p.descriptor else None,
            "size": p.descriptor.size if p.descriptor else None, "download": p.download if not p.cached else None}


def _unpacked_size(wheel: Path) -> int:
    """The bytes a wheel's files take unpacked, as its zip directory says (0 when it cannot be read): about the
    tar its layer writes, for the layer's progress."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            return sum(max(0, info.file_size) for info in archive.infolist())
    except (OSError, zipfile.BadZipFile):
        return 0
