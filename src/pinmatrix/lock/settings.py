"""How cells are locked: one settings object, built in one place from matrix.toml and the command line, used by
``pinmatrix lock`` and by ``build`` for the cells it finds without a lock, so both lock the same way."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pinmatrix.project.matrix_toml import Matrix


@dataclass(frozen=True)
class LockSettings:
    root: Path  # the project: its locks/ folder is written
    exclude_newer: str | None = None  # matrix.exclude_newer, handed to uv
    extra_ca: tuple[Path, ...] = ()  # matrix.ca_certificates that exist, trusted when reading the indexes' pages
    jobs: int = 4  # cells locked at once
    write: bool = True  # False: `lock --check`, nothing is written
    check_platforms: bool = True  # refuse a lock whose wheels do not meet the cell's platform (reads index pages)

    @classmethod
    def of(cls, matrix: Matrix, *, jobs: int = 4, write: bool = True) -> LockSettings:
        root = Path(matrix.root)
        return cls(root=root, exclude_newer=matrix.settings.exclude_newer,
                   extra_ca=tuple(p for p in (root / c for c in matrix.settings.ca_certificates) if p.exists()),
                   jobs=jobs, write=write)
