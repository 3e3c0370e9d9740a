"""The wheels of a cell's lock, for the cell's platform and Python (not the host's): found on the cell's indexes
through the JSON simple API (PEP 691), chosen by the lock's sha256 hashes and the target's wheel tags, fetched
once into a content-addressed cache and checked against the lock before anything uses them."""

from __future__ import annotations

import hashlib
import json
import os
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)

from pinmatrix.cell import Cell, IndexSpec
from pinmatrix.errors import PinmatrixError
from pinmatrix.hashing import CHUNK, sha256_file
from pinmatrix.index.answers import index_opener
from pinmatrix.oci.layout import remove_dead_temporaries
from pinmatrix.project.lockfile import LockEntry
from pinmatrix.transfer import TransferMeter

DEFAULT_INDEX = "https://pypi.org/simple"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
_PLATFORM = re.compile(r"^(x86_64|aarch64)-manylinux_2_(\d+)$")
# A wheel file name is one path component of the characters the wheel spec's escaping leaves: never a path.
_FILENAME = re.compile(r"^[A-Za-z0-9_.+!]+(?:-[A-Za-z0-9_.+!]+){4,5}\.whl$")
MAX_PAGE = 64 << 20  # one project's JSON page (the largest on the default index is a few MiB)
MAX_WHEEL = 8 << 30  # a download with no declared size


class WheelError(PinmatrixError):
    """A locked distribution has no usable wheel, or its download does not match the lock."""


