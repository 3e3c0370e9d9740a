"""`smoke --wheels DIR`: the overlay installs a wheel only when its sha256 is one the cell's lock names for its
distribution (`smoke --wheels` installed every *.whl of the folder, a substituted or extra wheel included): each
other wheel is one line, the run is refused (exit 2) before anything is installed; the locked distributions the
folder does not carry are named; a matrix cell without a lock is refused, the host pseudo-cell is said unchecked."""

from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from pinmatrix.smoke.overlay import OverlayError, build_overlay


@dataclass(frozen=True)
class Target:
    id: str
    patches: tuple[object, ...] = ()


def wheel(folder: Path, name: str, version: str, body: str = "") -> Path:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(f"{name}/__init__.py", f"VERSION = {version!r}{body}\n")
        zf.writestr(f"{name}-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(f"{name}-{version}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{name}-{version}.dist-info/RECORD", "")
    path = folder / f"{name}-{version}-py3-none-any.whl"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())
    return path


def lock_for(root: Path, cell_id: str, *wheels: Path, extra: str = "") -> None:
    lines = []
    for w in wheels:
        name, version = w.name.split("-")[:2]
        lines.append(f"{name}=={version} \\\n    --hash=sha256:{hashlib.sha256(w.read_bytes()).hexdigest()}\n")
    (root / "locks").mkdir(parents=True, exist_ok=True)
    (root / "locks" / f"{cell_id}.txt").write_text("".join(lines) + extra)


def test_only_the_locks_wheels_are_installed_and_every_other_one_is_named(tmp_path: Path) -> None:
    good = wheel(tmp_path / "built", "alpha", "1.0")
    lock_for(tmp_path / "repo", "c0ffee000001", good, wheel(tmp_path / "built", "beta", "2.0"),
             extra="gamma==3.0 \\\n    --hash=sha256:" + "a" * 64 + "\n")
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / good.name).write_bytes(good.read_bytes())
    wheel(folder, "beta", "2.0", body="\nSUBSTITUTED = True")  # the lock's name and version, other bytes
    wheel(folder, "intruder", "0.1")
    said: list[str] = []
    with pytest.raises(OverlayError) as err:
        build_overlay(Target("c0ffee000001"), tmp_path / "ov", wheels_dir=folder, repo_root=tmp_path / "repo",
                      log=said.append)
    assert str(err.value) == (f"cell c0ffee000001: --wheels {folder}: 2 wheel(s) not the lock's (each named above): "
                              "nothing installed")
    refused = [line for line in said if line.startswith("  refused: ")]
    lock = tmp_path / "repo" / "locks" / "c0ffee000001.txt"
    beta = folder / "beta-2.0-py3-none-any.whl"
    assert refused == [
        f"  refused: {beta}: sha256:{hashlib.sha256(beta.read_bytes()).hexdigest()} is not a hash {lock} names for "
        "beta 2.0",
        f"  refused: {folder / 'intruder-0.1-py3-none-any.whl'}: intruder is not in {lock}: an extra wheel"]
    assert not (tmp_path / "ov").exists() or not list((tmp_path / "ov").rglob("*.py"))

    beta.unlink()
    (folder / "intruder-0.1-py3-none-any.whl").unlink()
    said.clear()
    overlay = build_overlay(Target("c0ffee000001"), tmp_path / "ov", wheels_dir=folder,
                            repo_root=tmp_path / "repo", log=said.append)
    assert overlay is not None and overlay.wheels == [good.name]
    assert (overlay.site / "alpha" / "__init__.py").is_file()
    assert [line for line in said if "not supplied" in line] == [
        f"  not supplied by {folder}: beta 2.0 (locked; the host's own, if any)",
        f"  not supplied by {folder}: gamma 3.0 (locked; the host's own, if any)"]


def test_a_matrix_cell_without_a_lock_is_refused_and_the_host_cell_is_said_unchecked(tmp_path: Path) -> None:
    folder = tmp_path / "wheels"
    wheel(folder, "alpha", "1.0")
    with pytest.raises(OverlayError, match=r"^cell c0ffee000002: --wheels .*: no lock .*c0ffee000002\.txt to check"):
        build_overlay(Target("c0ffee000002"), tmp_path / "ov", wheels_dir=folder, repo_root=tmp_path, log=print)
    said: list[str] = []
    overlay = build_overlay(Target("host"), tmp_path / "ov", wheels_dir=folder, repo_root=tmp_path, log=said.append)
    assert overlay is not None and overlay.wheels == ["alpha-1.0-py3-none-any.whl"]
    assert "  overlay for host: no lock (not a matrix cell): the 1 wheel(s) are not checked" in said
