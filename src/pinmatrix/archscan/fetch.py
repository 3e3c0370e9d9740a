"""A cell's wheels, for the cell's platform and Python (aarch64 wheels on an x86_64 machine too).

Where the cell has a lock (``locks/<cell-id>.txt``) its pins and hashes are used. Where it has none (its
packages need an index that does not answer here, say), the cell's requirements are resolved with uv against
the default index alone, and what that cannot give is said: packages the cell takes from another index
(those wheels are the default index's, not the cell's), a platform floor raised because a wheel needs a newer
glibc, requirements that only resolve one by one. Wheels live in the one wheel cache ``pinmatrix build`` fills
(``<cache>/wheels/ab/<sha256>/<file>.whl``, a folder per locked hash): what it lacks is downloaded with pip
(hash-checked) and put there, so a wheel the build or an earlier scan fetched is never downloaded again; nothing
is written into the repository.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.tags import Tag
from packaging.utils import canonicalize_name, parse_wheel_filename

from pinmatrix.archscan.tools import cache_dir
from pinmatrix.cell import Cell
from pinmatrix.hashing import sha256_bytes, sha256_file
from pinmatrix.index.uv import find_uv
from pinmatrix.index.wheel_index import Target, WheelError
from pinmatrix.project.lockfile import lock_path

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
_PLATFORM = re.compile(r"^(x86_64|aarch64)-manylinux_2_(\d+)$")
# glibc floors tried, in order, when a wheel needs a newer one than the cell's platform names.
RAISED_FLOORS: tuple[int, ...] = (31, 34, 35, 39)


@dataclass(frozen=True)
class Pin:
    name: str  # canonical name
    version: str
    hashes: tuple[str, ...]


@dataclass
class CellPins:
    """What will be fetched for a cell, and what could not be had."""

    source: str  # "lock" or "resolved" (no lock: resolved against the default index here)
    platform: str  # the uv platform the pins are for, e.g. aarch64-manylinux_2_31
    python: str
    pins: list[Pin]
    notes: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)  # requirement -> why it is not in ``pins``
    substituted: dict[str, str] = field(default_factory=dict)  # package -> why its wheel is not the cell's


@dataclass
class Wheel:
    pin: Pin
    path: Path | None  # None when it could not be downloaded
    reason: str = ""  # why not
    sha256: str | None = None


def parse_requirements(text: str) -> list[Pin]:
    """Pins with their hashes from a uv/pip requirements file (continuation lines joined)."""
    joined = re.sub(r"\\\s*\n", " ", text)
    pins: list[Pin] = []
    for line in joined.splitlines():
        line = line.split("#", 1)[0].strip() if not line.lstrip().startswith("--") else ""
        m = _PIN.match(line)
        if m:
            pins.append(Pin(canonicalize_name(m.group(1)), m.group(2), tuple(_HASH.findall(line))))
    return pins


def _uv_compile(requirements: list[str], python: str, platform: str, exclude_newer: str | None,
                constraints: Sequence[str] = ()) -> tuple[str | None, str]:
    """(lock text, '') or (None, uv's reason)."""
    with tempfile.TemporaryDirectory(prefix="pinmatrix-archscan-") as tmp:
        req = Path(tmp) / "requirements.in"
        req.write_text("\n".join(requirements) + "\n", encoding="utf-8")
        out = Path(tmp) / "out.txt"
        cmd = [find_uv(), "pip", "compile", str(req), "-o", str(out), "--python-version", python,
               "--python-platform", platform, "--generate-hashes", "--no-header", "--quiet"]
        if constraints:
            con = Path(tmp) / "constraints.txt"
            con.write_text("\n".join(constraints) + "\n", encoding="utf-8")
            cmd += ["--constraint", str(con)]
        if exclude_newer:
            cmd += ["--exclude-newer", exclude_newer]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                              env={**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"})
        if proc.returncode == 0:
            return out.read_text(encoding="utf-8"), ""
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("warning:")]
        return None, " ".join(lines)[:600] or f"uv exit {proc.returncode}"


def _platform_ladder(platform: str) -> list[str]:
    m = _PLATFORM.match(platform)
    if not m:
        return [platform]
    arch, floor = m.group(1), int(m.group(2))
    return [platform] + [f"{arch}-manylinux_2_{n}" for n in RAISED_FLOORS if n > floor]


def _resolve(requirements: list[str], python: str, platform: str, exclude_newer: str | None,
             cache: Path, constraints: Sequence[str] = ()) -> tuple[str | None, str, str]:
    """(lock text or None, platform used, reason of the first failure); cached by its inputs."""
    key = sha256_bytes(json.dumps([requirements, python, platform, exclude_newer, list(constraints)]).encode())[:16]
    path = cache / "resolved" / f"{key}.json"
    if path.is_file():
        data = json.loads(path.read_text())
        return data["text"], data["platform"], data["reason"]
    text, used, reason = None, platform, ""
    for candidate in _platform_ladder(platform):
        text, why = _uv_compile(requirements, python, candidate, exclude_newer, list(constraints))
        if text is not None:
            used = candidate
            break
        reason = reason or why
        if "platform tag" not in why:  # another platform floor would not help
            break
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"text": text, "platform": used, "reason": reason}))
    return text, used, reason