class IndexUnreachable(WheelError):
    """An index could not be reached at all (reported once per index, with the cells it affects)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"index {url} unreachable: {reason}")
        self.url = url


@dataclass(frozen=True)
class Target:
    """What a wheel must be built for: CPython ``python`` on ``platform`` (uv's ``x86_64-manylinux_2_28``)."""

    python: str
    platform: str

    @property
    def arch(self) -> str:
        m = _PLATFORM.match(self.platform)
        if not m:
            raise WheelError(f"platform {self.platform!r} is not ARCH-manylinux_2_N (x86_64 or aarch64)")
        return m.group(1)

    def tags(self) -> list[Tag]:
        """Supported tags, most preferred first (the order pip and uv use)."""
        m = _PLATFORM.match(self.platform)
        if not m:
            raise WheelError(f"platform {self.platform!r} is not ARCH-manylinux_2_N (x86_64 or aarch64)")
        arch, glibc = m.group(1), int(m.group(2))
        platforms = [f"manylinux_2_{minor}_{arch}" for minor in range(glibc, 16, -1)]
        platforms.append(f"manylinux2014_{arch}")
        if arch == "x86_64":
            platforms += [f"manylinux_2_{m}_{arch}" for m in (12, 5)] + [f"manylinux2010_{arch}", f"manylinux1_{arch}"]
        major, minor = (int(x) for x in self.python.split(".")[:2])
        tags = list(cpython_tags((major, minor), platforms=platforms))
        tags += list(compatible_tags((major, minor), interpreter=f"cp{major}{minor}", platforms=platforms))
        return tags


@dataclass(frozen=True)
class WheelFile:
    name: str  # canonical distribution name
    version: str
    filename: str
    url: str
    sha256: str
    size: int | None = None


def ssl_context(extra_ca_files: Sequence[Path] = ()) -> ssl.SSLContext:
    """The system's trust store plus the matrix's extra CA certificates (used by the builder only)."""
    context = ssl.create_default_context()
    for path in extra_ca_files:
        files = sorted(path.glob("*.crt")) if path.is_dir() else [path]
        for cert in files:
            try:
                context.load_verify_locations(cafile=str(cert))
            except (OSError, ssl.SSLError) as err:
                raise WheelError(f"matrix.ca_certificates: {cert}: {err}") from None
    return context


def _indexes_for(entry: LockEntry, indexes: Sequence[IndexSpec]) -> list[str]:
    """The index URLs a distribution may come from, as uv resolved it: an explicit index only for the packages
    that name it; otherwise the default index, then the extra ones."""
    pinned = [i.url for i in indexes if entry.name in {canonicalize_name(p) for p in i.packages}]
    if pinned:
        return pinned
    default = [i.url for i in indexes if i.default] or [DEFAULT_INDEX]
    return default + [i.url for i in indexes if not i.default and not i.explicit]


class WheelFetcher:
    """Find and fetch the wheels of lock entries; the cache is keyed by sha256, so every cell shares it."""

    def __init__(self, cache_dir: Path, *, context: ssl.SSLContext | None = None, timeout: float = 120.0) -> None:
        self.cache_dir = cache_dir
        self.context = context or ssl_context()
        self.timeout = timeout
        self._pages: dict[tuple[str, str], list[dict[str, object]]] = {}
        self._intact: set[str] = set()  # cached wheels re-hashed in this process
        self.clock: Callable[[], float] = time.monotonic  # what download progress measures time with

    def _open(self, url: str, accept: str | None = None) -> Any:  # an http.client response
        opener = index_opener(url, self.context, WheelError)
        request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
        return opener.open(request, timeout=self.timeout)

    def files(self, index: str, name: str) -> list[dict[str, object]]:
        key = (index, name)
        if key not in self._pages:
            url = f"{index.rstrip('/')}/{name}/"
            try:
                with self._open(url, SIMPLE_JSON) as response:
                    body = response.read(MAX_PAGE + 1)
                if len(body) > MAX_PAGE:
                    raise WheelError(f"index {index}: the page of {name} is larger than {MAX_PAGE >> 20} MiB")
                data = json.loads(body)
            except urllib.error.HTTPError as err:
                if err.code == 404:
                    self._pages[key] = []
                    return []
                raise IndexUnreachable(index, f"HTTP {err.code} for {name}") from None
            except (urllib.error.URLError, TimeoutError, OSError) as err:
                reason = getattr(err, "reason", err)
                raise IndexUnreachable(index, str(reason)) from None
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                raise WheelError(f"index {index} does not speak the JSON simple API (PEP 691) for {name}") from None
            files = data.get("files", []) if isinstance(data, dict) else []
            files = [f for f in files if isinstance(f, dict)] if isinstance(files, list) else []
            for f in files:
                f["url"] = urllib.parse.urljoin(url, str(f.get("url", "")))
            self._pages[key] = files
        return self._pages[key]

    def choose(self, entry: LockEntry, target: Target, indexes: Sequence[IndexSpec]) -> WheelFile:
        """The wheel of ``entry`` for ``target`` whose sha256 the lock lists; the most preferred tag wins."""
        if not entry.pinned or not entry.hashes:
            raise WheelError(f"{entry.name}: the lock line is not pinned with hashes: {entry.text[:80]!r}")
        allowed = {h.split(":", 1)[1] for h in entry.hashes}
        rank = {tag: i for i, tag in enumerate(target.tags())}
        best: tuple[int, WheelFile] | None = None
        seen_other = False
        for index in _indexes_for(entry, indexes):
            for f in self.files(index, entry.name):
                filename = str(f.get("filename", ""))
                hashes = f.get("hashes")
                sha = hashes.get("sha256") if isinstance(hashes, dict) else None
                if sha not in allowed:
                    continue
                if not re.fullmatch(r"[A-Za-z0-9_.+!-]+", filename) or ".." in filename:
                    raise WheelError(f"index {index}: the file name {filename[:120]!r} of {entry.name} is not a "
                                     "wheel file name (a path or an unsafe character)")
                if not _FILENAME.fullmatch(filename):
                    continue  # an sdist, or not a wheel name
                try:
                    _, version, _, tags = parse_wheel_filename(filename)
                except InvalidWheelFilename:
                    continue
                if str(version) != entry.version and version.public != entry.version:
                    continue
                score = min((rank[t] for t in tags if t in rank), default=None)
                if score is None:
                    seen_other = True
                    continue
                size = f.get("size")
                wheel = WheelFile(entry.name, entry.version, filename, str(f["url"]), str(sha),
                                  size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None)
                if best is None or score < best[0]:
                    best = (score, wheel)
            if best is not None:
                break
        if best is None:
            why = ("its locked wheels are for other platforms or Pythons" if seen_other
                   else "no wheel with a locked hash on the index (an sdist only cannot be installed without "
                        "building it)")
            raise WheelError(f"{entry.name}=={entry.version}: no wheel for cp{target.python.replace('.', '')} "
                             f"{target.platform}: {why}")
        return best[1]

    def path(self, wheel: WheelFile) -> Path:
        """``CACHE/ab/SHA256/NAME.whl``: the folder is the lock's sha256; the name (checked by ``choose`` to be
        one plain component) only keeps what an installer reads from it."""
        if not re.fullmatch(r"[0-9a-f]{64}", wheel.sha256) or not _FILENAME.fullmatch(wheel.filename) \
                or ".." in wheel.filename:
            raise WheelError(f"{wheel.filename[:120]!r}: not a wheel file name or sha256 {wheel.sha256[:80]!r}")
        return self.cache_dir / wheel.sha256[:2] / wheel.sha256 / wheel.filename

    def fetch(self, wheel: WheelFile, progress: Callable[[str], None] | None = None) -> Path:
        """The cached wheel file, downloaded now if absent; its sha256 is checked before it is kept. ``progress``
        hears, about once a second, ``fetch NAME: 12.0 MiB of 48.0 MiB (25%), 4.0 MiB/s, 0:09 left``."""
        target = self.path(wheel)
        if target.is_file():
            if wheel.sha256 in self._intact or sha256_file(target) == wheel.sha256:
                self._intact.add(wheel.sha256)
                _check_declared_size(wheel, target.stat().st_size)
                return target
            target.unlink(missing_ok=True)  # damaged in the cache: fetched again
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_dead_temporaries(target.parent)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.part")
        digest = hashlib.sha256()
        limit = wheel.size if wheel.size is not None else MAX_WHEEL
        meter = TransferMeter(wheel.size, clock=self.clock)
        try:
            with self._open(wheel.url) as response, open(tmp, "wb") as out:
                total = 0
                for chunk in iter(lambda: response.read(CHUNK), b""):
                    total += len(chunk)
                    meter.advance(len(chunk))
                    if progress is not None and meter.due():
                        progress(f"fetch {wheel.filename}: {meter.line()}")
                    if total > limit:
                        raise WheelError(f"{wheel.filename}: the download is larger than the {limit} bytes "
                                         "the index declared" if wheel.size is not None
                                         else f"{wheel.filename}: the download is larger than {limit >> 30} GiB")
                    digest.update(chunk)
                    out.write(chunk)
        except WheelError:
            tmp.unlink(missing_ok=True)
            raise
        except (urllib.error.URLError, TimeoutError, OSError) as err:
            tmp.unlink(missing_ok=True)
            raise WheelError(f"{wheel.filename}: download failed: {getattr(err, 'reason', err)}") from None
        if digest.hexdigest() != wheel.sha256:
            tmp.unlink(missing_ok=True)
            raise WheelError(f"{wheel.filename}: sha256 {digest.hexdigest()} does not match the lock's {wheel.sha256}")
        try:
            _check_declared_size(wheel, total)
        except WheelError:
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, target)
        self._intact.add(wheel.sha256)
        return target


def _check_declared_size(wheel: WheelFile, size: int) -> None:
    """The wheel's bytes are as many as its index declared (where it declared a size): the plan decides from the
    declared size which wheels share a layer (``build --merge-below``), so an index that misstates it would make
    another image of the same lock."""
    if wheel.size is not None and size != wheel.size:
        raise WheelError(f"{wheel.filename}: the wheel is {size} bytes, not the {wheel.size} the index declared")


def cell_target(cell: Cell) -> Target:
    return Target(python=cell.python, platform=cell.platform)
