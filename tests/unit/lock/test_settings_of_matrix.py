"""lock/settings: `lock` and `build` (for cells without a lock) lock with one settings object built from
matrix.toml, so build's locks are checked against the cells' platforms exactly like `pinmatrix lock`'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pinmatrix.index.wheel_index import WheelFetcher
from pinmatrix.lock import resolve
from pinmatrix.lock.resolve import LockResult
from pinmatrix.lock.settings import LockSettings
from pinmatrix.matrix.selection import load

MATRIX = """
[matrix]
name = "demo"
python = "3.13"
platform = "x86_64-manylinux_2_28"
exclude_newer = "2026-01-02T00:00:00Z"
ca_certificates = ["certs/a.pem", "certs/absent.pem"]

[stacks.demo]
gpu_required = false
[stacks.demo.packages]
six = ["1.16.0", "1.17.0"]
"""


def test_settings_come_from_the_matrix_with_the_command_lines_jobs_and_check(tmp_path: Path) -> None:
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "a.pem").write_text("x")
    (tmp_path / "matrix.toml").write_text(MATRIX)
    matrix, _ = load(tmp_path / "matrix.toml")
    settings = LockSettings.of(matrix, jobs=3, write=False)
    assert settings == LockSettings(root=tmp_path, exclude_newer="2026-01-02T00:00:00Z",
                                    extra_ca=(tmp_path / "certs" / "a.pem",), jobs=3, write=False,
                                    check_platforms=True)
    assert LockSettings.of(matrix) == LockSettings(tmp_path, "2026-01-02T00:00:00Z", (tmp_path / "certs" / "a.pem",))


@pytest.mark.parametrize("check", [True, False])
def test_every_cell_is_locked_with_the_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, check: bool) -> None:
    (tmp_path / "matrix.toml").write_text(MATRIX.replace('ca_certificates = ["certs/a.pem", "certs/absent.pem"]', ""))
    matrix, expansion = load(tmp_path / "matrix.toml")
    calls: list[tuple[Any, ...]] = []

    def lock_cell(cell: Any, root: Path, exclude_newer: str | None, uv: str | None, fetcher: Any, *,
                  write: bool) -> LockResult:
        calls.append((cell.id, root, exclude_newer, uv, type(fetcher), write))
        return LockResult(cell, root / f"{cell.id}.txt", ok=True)

    monkeypatch.setattr(resolve, "lock_cell", lock_cell)
    monkeypatch.setattr(resolve, "find_uv", lambda: "/the/uv")
    settings = LockSettings(tmp_path, "2026-01-02T00:00:00Z", jobs=1, write=not check, check_platforms=check)
    done: list[str] = []
    results = resolve.lock_cells(expansion.cells, settings, on_done=lambda r: done.append(r.cell.id))
    ids = [c.id for c in expansion.cells]
    assert len(ids) == 2 and [r.cell.id for r in results] == done == ids
    assert calls == [(i, tmp_path, "2026-01-02T00:00:00Z", "/the/uv", WheelFetcher if check else type(None),
                      not check) for i in ids]
