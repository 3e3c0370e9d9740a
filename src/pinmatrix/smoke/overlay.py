"""The host runtime's overlay: a per-cell directory put first on PYTHONPATH, holding the cell's extra
wheels (installed with pip --target, no index, no dependencies) and its installed-tree patches.

A wheel of ``--wheels`` is installed only when its sha256 is one the cell's lock (``locks/<cell id>.txt``) names
for its distribution at the locked version: a folder holding any other wheel (an extra, a rebuilt or substituted
file) is refused before anything is installed, one line per wheel, exit 2. Locked distributions the folder does
not carry are named one line each as not supplied (the host's own environment provides them or not: the host
runtime records every difference from the lock with each result, ``smoke/hostdiff.py``). The host pseudo-cell
(no matrix) has no lock: its wheels are installed unchecked, and that is said.

A patch for a package that the overlay's wheels do not provide is applied to a copy of that package
taken from the smoke interpreter's environment, so the environment itself is never modified.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name, parse_wheel_filename

from pinmatrix.errors import PatchError, PinmatrixError
from pinmatrix.hashing import sha256_file
from pinmatrix.image.assembly.patching import apply_patch, parse_patch
from pinmatrix.project.lockfile import LOCK_DIR, LockFileError, parse_lock
from pinmatrix.smoke.target import SmokeTarget


class OverlayError(PinmatrixError):
    """An overlay could not be built (pip failed, a package to patch is missing, a wheel is not the lock's)."""


def check_wheels(cell: SmokeTarget, wheels: list[Path], wheels_dir: Path, repo_root: Path, log: Any) -> None:
    """Every wheel is the lock's (its distribution, version and sha256); else each one said and OverlayError."""
    lock = repo_root / LOCK_DIR / f"{cell.id}.txt"
    if not lock.is_file():
        if cell.id == "host":
            log(f"  overlay for {cell.id}: no lock (not a matrix cell): the {len(wheels)} wheel(s) are not checked")
            return
        raise OverlayError(f"cell {cell.id}: --wheels {wheels_dir}: no lock {lock} to check the wheels against "
                           f"(run `pinmatrix lock -k {cell.id}`)")
    try:
        locked = {e.name: e for e in parse_lock(lock.read_text(encoding="utf-8"), str(lock)).entries}
    except (OSError, UnicodeDecodeError, LockFileError) as err:
        raise OverlayError(f"cell {cell.id}: {lock}: cannot read the lock: {err}") from None
    extras: list[str] = []
    supplied: set[str] = set()
    for wheel in wheels:
        try:
            name = str(canonicalize_name(parse_wheel_filename(wheel.name)[0]))
        except ValueError:
            extras.append(f"{wheel}: not a wheel file name")
            continue
        digest = "sha256:" + sha256_file(wheel)
        entry = locked.get(name)
        if entry is None:
            extras.append(f"{wheel}: {name} is not in {lock}: an extra wheel")
        elif digest not in entry.hashes:
            extras.append(f"{wheel}: {digest} is not a hash {lock} names for {name} {entry.version}")
        else:
            supplied.add(name)
    for line in extras:
        log(f"  refused: {line}")
    for name in sorted(set(locked) - supplied):
        log(f"  not supplied by {wheels_dir}: {name} {locked[name].version} (locked; the host's own, if any)")
    if extras:
        raise OverlayError(f"cell {cell.id}: --wheels {wheels_dir}: {len(extras)} wheel(s) not the lock's (each "
                           "named above): nothing installed")


@dataclass
class Overlay:
    site: Path
    wheels: list[str] = field(default_factory=list)
    patches: list[str] = field(default_factory=list)  # "id: applied" / "id: already-applied" / ...


def _patch_field(patch: Any, name: str) -> Any:
    return patch.get(name) if isinstance(patch, dict) else getattr(patch, name, None)


def _find_package_dir(python: str, top: str) -> Path | None:
    code = (
        "import importlib.util, sys\n"
        "spec = importlib.util.find_spec(sys.argv[1])\n"
        "locs = list(spec.submodule_search_locations or []) if spec else []\n"
        "print(locs[0] if locs else '')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([python, "-c", code, top], capture_output=True, text=True, env=env, timeout=120)
    path = proc.stdout.strip()
    return Path(path) if proc.returncode == 0 and path else None


def _installer(python: str) -> list[str]:
    """``python -m pip install`` where that interpreter has pip, else uv's (a uv-made venv has no pip)."""
    if os.environ.get("PINMATRIX_OVERLAY_INSTALLER") != "uv":
        probe = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, timeout=120)
        if probe.returncode == 0:
            return [python, "-m", "pip", "install", "--quiet", "--no-compile", "--disable-pip-version-check"]
    uv = shutil.which("uv")
    if uv is None:
        try:
            from uv import find_uv_bin  # noqa: PLC0415 - the uv wheel ships the binary; a uv on PATH serves without it

            uv = find_uv_bin()
        except (ImportError, FileNotFoundError):
            raise OverlayError(f"{python} has no pip and uv is not installed: cannot install overlay wheels") from None
    return [uv, "pip", "install", "--quiet", "--python", python]


def build_overlay(
    cell: SmokeTarget,
    root: Path,
    *,
    wheels_dir: Path | None,
    repo_root: Path,
    python: str = sys.executable,
    log: Any = print,
) -> Overlay | None:
    """Make ``root/<cell id>/site`` afresh for ``cell``; None when the cell needs no overlay."""
    wheels = sorted(Path(wheels_dir).glob("*.whl")) if wheels_dir else []
    to_apply = [p for p in cell.patches if _patch_field(p, "status") == "apply"]
    upstream = [p for p in cell.patches if _patch_field(p, "status") == "already-upstream"]
    for p in upstream:
        log(f"  patch {_patch_field(p, 'id')}: already upstream in {_patch_field(p, 'package')} "
            f"{_patch_field(p, 'version')} (contained in {_patch_field(p, 'contained_in')}): nothing to apply")
    if not wheels and not to_apply:
        return None
    if wheels:
        check_wheels(cell, wheels, Path(str(wheels_dir)), repo_root, log)
    cell_root = Path(root).resolve() / cell.id  # PYTHONPATH must not depend on the smoke's cwd
    site = cell_root / "site"
    tmp = cell_root / f"site.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    overlay = Overlay(site=site, wheels=[w.name for w in wheels],
                      patches=[f"{_patch_field(p, 'id')}: already-upstream" for p in upstream])
    if wheels:
        cmd = [*_installer(python), "--no-index", "--no-deps", "--target", str(tmp), *map(str, wheels)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            last = (proc.stderr.strip().splitlines() or ["?"])[-1]
            raise OverlayError(f"cell {cell.id}: installing the overlay wheels from {wheels_dir} failed: {last}")
        log(f"  overlay for {cell.id}: {len(wheels)} wheel(s) installed")
    for p in to_apply:
        pid, source, sha = _patch_field(p, "id"), _patch_field(p, "source"), _patch_field(p, "sha256")
        if not source:
            raise PatchError(f"cell {cell.id}: patch {pid} has no source file")
        patch_path = (repo_root / source) if not Path(source).is_absolute() else Path(source)
        if not patch_path.is_file():
            raise PatchError(f"cell {cell.id}: patch {pid}: {patch_path} not found")
        tops = {fp.target(1).split("/", 1)[0] for fp in parse_patch(patch_path.read_text(encoding="utf-8"))}
        for top in sorted(tops):
            if not (tmp / top).exists():
                found = _find_package_dir(python, top)
                if found is None:
                    raise OverlayError(f"cell {cell.id}: patch {pid} patches {top!r}, which is neither in the "
                                       f"overlay wheels nor importable by {python}")
                shutil.copytree(found, tmp / top, ignore=shutil.ignore_patterns("__pycache__"))
                log(f"  overlay for {cell.id}: copied {top} from {found} to patch it")
        result = apply_patch(patch_path, tmp, strip=1, expected_sha256=sha)
        overlay.patches.append(f"{pid}: {result.outcome}")
        log(f"  patch {pid}: {result.outcome} ({', '.join(result.files)})")
    shutil.rmtree(site, ignore_errors=True)
    os.replace(tmp, site)
    return overlay
