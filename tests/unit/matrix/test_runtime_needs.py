"""What a locked cell's base must carry at run time (data/runtime_needs.toml), checked by ``validate``."""

from __future__ import annotations

from pathlib import Path

import pytest

from pinmatrix.errors import MatrixError
from pinmatrix.matrix.selection import load, validate_matrix

REPO = Path(__file__).resolve().parents[3]
HASH = "a" * 64


def _matrix(tmp_path: Path, packages: str, stack_base: str = "") -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text(f"""
[matrix]
name = "t"
[matrix.base]
packages = {packages}
[stacks.jit]
gpu_required = false
smokes = ["host-probe"]
{stack_base}
[stacks.jit.packages]
triton = ["3.6.0"]
[stacks.plain]
gpu_required = false
smokes = ["host-probe"]
[stacks.plain.packages]
six = ["1.17.0"]
""")
    return path


def _lock(path: Path, stack: str, *names: str) -> str:
    _, expansion = load(path)
    (cell,) = [c for c in expansion.cells if c.stack == stack]
    (path.parent / "locks").mkdir(exist_ok=True)
    body = "".join(f"{n}==1.0 \\\n    --hash=sha256:{HASH}\n    # via -r requirements.in\n" for n in names)
    (path.parent / "locks" / f"{cell.id}.txt").write_text(f"# pinmatrix lock for cell {cell.id}: x\n{body}")
    return cell.id


def test_a_locked_triton_cell_without_a_compiler_is_one_located_line(tmp_path: Path) -> None:
    path = _matrix(tmp_path, '["python3", "ca-certificates"]')
    cell_id = _lock(path, "jit", "triton", "filelock")
    _lock(path, "plain", "six")
    with pytest.raises(MatrixError) as err:
        validate_matrix(path)
    (line,) = err.value.lines()
    assert line.startswith("matrix.toml:5: matrix.base.packages: cell " + cell_id)
    assert "locks triton" in line and "add gcc or clang; python3-dev or python3.13-dev; libc6-dev" in line
    assert "source: triton 3.6.0 python/triton/runtime/build.py" in line


def test_the_line_names_only_what_is_missing_and_points_at_the_stacks_own_base(tmp_path: Path) -> None:
    path = _matrix(tmp_path, '["python3"]', 'base = { packages = ["python3", "clang", "python3.13-dev"] }')
    _lock(path, "jit", "triton")
    with pytest.raises(MatrixError) as err:
        validate_matrix(path)
    (line,) = err.value.lines()
    assert line.startswith("matrix.toml:9: stacks.jit.base.packages: ")
    assert line.endswith(")") and ": add libc6-dev (" in line


def test_a_base_with_the_needs_a_cell_without_triton_or_without_a_lock_pass(tmp_path: Path) -> None:
    path = _matrix(tmp_path, '["python3"]', 'base = { packages = ["python3", "gcc", "python3-dev", "libc6-dev"] }')
    _lock(path, "jit", "triton")
    _lock(path, "plain", "six")  # matrix.base lacks a compiler, but no triton here
    validate_matrix(path)
    (tmp_path / "bare").mkdir()
    validate_matrix(_matrix(tmp_path / "bare", '["python3"]'))  # no lock yet: checked once locked


def test_the_shipped_triton_cells_bases_carry_the_needs() -> None:
    matrix, expansion = validate_matrix(REPO / "matrix.toml")
    h200 = [c for c in expansion.cells if c.stack == "h200"]
    assert h200 and all((REPO / "locks" / f"{c.id}.txt").is_file() for c in h200)
    for cell in h200 + [c for c in expansion.cells if c.stack == "xformers-tiled-matmul"]:
        assert {"gcc", "python3-dev", "libc6-dev"} <= set(cell.base.packages)
