"""A cell's wheels as a bundle: the lock's distributions for the host's Python and the cell's platform, less what
the host already has at the same version and what is excluded by name, fetched through the image builder's
hash-checked wheel cache (``pinmatrix.index.wheel_index``) and packed into parts."""

from __future__ import annotations

import fnmatch
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import Field, RootModel
from securesystemslib.signer import CryptoSigner

from pinmatrix import __version__
from pinmatrix.bundle.model import LOCK_NAME, BundleManifest, LeftOut, WheelItem
from pinmatrix.bundle.pack import BundleError, Say, check_out, publish, staging_folder, write_parts
from pinmatrix.cell import Cell
from pinmatrix.datamodel import Strict
from pinmatrix.hashing import sha256_bytes
from pinmatrix.image.assembly.assemble import WheelChoices
from pinmatrix.index.wheel_index import Target, WheelError, WheelFetcher
from pinmatrix.project.document import KeyText, dotted_key, load_document
from pinmatrix.project.lockfile import LockEntry, parse_lock

MAX_HOST_FILE = 16 << 20
_PYTHON = re.compile(r"^(3)\.([0-9]{1,3})(?:\.[0-9]+)?")


class PipListEntry(Strict):
    """One row of ``pip list --format json``."""

    name: str = Field(min_length=1, max_length=200)
    version: str = Field(min_length=1, max_length=200)
    editable_project_location: str | None = None


class HostProbe(Strict):
    """What ``pinmatrix smoke`` probes of an interpreter (``smoke/hostdiff.py``): its version and distributions."""

    python: str = Field(max_length=40)
    dists: dict[str, str]


@dataclass(frozen=True)
class HostPackages:
    """What a host has installed: canonical name -> version, and its Python (``3.12``) where known."""

    versions: dict[str, str]
    python: str | None
    source: str


class PipList(RootModel[list[PipListEntry]]):
    """``pip list --format json``: its rows."""


def _not_a(what: str) -> KeyText:
    """An error's key after what the file is not: ``not a host probe: dists.x``."""
    return lambda err: f"not {what}: {dotted_key(err) or '(top)'}"


def read_pip_list(path: Path) -> HostPackages:
    """A host's ``pip list --format json`` output."""
    what = "a pip list --format json output"
    rows = load_document(path, PipList, what=what, form="json", max_bytes=MAX_HOST_FILE, error=BundleError,
                         key=_not_a(what)).root
    return HostPackages({canonicalize_name(r.name): r.version for r in rows}, None, f"{path.name} (pip list)")


def read_host_probe(path: Path) -> HostPackages:
    """A recorded host probe: ``{"python": "3.12.3", "dists": {name: version}}``."""
    probe = load_document(path, HostProbe, what="a host probe", form="json", max_bytes=MAX_HOST_FILE,
                          error=BundleError, key=_not_a("a host probe"))
    m = _PYTHON.match(probe.python)
    return HostPackages({canonicalize_name(k): v for k, v in probe.dists.items()},
                        f"{m.group(1)}.{m.group(2)}" if m else None, f"{path.name} (host probe)")


