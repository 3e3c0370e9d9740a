"""Wheels laid out in image layers follow the wheel spec's schemes like pip: each file inside its scheme's
directory, never over what the venv layer owns (bin/python, pyvenv.cfg), RECORD checked (hashes and sizes),
duplicate zip names refused, and an unpacked-size budget that the disk check counts. Every hostile wheel is
made here and refused with one line naming the wheel and the file."""

from __future__ import annotations

import base64
import hashlib
import shutil
import tarfile
import warnings
import zipfile
from collections import namedtuple
from pathlib import Path

import pytest
from helpers import unpacked_size

from pinmatrix.index import install
from pinmatrix.index.install import InstallError, VenvLayout, install_wheel, unpack_budget
from pinmatrix.oci.layer import LayerWriter

LAYOUT = VenvLayout("3.13")
SITE = "opt/venv/lib/python3.13/site-packages"
META = {"tiny-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n",
        "tiny-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def make_wheel(path: Path, files: dict[str, bytes], *, record: dict[str, str] | None = None,
               extra: list[tuple[str, bytes]] = ()) -> Path:
    """A wheel holding ``files`` and ``extra`` (written even when a name repeats) with a RECORD of the right
    hashes, unless ``record`` overrides lines (name -> 'hash,size', '' to leave a file out)."""
    entries = {**files, **META}
    lines = []
    for name, data in entries.items():
        line = (record or {}).get(name, f"{_hash(data)},{len(data)}")
        if line != "":
            lines.append(f"{name},{line}")
    lines.append("tiny-1.0.dist-info/RECORD,,")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about a duplicate name: that is the point
        for name, data in entries.items():
            zf.writestr(name, data)
        for name, data in extra:
            zf.writestr(name, data)
        zf.writestr("tiny-1.0.dist-info/RECORD", "\n".join(lines) + "\n")
    return path


def lay_out(wheel: Path, tmp_path: Path, **kwargs: int) -> dict[str, tarfile.TarInfo]:
    writer = LayerWriter(tmp_path / "blobs", epoch=0)
    try:
        install_wheel(wheel, writer, LAYOUT, **kwargs)
    except BaseException:
        writer.abort()
        raise
    descriptor = writer.close()
    with tarfile.open(tmp_path / "blobs" / descriptor.digest.split(":")[1]) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_an_honest_wheel_lands_in_its_schemes(tmp_path: Path) -> None:
    script = b"#!python\nprint('hi')\n"
    wheel = make_wheel(tmp_path / "tiny-1.0-py3-none-any.whl", {
        "tiny.py": b"x = 1\n",
        "tiny-1.0.data/scripts/tiny-tool": script,
        "tiny-1.0.data/data/share/tiny/readme.txt": b"hello\n",
        "tiny-1.0.data/headers/tiny.h": b"int x;\n",
    })
    members = lay_out(wheel, tmp_path)
    assert f"{SITE}/tiny.py" in members
    assert "opt/venv/bin/tiny-tool" in members  # the shebang fixed: the stream was read twice from the start
    assert "opt/venv/share/tiny/readme.txt" in members
    assert "opt/venv/include/site/python3.13/tiny/tiny.h" in members
    assert f"{SITE}/tiny-1.0.dist-info/RECORD" in members and f"{SITE}/tiny-1.0.dist-info/INSTALLER" in members


@pytest.mark.parametrize(("name", "line"), [
    ("tiny-1.0.data/data/bin/python", "would replace /opt/venv/bin/python, which the venv owns"),
    ("tiny-1.0.data/data/bin/python3.13", "would replace /opt/venv/bin/python3.13, which the venv owns"),
    ("tiny-1.0.data/scripts/python3", "would replace /opt/venv/bin/python3, which the venv owns"),
    ("tiny-1.0.data/data/pyvenv.cfg", "would replace /opt/venv/pyvenv.cfg, which the venv owns"),
    ("tiny-1.0.data/data/lib64/evil.py", "would replace /opt/venv/lib64, which the venv owns"),
    ("../six.py", f"would be installed outside {SITE}"),
    ("tiny-1.0.data/purelib/../../../six.py", f"would be installed outside {SITE}"),
    ("tiny-1.0.data/platlib/../x.py", f"would be installed outside {SITE}"),
    ("tiny-1.0.data/scripts/../pyvenv.cfg", "would be installed outside opt/venv/bin"),
    ("tiny-1.0.data/headers/../../../../bin/x", "would be installed outside opt/venv/include/site/python3.13/tiny"),
    ("tiny-1.0.data/data/../../../etc/passwd", "would be installed outside opt/venv"),
])
def test_a_file_outside_its_scheme_or_over_the_venv_is_refused(tmp_path: Path, name: str, line: str) -> None:
    wheel = make_wheel(tmp_path / "tiny-1.0-py3-none-any.whl", {"tiny.py": b"x = 1\n", name: b"evil\n"})
    with pytest.raises(InstallError, match=r"^tiny-1\.0-py3-none-any\.whl: wheel file ") as err:
        lay_out(wheel, tmp_path)
    assert line in str(err.value)
    assert not [p for p in (tmp_path / "blobs").iterdir() if p.is_file()]  # nothing half-written kept


