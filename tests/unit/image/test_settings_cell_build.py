"""image/settings.cell_build: how both build paths run one cell: the log, the failed-until-told result, a
PinmatrixError or OSError as the cell's one-line failure (never a traceback), the seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from pinmatrix.errors import PinmatrixError
from pinmatrix.image.settings import BuildSettings, cell_build
from pinmatrix.imageref import image_ref
from pinmatrix.matrix.selection import load

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def cell():  # type: ignore[no-untyped-def]
    return next(c for c in load(REPO / "matrix.toml")[1].cells if c.stack == "demo")


def test_a_block_that_finishes_keeps_its_status_and_log(tmp_path: Path, cell) -> None:  # type: ignore[no-untyped-def]
    settings = BuildSettings(logs_dir=tmp_path / "logs", registry="reg.example/p")
    kept: list[str] = []
    with cell_build(cell, settings, "# first {braces} stay as they are", keep=kept) as (result, note):
        assert result.status == "failed" and result.ref == image_ref(cell, "reg.example/p")
        note("# second")
        result.status = "built"
    assert result.status == "built" and result.reason in ("", None) and result.seconds >= 0
    assert result.log == tmp_path / "logs" / f"{cell.id}.log"
    assert result.log.read_text() == "# first {braces} stay as they are\n# second\n" and kept == [
        "# first {braces} stay as they are", "# second"]


@pytest.mark.parametrize(("error", "reason"), [
    (PinmatrixError("the lock names another cell"), "the lock names another cell"),
    (FileNotFoundError(2, "No such file or directory"), "FileNotFoundError: [Errno 2] No such file or directory"),
])
def test_a_failure_in_the_block_is_the_cells_one_line(tmp_path: Path, cell, error: Exception,  # type: ignore[no-untyped-def]
                                                       reason: str) -> None:
    settings = BuildSettings(logs_dir=tmp_path / "logs")
    with cell_build(cell, settings, "# start") as (result, note):
        result.status = "built"
        raise error
    assert (result.status, result.reason) == ("failed", reason)
    assert result.log.read_text() == f"# start\n# FAILED: {reason}\n"


def test_anything_else_is_not_swallowed(tmp_path: Path, cell) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ZeroDivisionError), cell_build(cell, BuildSettings(logs_dir=tmp_path), "# x"):
        1 / 0  # noqa: B018 - a bug in pinmatrix is a traceback, not a cell's failure