def cell_pins(cell: Cell, root: Path, exclude_newer: str | None, cache: Path | None = None) -> CellPins:
    """The pins to fetch for ``cell``: its lock, or a resolution against the default index."""
    cache = cache or cache_dir() / "arch-scan"
    lock = lock_path(cell, root)
    if lock.is_file():
        return CellPins("lock", cell.platform, cell.python, parse_requirements(lock.read_text(encoding="utf-8")),
                        notes=[f"pins from {lock.relative_to(root) if lock.is_relative_to(root) else lock}"])
    other_index = {canonicalize_name(p): ix.name for ix in cell.indexes if not ix.default for p in ix.packages}
    notes = [f"no lock for cell {cell.id}: its requirements resolved against the default index here "
             f"(`pinmatrix lock -k {cell.id}` fails where a package's index does not answer)"]
    result = CellPins("resolved", cell.platform, cell.python, [], notes=notes)
    text, used, reason = _resolve(list(cell.requirements), cell.python, cell.platform, exclude_newer, cache)
    chosen: dict[str, Pin] = {}
    if text is not None:
        chosen = {p.name: p for p in parse_requirements(text)}
        result.platform = used
        if used != cell.platform:
            notes.append(f"platform raised from {cell.platform} to {used}: {reason}")
    else:
        notes.append(f"the cell's requirements do not resolve together: {reason}")
        top: dict[str, str] = {str(canonicalize_name(m.group(1))): m.group(2)
                               for m in (_PIN.match(r) for r in cell.requirements) if m}
        for req in cell.requirements:  # each with the cell's other pins as constraints, else alone
            others = [r for r in cell.requirements if r != req]
            alone, alone_used, why = _resolve([req], cell.python, cell.platform, exclude_newer, cache, others)
            constrained = alone is not None
            if alone is None:
                alone, alone_used, why = _resolve([req], cell.python, cell.platform, exclude_newer, cache)
            if alone is None:
                result.missing[req] = why
                continue
            if alone_used != cell.platform:
                notes.append(f"{req}: platform raised from {cell.platform} to {alone_used} ({why})")
                result.platform = max(result.platform, alone_used, key=lambda p: int(p.rsplit("_", 1)[1]))
            for pin in parse_requirements(alone):
                if pin.name in top and pin.version != top[pin.name]:
                    if not constrained:
                        notes.append(f"{req} does not resolve beside the cell's other pins: alone it takes "
                                     f"{pin.name}=={pin.version}, the cell pins {top[pin.name]} (the cell's pin is read)")
                    continue
                chosen.setdefault(pin.name, pin)
    result.pins = sorted(chosen.values(), key=lambda p: p.name)
    for name, index in other_index.items():
        if name in chosen:
            result.substituted[name] = (f"the cell takes {name} from the index {index!r}; the wheel scanned is the "
                                        f"default index's {name} {chosen[name].version}")
    return result


def pip_platforms(platform: str) -> list[str]:
    """pip's --platform values for a uv platform: pip matches manylinux tags exactly, so every floor up to
    the platform's is named (plus the legacy aliases)."""
    m = _PLATFORM.match(platform)
    if not m:
        raise ValueError(f"unsupported platform {platform!r} (expected x86_64|aarch64-manylinux_2_N)")
    arch, floor = m.group(1), int(m.group(2))
    tags = [f"manylinux_2_{n}_{arch}" for n in range(floor, 4, -1)]
    tags += [f"manylinux2014_{arch}"] + ([f"manylinux2010_{arch}", f"manylinux1_{arch}"] if arch == "x86_64" else [])
    return tags


def _pip_download(lines: list[str], platform: str, python: str, dest: Path) -> subprocess.CompletedProcess[str]:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        fh.write("\n".join(lines) + "\n")
        reqs = fh.name
    nodot = python.replace(".", "")
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
           "--only-binary=:all:", "--require-hashes", "-r", reqs, "-d", str(dest), "--python-version", python,
           "--implementation", "cp", "--abi", f"cp{nodot}", "--abi", "abi3", "--abi", "none"]
    for tag in pip_platforms(platform):
        cmd += ["--platform", tag]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False)
    finally:
        os.unlink(reqs)


