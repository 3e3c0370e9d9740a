"""pinmatrix.index.install laid out and read back: the venv layer's own entries, a wheel's files in their schemes
with their modes (executable only for a regular file with an x bit), entry-point scripts, INSTALLER, and a
RECORD whose every line names a file of the layer with its sha256 and size; RECORD's hashes and sizes checked
as each file streams, and a broken wheel named in one line."""

from __future__ import annotations

import base64
import hashlib
import io
import posixpath
import tarfile
import zipfile
from pathlib import Path

import pytest
from installer.utils import Scheme

from pinmatrix.index.install import InstallError, TarDestination, VenvLayout, _SizedStream, install_wheel
from pinmatrix.oci.compression import LayerCompression
from pinmatrix.oci.layer import LayerWriter

LAYOUT = VenvLayout("3.13")
SITE = "opt/venv/lib/python3.13/site-packages"
DIST = "tiny-1.0.dist-info"
META = {f"{DIST}/METADATA": (b"Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n", 0o100644),
        f"{DIST}/WHEEL": (b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n", 0o100644)}


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def _wheel(path: Path, files: dict[str, tuple[bytes, int]], *, record: dict[str, str] | None = None,
           unlisted: tuple[str, ...] = ()) -> Path:
    """A wheel of ``files`` (name -> (bytes, zip mode)); RECORD lists each with its hash and size unless
    ``record`` gives the line's 'hash,size'; names in ``unlisted`` are in the zip but not in RECORD."""
    entries = {**files, **META}
    lines = [f"{name},{(record or {}).get(name, f'{_hash(data)},{len(data)}')}"
             for name, (data, _) in entries.items() if name not in unlisted and not name.endswith("/")]
    lines.append(f"{DIST}/RECORD,,")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, (data, mode) in entries.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            zf.writestr(info, data)
        zf.writestr(f"{DIST}/RECORD", "\n".join(lines) + "\n")
    return path


def _layer(tmp_path: Path, fill) -> tuple[dict[str, tarfile.TarInfo], dict[str, bytes]]:  # noqa: ANN001
    writer = LayerWriter(tmp_path / "blobs", epoch=0, compression=LayerCompression("none", 0))
    fill(writer)
    descriptor = writer.close()
    with tarfile.open(tmp_path / "blobs" / descriptor.digest.split(":")[1]) as tar:
        members = {m.name: m for m in tar.getmembers()}
        data = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isreg()}  # type: ignore[union-attr]
    return members, data


def test_the_venv_layer_holds_the_interpreter_links_and_its_config(tmp_path: Path) -> None:
    members, data = _layer(tmp_path, LAYOUT.write_venv)
    links = {n: m.linkname for n, m in members.items() if m.issym()}
    assert links == {"opt/venv/bin/python": "/usr/bin/python3.13", "opt/venv/bin/python3": "python",
                     "opt/venv/bin/python3.13": "python", "opt/venv/lib64": "lib"}
    dirs = {n for n, m in members.items() if m.isdir()}
    assert {"opt/venv/bin", "opt/venv/include", SITE} <= dirs
    assert data == {"opt/venv/pyvenv.cfg": b"home = /usr/bin\ninclude-system-site-packages = false\n"
                                           b"version = 3.13\nexecutable = /usr/bin/python3.13\n"}
    assert set(LAYOUT.owned()) == set(links) | {"opt/venv/pyvenv.cfg"}


def test_a_wheel_is_laid_out_with_its_modes_scripts_installer_and_a_true_record(tmp_path: Path) -> None:
    big = bytes(range(256)) * 5000  # more than one read of the layer's copy buffer
    wheel = _wheel(tmp_path / "tiny-1.0-py3-none-any.whl", {
        "tiny/__init__.py": (b"x = 1\n", 0o100644),
        "tiny/data.bin": (big, 0o100644),
        "tiny/dir/": (b"", 0o040755),
        "tiny/link": (b"target", 0o120777),  # a symlink's mode: not a regular file, never executable
        "tiny/nomode.py": (b"y = 2\n", 0),
        "tiny/run.sh": (b"#!/bin/sh\necho hi\n", 0o100755),
        "tiny/other-x.sh": (b"#!/bin/sh\n", 0o100001),  # executable by others only: still executable
        "tiny/other-w.txt": (b"w\n", 0o100002),
        f"{DIST}/entry_points.txt": (b"[console_scripts]\ntiny-cli = tiny.cli:main\n", 0o100644),
        f"{DIST}/RECORD.jws": (b"signature", 0o100644),
        f"{DIST}/RECORD.p7s": (b"signature", 0o100644),
        "tiny-1.0.data/scripts/tool": (b"#!python\nprint('tool')\n", 0o100755),
        "tiny-1.0.data/headers/tiny.h": (b"int x;\n", 0o100644),
    }, unlisted=(f"{DIST}/RECORD.jws", f"{DIST}/RECORD.p7s"))

    members, data = _layer(tmp_path, lambda w: install_wheel(wheel, w, LAYOUT))
    files = {n: m.mode for n, m in members.items() if m.isreg()}
    executable = {n for n, mode in files.items() if mode & 0o111}
    assert executable == {f"{SITE}/tiny/run.sh", f"{SITE}/tiny/other-x.sh", "opt/venv/bin/tool", "opt/venv/bin/tiny-cli"}
    assert all(mode in (0o644, 0o755) for mode in files.values())
    assert data[f"{SITE}/tiny/data.bin"] == big
    script = data["opt/venv/bin/tiny-cli"].decode()
    assert script.startswith("#!/opt/venv/bin/python\n") and "from tiny.cli import main" in script
    # a .data/scripts file's #!python names the venv's interpreter, as pip writes it (RECORD lists it so, below)
    assert data["opt/venv/bin/tool"] == b"#!/opt/venv/bin/python\nprint('tool')\n"
    assert data[f"{SITE}/{DIST}/INSTALLER"] == b"pinmatrix\n"
    assert "opt/venv/include/site/python3.13/tiny/tiny.h" in files
    assert f"{SITE}/tiny/dir" not in files

    record = data[f"{SITE}/{DIST}/RECORD"].decode().splitlines()
    listed: dict[str, tuple[str, str]] = {}
    for line in record:
        path, digest, size = line.rsplit(",", 2)
        listed[posixpath.normpath(posixpath.join(SITE, path))] = (digest, size)
    assert set(listed) == set(files)
    for name, (digest, size) in listed.items():
        if name == f"{SITE}/{DIST}/RECORD":
            assert (digest, size) == ("", "")
        else:
            assert (digest, size) == (_hash(data[name]), str(len(data[name]))), name
    assert "../../../bin/tiny-cli" in {line.split(",")[0] for line in record}


def _refused(tmp_path: Path, wheel: Path) -> str:
    with pytest.raises(InstallError) as err:
        _layer(tmp_path, lambda w: install_wheel(wheel, w, LAYOUT))
    return str(err.value)


def test_a_record_hash_may_keep_its_padding(tmp_path: Path) -> None:
    body = b"x = 1\n"
    padded = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(body).digest()).decode()
    assert padded.endswith("=")
    wheel = _wheel(tmp_path / "tiny-1.0-py3-none-any.whl", {"tiny.py": (body, 0o100644)},
                   record={"tiny.py": f"{padded},{len(body)}"})
    _, data = _layer(tmp_path, lambda w: install_wheel(wheel, w, LAYOUT))
    assert data[f"{SITE}/tiny.py"] == body