def test_two_files_for_one_path_are_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "tiny-1.0-py3-none-any.whl",
                       {"tiny.py": b"x = 1\n", "tiny-1.0.data/purelib/tiny.py": b"x = 2\n"})
    with pytest.raises(InstallError, match=rf"would be installed twice at /{SITE}/tiny\.py"):
        lay_out(wheel, tmp_path)


def test_a_name_twice_in_the_zip_is_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "tiny-1.0-py3-none-any.whl", {"tiny.py": b"x = 1\n"},
                       extra=[("tiny.py", b"import os\n")])
    with pytest.raises(InstallError, match=r"^tiny-1\.0-py3-none-any\.whl: the zip holds 'tiny\.py' more than once$"):
        lay_out(wheel, tmp_path)


@pytest.mark.parametrize(("record", "line"), [
    ({"tiny.py": f"{_hash(b'x = 2')},6"}, "RECORD: tiny.py: the file's sha256/size"),
    ({"tiny.py": f"{_hash(b'x = 1' + bytes([10]))},7"}, "RECORD: tiny.py: the file's sha256/size"),
    ({"tiny.py": "md5=abc,6"}, "RECORD: tiny.py: hash 'md5=abc' is not a sha256"),
    ({"tiny.py": ""}, "tiny.py is not mentioned in RECORD"),
    ({"tiny.py": ","}, "hash / size of tiny.py is not included in RECORD"),
])
def test_record_is_checked(tmp_path: Path, record: dict[str, str], line: str) -> None:
    wheel = make_wheel(tmp_path / "tiny-1.0-py3-none-any.whl", {"tiny.py": b"x = 1\n"}, record=record)
    with pytest.raises(InstallError, match=r"^tiny-1\.0-py3-none-any\.whl: ") as err:
        lay_out(wheel, tmp_path)
    assert line in str(err.value)


def test_a_wheel_that_unpacks_past_its_budget_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    big = b"\0" * (65 << 20)
    wheel = make_wheel(tmp_path / "tiny-1.0-py3-none-any.whl", {"tiny.py": b"x = 1\n", "tiny/zeros.bin": big})
    size = wheel.stat().st_size
    assert size < 1 << 20 and unpack_budget(size) == 64 << 20
    total = unpacked_size(wheel)
    assert total > 65 << 20
    with pytest.raises(InstallError, match=rf"it unpacks to {total} bytes, more than its budget of {64 << 20} "
                                           r"\(16x its size, at least 64 MiB\)"):
        lay_out(wheel, tmp_path)
    assert unpack_budget(10 << 20) == 160 << 20
    (tmp_path / "small").mkdir()
    small = make_wheel(tmp_path / "small" / "tiny-1.0-py3-none-any.whl", {"tiny.py": b"x = 1\n"})
    exact = unpacked_size(small)
    lay_out(small, tmp_path / "a", budget=exact)
    with pytest.raises(InstallError, match="more than its budget"):
        lay_out(small, tmp_path / "b", budget=exact - 1)


def test_the_disk_check_counts_the_unpacked_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = make_wheel(tmp_path / "tiny-1.0-py3-none-any.whl", {"tiny.py": b"x = 1\n" * 1000})
    total = unpacked_size(wheel)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, total - 1))
    with pytest.raises(InstallError, match=rf"it unpacks to {total} bytes, {total - 1} are free under "):
        lay_out(wheel, tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, total))
    lay_out(wheel, tmp_path)


def test_not_a_zip(tmp_path: Path) -> None:
    bad = tmp_path / "tiny-1.0-py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(InstallError, match=r"not a zip file"):
        unpacked_size(bad)
    with pytest.raises(InstallError, match=r"^tiny-1\.0-py3-none-any\.whl: cannot be installed: "):
        lay_out(bad, tmp_path)


def test_owned_paths() -> None:
    assert LAYOUT.owned() == ("opt/venv/bin/python", "opt/venv/bin/python3", "opt/venv/bin/python3.13",
                              "opt/venv/pyvenv.cfg", "opt/venv/lib64")
    assert install.UNPACK_RATIO == 16
