"""The host's unpack step (``pinmatrix/shipped/unbundle.py``) called in this process through its ``main``, under
its package name, as mutation testing needs (a child run with ``python -I -S``, as ``test_pack.py`` does, is the
bare host; these are the same rules seen from inside): wheels and image bundles unpacked, checked only, or
refused in one line with DEST as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_pack import Project, images, make_wheels_bundle, project  # noqa: F401

from pinmatrix.bundle.image import ImageRequest, bundle_image
from pinmatrix.oci.layout import OCILayout
from pinmatrix.shipped import unbundle as host


def _main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = host.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, _, err = _main(capsys, *argv)
    lines = [line for line in err.splitlines() if line.startswith("unbundle: ")]
    assert code == 2 and len(lines) == 1, err
    return lines[0]


def test_wheels_unpacked_checked_and_summed_up(project: Project, tmp_path: Path,  # noqa: F811
                                               capsys: pytest.CaptureFixture[str]) -> None:
    manifest = make_wheels_bundle(project, tmp_path / "b")
    sha = host.read_manifest(tmp_path / "b")["sha256"]
    code, out, err = _main(capsys, str(tmp_path / "b"), "--out", str(tmp_path / "dest"), "--json")
    assert code == 0
    assert json.loads(out) == {"kind": "wheels", "dest": str((tmp_path / "dest").absolute()), "files": 4,
                               "bytes": manifest.total_size, "cell_id": project.cell.id, "manifest_sha256": sha}
    names = [w.filename for w in manifest.wheels or []]
    assert [line for line in err.splitlines() if line.startswith("file ")] == [
        f"file {i}/4 {name}: {w.size} bytes, sha256 ok" for i, (name, w) in enumerate(zip(names, manifest.wheels or []),
                                                                                    1)]
    assert sorted(os.listdir(tmp_path / "dest")) == sorted(names)
    assert all((tmp_path / "dest" / n).read_bytes() == project.wheels[n] for n in names)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    code, out, err = _main(capsys, str(tmp_path / "b"), "--check", "--quiet", "--manifest-sha256", sha)
    assert (code, err) == (0, "")
    assert out == f"wheels bundle checked: 4 file(s), {manifest.total_size} bytes; manifest sha256 {sha}\n"
    code, out, _ = _main(capsys, str(tmp_path / "b"), "--out", str(tmp_path / "dest"), "-q")  # again: replaced
    assert out == (f"wheels bundle unpacked into {(tmp_path / 'dest').absolute()}: 4 file(s), {manifest.total_size} "
                   f"bytes; manifest sha256 {sha} (not compared: pass --manifest-sha256, or use `pinmatrix unbundle "
                   "--key`)\n")


def test_the_arguments_are_checked_first(project: Project, tmp_path: Path,  # noqa: F811
                                         capsys: pytest.CaptureFixture[str]) -> None:
    make_wheels_bundle(project, tmp_path / "b")
    for argv in ([str(tmp_path / "b")], [str(tmp_path / "b"), "--check", "--out", "x"],
                 [str(tmp_path / "b"), "--check", "--manifest-sha256", "ABC"]):
        with pytest.raises(SystemExit) as exit_:
            host.main(argv)
        assert exit_.value.code == 2
    capsys.readouterr()
    line = _refused(capsys, str(tmp_path / "b"), "--check", "--manifest-sha256", "0" * 64)
    assert line.startswith("unbundle: refused: ") and "0" * 64 in line
    assert _refused(capsys, str(tmp_path / "b"), "--out", str(tmp_path / "d"), "--have", str(tmp_path)) == (
        "unbundle: refused: --have is for image bundles: a wheels bundle ships every wheel it lists")


def test_a_dest_that_is_a_file_or_holds_other_wheels_is_refused_and_left(project: Project, tmp_path: Path,  # noqa: F811
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    make_wheels_bundle(project, tmp_path / "b")
    (tmp_path / "file").write_text("x")
    assert _refused(capsys, str(tmp_path / "b"), "--out", str(tmp_path / "file")) == (
        f"unbundle: refused: {tmp_path / 'file'}: exists and is not a folder")
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "zzz-1.0-py3-none-any.whl").write_text("x")
    (dest / "aaa-1.0-py3-none-any.whl").write_text("x")
    assert _refused(capsys, str(tmp_path / "b"), "--out", str(dest)) == (
        f"unbundle: refused: {dest}: holds 2 wheel(s) this bundle does not (aaa-1.0-py3-none-any.whl): `smoke "
        "--wheels` would install those too; unpack into an empty folder")
    assert sorted(os.listdir(dest)) == ["aaa-1.0-py3-none-any.whl", "zzz-1.0-py3-none-any.whl"]


def test_a_bad_part_is_one_line_naming_it(project: Project, tmp_path: Path,  # noqa: F811
                                          capsys: pytest.CaptureFixture[str]) -> None:
    manifest = make_wheels_bundle(project, tmp_path / "b")
    part = tmp_path / "b" / manifest.parts[1].name
    data = bytearray(part.read_bytes())
    data[7] ^= 1
    part.write_bytes(bytes(data))
    line = _refused(capsys, str(tmp_path / "b"), "--out", str(tmp_path / "dest"))
    assert str(part) in line and "tampered part" in line
    part.write_bytes(bytes(data[:-1]))
    assert "truncated part" in _refused(capsys, str(tmp_path / "b"), "--check")
    extra = tmp_path / "b" / "part-999-of-999.bin"
    part.write_bytes(bytes(data))
    extra.write_bytes(b"x")
    assert str(extra) in _refused(capsys, str(tmp_path / "b"), "--check")
    assert not (tmp_path / "dest").exists()


def test_a_stale_staging_folder_of_a_gone_process_is_removed(project: Project, tmp_path: Path,  # noqa: F811
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    make_wheels_bundle(project, tmp_path / "b")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # a process still running
    try:
        gone, alive = tmp_path / ".dest.unbundle-999999999", tmp_path / f".dest.unbundle-{sleeper.pid}"
        for folder in (gone, alive):
            (folder / "x").mkdir(parents=True)
        (tmp_path / ".other.unbundle-999999999").mkdir()
        code, _, err = _main(capsys, str(tmp_path / "b"), "--out", str(tmp_path / "dest"))
        assert code == 0
        assert f"removed {gone}: the staging folder of an unpack whose process 999999999 is gone" in err.splitlines()
        assert not gone.exists() and alive.exists() and (tmp_path / ".other.unbundle-999999999").exists()
        assert host._alive(sleeper.pid) and not host._alive(999999999) and not host._alive(1 << 70)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_an_image_into_a_layout_with_the_blobs_it_left_out(images: Any, tmp_path: Path,  # noqa: F811
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    layout, made = images
    plain, plain_blobs = made["plain"]
    bundle_image(ImageRequest(layout.root, plain, frozenset(), 5000, tmp_path / "b1"), lambda _line: None)
    code, out, _ = _main(capsys, str(tmp_path / "b1"), "--out", str(tmp_path / "host"), "--json")
    assert code == 0
    summary = json.loads(out)
    assert (summary["kind"], summary["image"], summary["reused"], summary["files"]) == ("image", plain, 0, 5)
    back = OCILayout(tmp_path / "host")
    stored = back.image("reg/h200:plain")
    assert stored is not None and stored.digest == plain
    assert all(back.read_blob(d) == layout.read_blob(d) for d in plain_blobs)
    assert (tmp_path / "host" / "oci-layout").read_text() == '{"imageLayoutVersion":"1.0.0"}'
    int64, int64_blobs = made["int64"]
    bundle_image(ImageRequest(layout.root, int64, frozenset(plain_blobs), 5000, tmp_path / "b2"), lambda _line: None)
    line = _refused(capsys, str(tmp_path / "b2"), "--out", str(tmp_path / "elsewhere"))
    size = layout.blob_path(int64_blobs[1]).stat().st_size
    assert line == (f"unbundle: refused: blob {int64_blobs[1]} ({size} bytes): not in the bundle and not in "
                    f"{tmp_path / 'elsewhere'} (pass --have LAYOUT: a layout that holds it)")
    code, out, _ = _main(capsys, str(tmp_path / "b2"), "--check", "--have", str(tmp_path / "host"), "-q")
    assert code == 0 and out.startswith("image bundle checked: 2 file(s), ") and ", 4 blob(s) already present" in out
    code, _, _ = _main(capsys, str(tmp_path / "b2"), "--out", str(tmp_path / "elsewhere"), "--have",
                       str(tmp_path / "host"))
    assert code == 0
    there = OCILayout(tmp_path / "elsewhere")
    image = there.image("reg/h200:int64")
    assert image is not None and there.missing_blobs(image) == []
    code, _, _ = _main(capsys, str(tmp_path / "b2"), "--out", str(tmp_path / "host"), "--have", str(tmp_path / "host"))
    assert code == 0 and sorted(i.ref for i in OCILayout(tmp_path / "host").images()) == ["reg/h200:int64",
                                                                                         "reg/h200:plain"]