def test_a_record_line_that_lies_is_quoted_bounded(tmp_path: Path) -> None:
    body = b"x = 1\n"
    value, size = "A" * 80, "9" * 30
    wheel = _wheel(tmp_path / "tiny-1.0-py3-none-any.whl", {"tiny.py": (body, 0o100644)},
                   record={"tiny.py": f"sha256={value},{size}"})
    got = _hash(body).split("=", 1)[1]
    assert _refused(tmp_path, wheel) == (f"tiny-1.0-py3-none-any.whl: RECORD: tiny.py: the file's sha256/size ({got}, "
                                         f"{len(body)}) are not RECORD's ({value[:60]}, {size[:20]})")


def test_a_record_hash_with_a_character_more_is_refused(tmp_path: Path) -> None:
    body = b"x = 1\n"
    wheel = _wheel(tmp_path / "tiny-1.0-py3-none-any.whl", {"tiny.py": (body, 0o100644)},
                   record={"tiny.py": f"{_hash(body)}X,{len(body)}"})
    assert "are not RECORD's" in _refused(tmp_path, wheel)


def test_a_record_hash_that_is_not_sha256_is_quoted_bounded(tmp_path: Path) -> None:
    body = b"x = 1\n"
    hash_text = "md5=" + "B" * 60
    wheel = _wheel(tmp_path / "tiny-1.0-py3-none-any.whl", {"tiny.py": (body, 0o100644)},
                   record={"tiny.py": f"{hash_text},{len(body)}"})
    assert _refused(tmp_path, wheel) == (f"tiny-1.0-py3-none-any.whl: RECORD: tiny.py: hash {hash_text[:40]!r} is not "
                                         "a sha256")


def test_a_wheel_the_installer_cannot_read_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "tiny-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{DIST}/METADATA", META[f"{DIST}/METADATA"][0])
        zf.writestr(f"{DIST}/RECORD", f"{DIST}/METADATA,{_hash(META[f'{DIST}/METADATA'][0])},"
                                      f"{len(META[f'{DIST}/METADATA'][0])}\n{DIST}/RECORD,,\n")
    line = _refused(tmp_path, path)
    assert line.startswith("tiny-1.0-py3-none-any.whl: cannot be installed: KeyError: ") and "\n" not in line


@pytest.mark.parametrize("path", ["a\0b.py", "tiny\\..\\evil.py", "..\\evil.py"])
def test_a_path_with_a_nul_or_a_backslash_is_refused(tmp_path: Path, path: str) -> None:
    writer = LayerWriter(tmp_path / "blobs", epoch=0)
    try:
        destination = TarDestination(writer, LAYOUT, "tiny")
        with pytest.raises(InstallError) as err:
            destination._target(Scheme("purelib"), path)
        assert str(err.value) == f"wheel file {path!r} (purelib) would be installed outside {SITE}"
    finally:
        writer.abort()


def test_a_sized_stream_counts_and_hashes_what_is_read_and_starts_again_on_seek() -> None:
    data = b"line one\nline two\n"
    sized = _SizedStream(io.BytesIO(data), len(data), "f", (_hash(data), str(len(data))))
    assert sized.readline() == b"line one\n" and sized.count == 9
    assert sized.readline() == b"line two\n" and sized.count == 18
    assert sized.seek(0) == 0 and sized.count == 0
    assert sized.readline() == b"line one\n" and sized.count == 9
    assert sized.read(4) == b"line" and sized.count == 13
    assert sized.seek(0) == 0 and sized.count == 0
    assert sized.readline(4) == b"line" and sized.read() == b" one\nline two\n"
    assert sized.count == len(data) and sized.sha.digest() == hashlib.sha256(data).digest()
    sized.check()
    for offset, whence in ((1, 0), (0, 1), (0, 2)):
        with pytest.raises(InstallError, match=r"^f: unexpected seek$"):
            sized.seek(offset, whence)
    with pytest.raises(InstallError, match=r"^f: unexpected seek$"):
        sized.seek(3)
