"""Locks from uv, for real against the package index: hashes, byte-stable relock, a failing cell reported
with uv's reason while the others lock."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from pathlib import Path

import pytest

from pinmatrix.cli import main
from pinmatrix.errors import LockError
from pinmatrix.index.uv import find_uv
from pinmatrix.lock import resolve
from pinmatrix.lock.resolve import lock_cell, owners_path, read_owners, record_owner
from pinmatrix.lock.settings import LockSettings
from pinmatrix.matrix.selection import expand_matrix, load
from pinmatrix.project.lockfile import lock_path
from pinmatrix.project.matrix_toml import load_matrix

pytestmark = pytest.mark.network

MATRIX = """\
[matrix]
python = "3.13"
exclude_newer = "2026-11-01T00:00:00Z"
[stacks.tiny]
gpu_required = false
[stacks.tiny.packages]
six = ["1.16.0", "1.17.0"]
[stacks.broken]
gpu_required = false
[stacks.broken.packages]
six = ["1.16.0"]
idna = ["3.7"]
"""


def test_lock_hashes_relock_and_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 'broken' pins a six that the index does not have: uv must say so, and 'tiny' still locks.
    text = MATRIX.replace('six = ["1.16.0"]\nidna', 'six = ["1.99.99"]\nidna')
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    assert main(["lock", str(path)]) == 1
    err = capsys.readouterr().err
    assert "FAILED" in err and "1.99.99" in err and "2 locked, 1 failed" in err
    cells = expand_matrix(load_matrix(path)).cells
    tiny = [c for c in cells if c.stack == "tiny"]
    for cell in tiny:
        body = lock_path(cell, tmp_path).read_text()
        assert f"six=={cell.pins['six']}" in body
        assert "--hash=sha256:" in body
    before = {c.id: lock_path(c, tmp_path).read_bytes() for c in tiny}
    mtimes = {c.id: lock_path(c, tmp_path).stat().st_mtime_ns for c in tiny}
    assert main(["lock", str(path), "--stack", "tiny"]) == 0
    assert "unchanged" in capsys.readouterr().err
    for c in tiny:
        assert lock_path(c, tmp_path).read_bytes() == before[c.id]
        assert lock_path(c, tmp_path).stat().st_mtime_ns == mtimes[c.id]  # not even rewritten


def test_lock_targets_the_cells_platform_not_the_hosts(tmp_path: Path) -> None:
    # click needs colorama on Windows only: a lock for another platform than this Linux host must show it.
    text = """\