def _same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def _pattern(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def plan(entries: Sequence[LockEntry], exclude: Sequence[str],
         host: HostPackages | None) -> tuple[list[LockEntry], list[LeftOut]]:
    """The lock entries to ship, and those left out with the reason."""
    patterns = [_pattern(p) for p in exclude]
    keep: list[LockEntry] = []
    left: list[LeftOut] = []
    for entry in entries:
        hit = next((p for p in patterns if fnmatch.fnmatchcase(entry.name, p)), None)
        have = host.versions.get(entry.name) if host else None
        if hit is not None:
            left.append(LeftOut(name=entry.name, version=entry.version, why=f"excluded ({hit})"))
        elif host is not None and have is not None and _same_version(have, entry.version):
            left.append(LeftOut(name=entry.name, version=entry.version, why=f"the host has it ({host.source})"))
        else:
            keep.append(entry)
    return keep, left


@dataclass(frozen=True)
class WheelsRequest:
    cell: Cell
    lock_text: str
    lock_source: str  # "locks/<id>.txt", for messages
    python: str | None  # the host's Python; None: the host probe's, else the cell's
    platform: str | None  # the host's platform tag (ARCH-manylinux_2_N); None: the cell's
    host: HostPackages | None
    exclude: tuple[str, ...]
    part_size: int
    out: Path
    cache_dir: Path  # the builder's cache (wheels/, wheel-choices/)
    signer: CryptoSigner | None = None  # the project's signing key: the bundle carries manifest.dsse.json


def bundle_wheels(request: WheelsRequest, fetcher: WheelFetcher, say: Say) -> BundleManifest:
    cell = request.cell
    check_out(request.out)
    python = request.python or (request.host.python if request.host else None) or cell.python
    if not re.fullmatch(r"3\.[0-9]{1,3}", python):
        raise BundleError(f"--python {python!r}: expected a CPython version such as 3.12")
    lock = parse_lock(request.lock_text, request.lock_source)
    if lock.cell_id is not None and lock.cell_id != cell.id:
        raise BundleError(f"{request.lock_source}: a lock for cell {lock.cell_id}, not {cell.id}")
    keep, left_out = plan(lock.entries, request.exclude, request.host)
    for pattern in request.exclude:
        if not any(fnmatch.fnmatchcase(e.name, _pattern(pattern)) for e in lock.entries):
            say(f"note: --exclude {pattern} matches no package of {request.lock_source}")
    platform = request.platform or cell.platform
    if not re.fullmatch(r"(x86_64|aarch64)-manylinux_2_[0-9]{1,3}", platform):
        raise BundleError(f"--platform {platform!r}: expected ARCH-manylinux_2_N (x86_64 or aarch64)")
    target = Target(python=python, platform=platform)
    choices = WheelChoices(request.cache_dir, fetcher)
    chosen, problems = [], []
    for i, entry in enumerate(keep):
        try:
            wheel = choices.choose(entry, target, cell)
        except WheelError as err:
            problems.append(str(err))
            continue
        if f"sha256:{wheel.sha256}" not in entry.hashes:
            problems.append(f"{entry.name}=={entry.version}: chosen wheel {wheel.filename} is not one of the lock's "
                            "hashes")
            continue
        chosen.append(wheel)
        say(f"wheel {i + 1}/{len(keep)} {wheel.filename}")
    if problems:
        more = f" (and {len(problems) - 1} more: {'; '.join(problems[1:4])})" if len(problems) > 1 else ""
        raise BundleError(f"cell {cell.id}: {problems[0]}{more}")
    files, items, offset = [], [], 0
    for i, wheel in enumerate(chosen):
        cached = fetcher.path(wheel).is_file()
        path = fetcher.fetch(wheel, progress=say)  # checked against the lock's sha256 before it is cached
        size = path.stat().st_size
        say(f"{'cached' if cached else 'fetched'} {i + 1}/{len(chosen)} {wheel.filename}: {size} bytes")
        items.append(WheelItem(name=wheel.name, version=wheel.version, filename=wheel.filename, size=size,
                               sha256=wheel.sha256, offset=offset))
        files.append(path)
        offset += size
    say(f"{len(items)} wheel(s), {offset} bytes; {len(left_out)} left out")
    note = (f"wheels chosen for the host's CPython {python} (cp{python.replace('.', '')}); the cell's Python is "
            f"{cell.python}" if python != cell.python else f"wheels for the cell's CPython {python}")
    if platform != cell.platform:
        note += f"; for the host's platform {platform}, the cell's is {cell.platform}"

    folder = staging_folder(request.out)
    try:
        parts = write_parts(files, request.part_size, folder, say)
        manifest = BundleManifest(
            kind="wheels", pinmatrix_version=__version__, cell_id=cell.id,
            lock_sha256=sha256_bytes(request.lock_text.encode("utf-8")), python=python, cell_python=cell.python,
            platform=platform, note=note, wheels=items, left_out=left_out, part_size=request.part_size,
            total_size=offset, parts=parts)
        publish(manifest, folder, request.out.absolute(), {LOCK_NAME: request.lock_text.encode("utf-8")},
                request.signer)
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # gone already when it became the bundle
    return manifest
