"""The dependency graph of a cell's locked distributions, for its SBOM: each wheel's ``Requires-Dist`` (from its
METADATA) evaluated for the cell's target (its Python and platform, not the host's) and resolved against the
lock: an edge A -> B when A requires B under a marker that holds, with the extras A's requirers asked for, and
the lock's B satisfies the specifier.

The wheels are read from the build's content-addressed cache (``CACHE/wheels/ab/SHA256/NAME.whl``, the folder
being the lock's sha256): a wheel is used only when its bytes hash to that sha256 (re-hashed here), and only its
``*.dist-info/METADATA`` is read, bounded (``MAX_METADATA``). A distribution whose wheel is not in the cache keeps
the edges the lock's ``# via`` notes give it (uv's record of the same resolution).
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from email.parser import HeaderParser
from pathlib import Path

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from pinmatrix.cell import Cell
from pinmatrix.hashing import sha256_file

MAX_METADATA = 4 << 20  # torch's METADATA is about 40 kB
MAX_REQUIRES = 2000  # Requires-Dist lines of one wheel
_HEX = re.compile(r"^[0-9a-f]{64}$")
_WHEEL = re.compile(r"^[A-Za-z0-9_.+!]+(?:-[A-Za-z0-9_.+!]+){4,5}\.whl$")


def target_environment(cell: Cell) -> dict[str, str]:
    """PEP 508 marker variables for the cell's target: CPython ``cell.python`` on Linux ``cell.platform``'s
    machine (``x86_64-manylinux_2_28`` -> x86_64). The patch release is not known: X.Y.0 stands for it."""
    machine = cell.platform.split("-", 1)[0]
    full = cell.python if cell.python.count(".") >= 2 else f"{cell.python}.0"
    return {"python_version": ".".join(cell.python.split(".")[:2]), "python_full_version": full,
            "implementation_name": "cpython", "implementation_version": full, "os_name": "posix",
            "platform_machine": machine, "platform_python_implementation": "CPython", "platform_release": "",
            "platform_system": "Linux", "platform_version": "", "sys_platform": "linux"}


def wheel_requires(path: Path) -> list[str]:
    """The ``Requires-Dist`` lines of a wheel's METADATA (an unreadable or oversized one gives none)."""
    try:
        with zipfile.ZipFile(path) as wheel:
            metas = [i for i in wheel.infolist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", i.filename)]
            if len(metas) != 1 or metas[0].file_size > MAX_METADATA:
                return []
            with wheel.open(metas[0]) as handle:
                raw = handle.read(MAX_METADATA + 1)
    except (zipfile.BadZipFile, OSError, KeyError, EOFError):
        return []
    if len(raw) > MAX_METADATA:
        return []
    headers = HeaderParser().parsestr(raw.decode("utf-8", "replace"), headersonly=True)
    return [str(v) for v in (headers.get_all("Requires-Dist") or [])][:MAX_REQUIRES]


def cached_requires(hashes: Mapping[str, Sequence[str]], wheel_cache: Path) -> dict[str, list[str]]:
    """name -> Requires-Dist, for each locked distribution one of whose accepted wheels (by sha256) is in the
    cache and hashes to it. ``hashes``: canonical name -> the lock's sha256 hex values."""
    found: dict[str, list[str]] = {}
    for name, digests in hashes.items():
        for digest in digests:
            folder = wheel_cache / digest[:2] / digest
            if not _HEX.fullmatch(digest) or not folder.is_dir():
                continue
            wheels = [p for p in folder.iterdir() if _WHEEL.fullmatch(p.name) and p.is_file() and not p.is_symlink()]
            if len(wheels) == 1 and sha256_file(wheels[0]) == digest:
                found[name] = wheel_requires(wheels[0])
                break
    return found


def _requirement(line: str) -> Requirement | None:
    try:
        return Requirement(line)
    except InvalidRequirement:
        return None


def _applies(req: Requirement, env: dict[str, str], extras: Iterable[str]) -> bool:
    if req.marker is None:
        return True
    try:
        return any(req.marker.evaluate({**env, "extra": extra}) for extra in ("", *sorted(extras)))
    except (InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
        return False


def requires_graph(versions: Mapping[str, str], requires: Mapping[str, Sequence[str]], env: dict[str, str],
                   top: Sequence[str] = ()) -> dict[str, set[str]]:
    """name -> the locked names it requires, for the names in ``requires`` (their Requires-Dist lines).
    ``versions``: the lock (canonical name -> version); ``top``: the cell's own requirement lines, whose extras
    count (``vllm[flashinfer]`` turns on vllm's ``extra == "flashinfer"`` requirements)."""
    parsed = {name: [r for r in map(_requirement, lines) if r is not None] for name, lines in requires.items()}
    asked: dict[str, set[str]] = {}
    for line in top:
        req = _requirement(line)
        if req is not None:
            asked.setdefault(canonicalize_name(req.name), set()).update(req.extras)
    edges: dict[str, set[str]] = {name: set() for name in parsed}
    changed = True
    while changed:  # extras asked for turn on more requirements, which may ask for more extras
        changed = False
        for name, reqs in parsed.items():
            for req in reqs:
                dep = canonicalize_name(req.name)
                if dep == name or dep not in versions or not _applies(req, env, asked.get(name, ())):
                    continue
                if req.specifier and not req.specifier.contains(versions[dep], prereleases=True):
                    continue
                if dep not in edges[name]:
                    edges[name].add(dep)
                    changed = True
                if not set(req.extras) <= asked.setdefault(dep, set()):
                    asked[dep] |= set(req.extras)
                    changed = True
    return edges