[matrix]
python = "3.13"
exclude_newer = "2026-11-01T00:00:00Z"
[stacks.win]
gpu_required = false
platform = "x86_64-pc-windows-msvc"
[stacks.win.packages]
click = ["8.1.7"]
[stacks.linux]
gpu_required = false
platform = "aarch64-manylinux_2_28"
[stacks.linux.packages]
click = ["8.1.7"]
"""
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    assert main(["lock", str(path)]) == 0
    cells = {c.stack: c for c in expand_matrix(load_matrix(path)).cells}
    win = lock_path(cells["win"], tmp_path).read_text()
    linux = lock_path(cells["linux"], tmp_path).read_text()
    assert "python 3.13 on aarch64-manylinux_2_28" in linux
    assert "colorama==" in win
    assert "colorama" not in linux


def test_shipped_demo_locks_are_current(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    shutil.copy(root / "matrix.toml", tmp_path / "matrix.toml")
    shutil.copytree(root / "patches", tmp_path / "patches")
    assert main(["lock", str(tmp_path / "matrix.toml"), "--stack", "demo"]) == 0
    for cell in expand_matrix(load_matrix(tmp_path / "matrix.toml")).cells:
        if cell.stack == "demo":
            assert lock_path(cell, tmp_path).read_bytes() == lock_path(cell, root).read_bytes()


# ---- the bookkeeping that needs no index: owners, finding uv, a cell with nothing to lock

def test_owners_file_is_written_sorted_one_key_per_line_and_only_when_it_changes(tmp_path: Path) -> None:
    assert read_owners(tmp_path) == {}
    record_owner(tmp_path, "b.toml", ["cc", "aa"], replace=True)
    record_owner(tmp_path, "a.toml", ["bb"], replace=True)
    path = owners_path(tmp_path)
    assert path == tmp_path / "locks" / "owners.json"
    assert path.read_text() == '{\n "a.toml": [\n  "bb"\n ],\n "b.toml": [\n  "aa",\n  "cc"\n ]\n}\n'
    # a partial lock adds to what the matrix owned; a full one replaces it
    record_owner(tmp_path, "b.toml", ["dd"], replace=False)
    assert read_owners(tmp_path)["b.toml"] == ["aa", "cc", "dd"]
    record_owner(tmp_path, "b.toml", ["dd"], replace=True)
    assert read_owners(tmp_path) == {"a.toml": ["bb"], "b.toml": ["dd"]}
    # nothing changes: the file is not written again
    os.utime(path, (1, 1))
    record_owner(tmp_path, "b.toml", ["dd"], replace=False)
    record_owner(tmp_path, "a.toml", ["bb"], replace=True)
    assert path.stat().st_mtime == 1


@pytest.mark.parametrize("text", ['["a.toml"]', '{"a.toml": "abc"}', "{not json"])
def test_an_owners_file_of_another_shape_is_one_line_naming_it(tmp_path: Path, text: str) -> None:
    path = owners_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(LockError) as err:
        read_owners(tmp_path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    if text.startswith("{not"):
        assert "cannot read the lock owners" in message
    else:
        assert message == f"{path}: not a lock owners file (expected {{matrix file: [cell ids]}})"


def test_find_uv_prefers_pinmatrix_own_environment_then_path_then_the_wheel(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "uv").write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "executable", str(venv / "python"))
    assert find_uv() == str(venv / "uv")
    (venv / "uv").unlink()
    on_path = tmp_path / "path"
    on_path.mkdir()
    (on_path / "uv").write_text("#!/bin/sh\n")
    (on_path / "uv").chmod(0o755)
    monkeypatch.setenv("PATH", str(on_path))
    assert find_uv() == str(on_path / "uv")
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    import uv

    monkeypatch.setattr(uv, "find_uv_bin", lambda: "/from/the/wheel/uv")
    assert find_uv() == "/from/the/wheel/uv"

    def missing() -> str:
        raise FileNotFoundError("no binary")

    monkeypatch.setattr(uv, "find_uv_bin", missing)
    with pytest.raises(LockError) as err:
        find_uv()
    assert str(err.value) == "uv is not installed: pip install uv (pinmatrix resolves locks with it)"


def test_a_cell_without_pip_requirements_is_not_locked(tmp_path: Path) -> None:
    cell = dataclasses.replace(load(Path(__file__).resolve().parents[2] / "matrix.toml")[1].cells[0], requirements=())
    result = lock_cell(cell, tmp_path, None, uv="/bin/false")
    assert (result.cell, result.path, result.ok) == (cell, lock_path(cell, tmp_path), False)
    assert result.reason == "the cell has no pip requirements to lock" and not result.path.exists()
    assert resolve.LockResult(cell, result.path, ok=False).changed is False


FAKE_UV = """#!{python}
import json, sys
from pathlib import Path
if sys.argv[1:] == ["--version"]:
    print("uv 0.0.0-fake")
    raise SystemExit(0)