def _sha256(path: Path, index: dict[str, list], key: str | None = None) -> str:
    """sha256 of a cached wheel, remembered by size and mtime so a warm scan does not re-read gigabytes."""
    st = path.stat()
    key = key or path.name
    known = index.get(key)
    if known and known[0] == st.st_size and known[1] == st.st_mtime_ns:
        return str(known[2])
    digest = sha256_file(path)
    index[key] = [st.st_size, st.st_mtime_ns, digest]
    return digest


def _compatible(filename: str, platform: str, python: str) -> bool:
    """A wheel file name installs for the uv platform and CPython ``python``: one of its tags is one pip and uv
    accept there (the build's own list, index.wheel_index.Target: ``py39-none-...`` installs on CPython 3.13)."""
    try:
        _name, _version, _build, tags = parse_wheel_filename(filename)
        supported = _supported_tags(platform, python)
    except (ValueError, WheelError):
        return False
    return not supported.isdisjoint(tags)


@functools.lru_cache(maxsize=16)
def _supported_tags(platform: str, python: str) -> frozenset[Tag]:
    return frozenset(Target(python, platform).tags())


def _cached_wheel(pin: Pin, build_wheels: Path, platform: str, python: str,
                  index: dict[str, list]) -> tuple[Path, str] | None:
    """The pin's wheel where ``pinmatrix build`` keeps it (``<cache>/wheels/ab/<sha256>/<file>.whl``, one folder
    per locked hash), for this platform and Python, its sha256 checked: no second download of the same file."""
    for digest in pin.hashes:
        folder = build_wheels / digest[:2] / digest
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.whl")):
            if _compatible(path.name, platform, python) and _sha256(path, index, str(path)) == digest:
                return path, digest
    return None


def _store(downloaded: Path, pins: Sequence[Pin], wheels: Path, index: dict[str, list]) -> None:
    """Move each wheel pip downloaded into ``wheels/ab/<sha256>/``, the folder of the locked hash it has (a file
    no pin locks is left where it is, removed with the download folder)."""
    locked = {h for p in pins for h in p.hashes}
    for path in sorted(downloaded.glob("*.whl")):
        digest = sha256_file(path)
        if digest in locked:
            folder = wheels / digest[:2] / digest
            folder.mkdir(parents=True, exist_ok=True)
            os.replace(path, folder / path.name)
            _sha256(folder / path.name, index, str(folder / path.name))


def fetch_wheels(pins: CellPins, cache: Path | None = None, log=None, build_cache: Path | None = None) -> list[Wheel]:
    """The wheel of every pin for the pins' platform and Python, from the one wheel cache (``build_cache``, the
    ``--cache-dir`` of ``pinmatrix build``; without one, ``cache``): what it lacks is downloaded with pip
    (hash-checked) into it."""
    wheels_dir = (build_cache if build_cache is not None else (cache or cache_dir())) / "wheels"
    wheels_dir.mkdir(parents=True, exist_ok=True)
    index_path = (cache or cache_dir()) / "arch-scan" / "wheels-sha256.json"
    index: dict[str, list] = json.loads(index_path.read_text()) if index_path.is_file() else {}
    found = {p.name: hit for p in pins.pins
             if (hit := _cached_wheel(p, wheels_dir, pins.platform, pins.python, index)) is not None}
    if found and log:
        log(f"{len(found)} wheel(s) from the wheel cache {wheels_dir}")
    todo = [p for p in pins.pins if p.name not in found]
    if todo:
        if log:
            log(f"downloading {len(todo)} wheel(s) for {pins.platform}, python {pins.python} into {wheels_dir}")
        lines = [f"{p.name}=={p.version} " + " ".join(f"--hash=sha256:{h}" for h in p.hashes) for p in todo]
        with tempfile.TemporaryDirectory(prefix=".download-", dir=wheels_dir) as scratch:
            if _pip_download(lines, pins.platform, pins.python, Path(scratch)).returncode != 0:
                for p, line in zip(todo, lines):  # one at a time, to know which cannot be had
                    proc = _pip_download([line], pins.platform, pins.python, Path(scratch))
                    if proc.returncode != 0 and log:
                        log(f"  {p.name}=={p.version}: {_pip_reason(proc.stderr)}")
            _store(Path(scratch), todo, wheels_dir, index)
    wheels: list[Wheel] = []
    for p in pins.pins:
        hit = found.get(p.name) or _cached_wheel(p, wheels_dir, pins.platform, pins.python, index)
        if hit:
            wheels.append(Wheel(p, hit[0], sha256=hit[1]))
        else:
            wheels.append(Wheel(p, None, f"no wheel of {p.name} {p.version} for {pins.platform}, python "
                                         f"{pins.python} (sdist only, or none with the locked hashes)"))
    index_path.parent.mkdir(parents=True, exist_ok=True)
    index_path.write_text(json.dumps(index, indent=0, sort_keys=True))
    return wheels


def _pip_reason(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip().startswith("ERROR")]
    return " ".join(lines)[:300] or "pip download failed"
