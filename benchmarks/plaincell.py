"""The cell a one-cell benchmark measures: the first cell of a stack without a patch, with what it needs around it."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from pinmatrix.cell import Cell
from pinmatrix.matrix.expand import select_cells
from pinmatrix.matrix.selection import expand_matrix
from pinmatrix.project.matrix_toml import load_matrix

SMALLEST = os.environ.get("PINMATRIX_BENCH_SMALLEST") == "1"  # python -m benchmarks --smallest
BASE_CACHE = os.environ.get("PINMATRIX_BENCH_BASE_CACHE")


def seeded(cache_dir: Path) -> Path:
    """``cache_dir``, holding the Debian bases kept under ``PINMATRIX_BENCH_BASE_CACHE`` when that is set (their
    records copied, their layers hard-linked): a benchmark's empty machine then makes no base. For runs whose
    figures are not the point (``--smallest``, the CI run of every benchmark); a timed base comes from mmdebstrap."""
    source = Path(BASE_CACHE) / "rootfs" if BASE_CACHE else None
    if source is None or not source.is_dir():
        return cache_dir
    target = cache_dir / "rootfs"
    target.mkdir(parents=True, exist_ok=True)
    for kept in source.iterdir():
        if kept.suffix in (".json", ".layer") and not (target / kept.name).exists():
            try:
                os.link(kept, target / kept.name)
            except OSError:
                shutil.copyfile(kept, target / kept.name)
    return cache_dir


@dataclass(frozen=True)
class PlainCell:
    root: Path  # the project (the working directory)
    cell: Cell
    extra_ca: tuple[Path, ...]  # the matrix's ca_certificates that exist here
    work_root: Path  # .pinmatrix/bench, made


def plain_cell(stack: str) -> PlainCell:
    root = Path(".").resolve()
    matrix = load_matrix(root / "matrix.toml")
    cells = select_cells(expand_matrix(matrix).cells, stack=stack)
    cell = next((c for c in cells if not c.patches_to_apply), cells[0])
    work_root = root / ".pinmatrix" / "bench"
    work_root.mkdir(parents=True, exist_ok=True)
    return PlainCell(root, cell, tuple(Path(p) for p in matrix.settings.ca_certificates if Path(p).exists()),
                     work_root)
