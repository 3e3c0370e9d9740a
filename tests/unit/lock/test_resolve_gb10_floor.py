"""A lock below a wheel's platform floor is refused (no network: a PEP 691 index on 127.0.0.1). It is the shape of
vllm 0.20.0 on aarch64-manylinux_2_28: its wheels are manylinux_2_35 and it has an sdist, so uv resolves the lock
(metadata from the sdist) and only the image build would fail. pinmatrix refuses it at lock time, naming the
distribution and its wheels' tags and the floor that works; the same matrix at that floor locks."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pep691 import serve_pages

from pinmatrix.cli import main
from pinmatrix.matrix.selection import load
from pinmatrix.project.lockfile import lock_path


def _wheel(name: str, tag: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(f"{name}.py", "x = 1\n")
        zf.writestr(f"{name}-1.0.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        zf.writestr(f"{name}-1.0.dist-info/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n")
        zf.writestr(f"{name}-1.0.dist-info/RECORD", "")
    return buf.getvalue()


def _sdist(name: str) -> bytes:
    """Static metadata (2.2): uv reads it without building anything."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for member, text in {"PKG-INFO": f"Metadata-Version: 2.2\nName: {name}\nVersion: 1.0\n",
                             "pyproject.toml": f"[project]\nname = '{name}'\nversion = '1.0'\n"}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-1.0/{member}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _metadata(name: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name.split('-', 1)[0]}\nVersion: 1.0\n".encode()


def _project(files: dict[str, bytes]) -> bytes:
    """The JSON page; each wheel's METADATA is served beside it (PEP 658), as PyPI does."""
    entries = []
    for name, data in files.items():
        entry: dict[str, object] = {"filename": name, "url": f"/files/{name}",
                                    "hashes": {"sha256": hashlib.sha256(data).hexdigest()}}
        if name.endswith(".whl"):
            entry["core-metadata"] = {"sha256": hashlib.sha256(_metadata(name)).hexdigest()}
        entries.append(entry)
    return json.dumps({"meta": {"api-version": "1.0"}, "files": entries}).encode()


@pytest.fixture
def index() -> Iterator[str]:
    """'floorpkg' 1.0: manylinux_2_35 wheels (aarch64, x86_64) and an sdist; 'purepkg' 1.0: one py3-none-any."""
    floor = {f"floorpkg-1.0-py3-none-manylinux_2_35_{arch}.whl": _wheel("floorpkg", f"py3-none-manylinux_2_35_{arch}")
             for arch in ("aarch64", "x86_64")}
    floor["floorpkg-1.0.tar.gz"] = _sdist("floorpkg")
    pure = {"purepkg-1.0-py3-none-any.whl": _wheel("purepkg", "py3-none-any")}
    pages = {"/simple/floorpkg/": _project(floor), "/simple/purepkg/": _project(pure)}
    pages.update({f"/files/{name}": data for name, data in {**floor, **pure}.items()})
    pages.update({f"/files/{name}.metadata": _metadata(name) for name in {**floor, **pure} if name.endswith(".whl")})
    with serve_pages(pages) as base:
        yield f"{base}/simple"


MATRIX = """[matrix]
python = "3.13"
platform = "{platform}"
[[matrix.indexes]]
name = "local"
url = "{url}"
default = true
[stacks.floor]
gpu_required = false
[stacks.floor.packages]
floorpkg = ["1.0"]
purepkg = ["1.0"]
"""


def test_a_lock_below_a_wheels_platform_floor_is_refused(index: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "matrix.toml"
    path.write_text(MATRIX.format(platform="aarch64-manylinux_2_28", url=index))
    assert main(["lock", str(path)]) == 1
    err = capsys.readouterr().err
    assert ("the locked wheels do not meet the platform aarch64-manylinux_2_28: floorpkg==1.0 (its wheels: "
            "manylinux_2_35_aarch64, manylinux_2_35_x86_64); lock for aarch64-manylinux_2_35 or newer") in err
    assert "purepkg" not in err.split("do not meet", 1)[1]  # a wheel that meets the floor is not named
    (cell,) = load(path)[1].cells
    assert not lock_path(cell, tmp_path).exists(), "a refused lock must not be written"

    path.write_text(MATRIX.format(platform="aarch64-manylinux_2_35", url=index))
    assert main(["lock", str(path)]) == 0, capsys.readouterr().err
    (cell,) = load(path)[1].cells
    body = lock_path(cell, tmp_path).read_text()
    assert "floorpkg==1.0" in body and "purepkg==1.0" in body
