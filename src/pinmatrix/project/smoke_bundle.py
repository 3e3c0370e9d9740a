"""What of the smokes travels into a cell: the catalogue's files (``smoke/``) and the in-cell runtime they
import (``_smokelib.py``, ``_oracles.py``), which ships with pinmatrix as package data in ``pinmatrix/shipped/``
(standard library only; see its README). Images, Containerfile contexts and k8s ConfigMaps carry both side by
side; host and container runs put the runtime on ``PYTHONPATH``."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from pinmatrix.project.catalogue import SmokeError

SMOKE_RUNTIME = ("_smokelib.py", "_oracles.py")


def shipped_dir() -> Path:
    """The shipped in-cell runtime folder (package data: a real folder in every install pinmatrix supports)."""
    folder = Path(str(resources.files("pinmatrix").joinpath("shipped")))
    if not (folder / "_smokelib.py").is_file():
        raise SmokeError(f"{folder}: the in-cell runtime is missing from this pinmatrix install")
    return folder


def shipped_file(name: str) -> Path:
    """One file of the in-cell runtime: ``apply_patches.py``, ``pod_runner.py``, ``_smokelib.py``."""
    return shipped_dir() / name


def smoke_files(smoke_dir: Path) -> list[Path]:
    """The catalogue's own files, sorted, without bytecode."""
    if not smoke_dir.is_dir():
        return []
    return sorted(p for p in smoke_dir.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def smoke_bundle(smoke_dir: Path) -> list[tuple[str, Path]]:
    """(name inside the cell's smoke folder, file) for the catalogue and the runtime, sorted by name. A
    catalogue file named like a runtime file is refused: which one the smokes import would depend on order."""
    runtime = shipped_dir()
    bundle = {p.relative_to(smoke_dir).as_posix(): p for p in smoke_files(smoke_dir)}
    for name in SMOKE_RUNTIME:
        if name in bundle:
            raise SmokeError(f"{bundle[name]}: {name} ships with pinmatrix ({runtime / name}); remove this copy "
                             "from the smoke catalogue")
        bundle[name] = runtime / name
    return sorted(bundle.items())