Path({record!r}).open("a").write(json.dumps(sys.argv[1:]) + "\\n")
out = sys.argv[sys.argv.index("-o") + 1]
Path(out).write_text("six==1.16.0 \\\\\\n    --hash=sha256:" + "0" * 64 + "\\n")
"""


def test_lock_cells_passes_exclude_newer_and_the_uv_it_found_to_every_cell(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / "argv.jsonl"
    fake = tmp_path / "fake-uv"
    fake.write_text(FAKE_UV.format(python=sys.executable, record=str(record)))
    fake.chmod(0o755)
    monkeypatch.setattr(resolve, "find_uv", lambda: str(fake))
    cells = load(Path(__file__).resolve().parents[2] / "matrix.toml")[1].cells[:3]
    done: list[str] = []
    settings = LockSettings(tmp_path, exclude_newer="2024-06-01T00:00:00Z", jobs=2, check_platforms=False)
    results = resolve.lock_cells(cells, settings, on_done=lambda r: done.append(r.cell.id))
    assert [r.cell.id for r in results] == done == [c.id for c in cells] and all(r.ok and r.changed for r in results)
    calls = [__import__("json").loads(line) for line in record.read_text().splitlines()]
    assert len(calls) == 3 and all(c[c.index("--exclude-newer") + 1] == "2024-06-01T00:00:00Z" for c in calls)
    text = lock_path(cells[0], tmp_path).read_text()
    assert text.startswith(f"# pinmatrix lock for cell {cells[0].id}: ") and "# resolved by uv 0.0.0-fake\n" in text


FAKE_UV_ENV = """#!{python}
import json, os, sys
from pathlib import Path
if sys.argv[1:] == ["--version"]:
    print("uv 0.0.0-fake")
    raise SystemExit(0)
Path({record!r}).write_text(json.dumps({{"argv": sys.argv[1:], "cwd_files": sorted(os.listdir(".")),
    "downloads": os.environ.get("UV_PYTHON_DOWNLOADS"), "progress": os.environ.get("UV_NO_PROGRESS")}}))
if {fail!r}:
    print("warning: ignore me", file=sys.stderr)
    print("error: No solution found when resolving dependencies", file=sys.stderr)
    raise SystemExit(1)
Path(sys.argv[sys.argv.index("-o") + 1]).write_text("six==1.16.0 \\\\\\n    --hash=sha256:" + "1" * 64 + "\\n")
"""


def _fake_uv(tmp_path: Path, *, fail: bool = False) -> tuple[str, Path]:
    record = tmp_path / f"seen-{fail}.json"
    fake = tmp_path / f"uv-{fail}"
    fake.write_text(FAKE_UV_ENV.format(python=sys.executable, record=str(record), fail=fail))
    fake.chmod(0o755)
    return str(fake), record


def test_lock_cell_runs_uv_without_downloads_or_progress_and_reports_its_error(tmp_path: Path) -> None:
    import json as _json

    cell = load(Path(__file__).resolve().parents[2] / "matrix.toml")[1].cells[0]
    uv, seen = _fake_uv(tmp_path)
    first = lock_cell(cell, tmp_path, None, uv=uv)
    assert (first.ok, first.changed, first.path) == (True, True, lock_path(cell, tmp_path))
    got = _json.loads(seen.read_text())
    assert (got["downloads"], got["progress"]) == ("never", "1") and got["cwd_files"] == ["requirements.in"]
    assert got["argv"][:6] == ["pip", "compile", "requirements.in", "-o", "lock.txt", "--python-version"]
    again = lock_cell(cell, tmp_path, None, uv=uv)
    assert (again.ok, again.changed, again.path) == (True, False, lock_path(cell, tmp_path))
    bad_uv, _ = _fake_uv(tmp_path, fail=True)
    failed = lock_cell(cell, tmp_path, None, uv=bad_uv)
    assert (failed.ok, failed.path, failed.reason) == (False, lock_path(cell, tmp_path),
                                                       "error: No solution found when resolving dependencies")


def test_uv_command_names_the_default_index_and_each_extra_index(tmp_path: Path) -> None:
    from pinmatrix.cell import IndexSpec

    cell = load(Path(__file__).resolve().parents[2] / "matrix.toml")[1].cells[0]
    cell = dataclasses.replace(cell, indexes=(IndexSpec("mirror", "https://mirror.example/simple", default=True),
                                              IndexSpec("extra", "https://extra.example/simple")))
    cmd = resolve.uv_command(cell, Path("req.in"), Path("out.txt"), None, "uv")
    assert cmd[-4:] == ["--default-index", "https://mirror.example/simple", "--index", "https://extra.example/simple"]
    assert cmd[:6] == ["uv", "pip", "compile", "req.in", "-o", "out.txt"] and "--exclude-newer" not in cmd
