"""The host unpacker (``pinmatrix/shipped/unbundle.py``) in process, around DEST: parents made, this process's
own leftover staging folder replaced, a wheels DEST's unrelated ``index.json`` left alone, the lines said per image
file, and the ``--have`` hint only when ``--have`` was not given."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_pack import Project, images, make_wheels_bundle, project  # noqa: F401

from pinmatrix.bundle.image import ImageRequest, bundle_image
from pinmatrix.shipped import unbundle as host


def test_dest_parents_made_and_an_own_leftover_staging_replaced(project: Project, tmp_path: Path) -> None:  # noqa: F811
    make_wheels_bundle(project, tmp_path / "b")
    dest = tmp_path / "x" / "y" / "dest"
    assert host.main([str(tmp_path / "b"), "--out", str(dest), "-q"]) == 0
    assert len([p for p in dest.iterdir() if p.name.endswith(".whl")]) == 4
    leftover = dest.parent / f".dest.unbundle-{os.getpid()}"
    (leftover / "junk").mkdir(parents=True)
    (dest / "index.json").write_text("not json")  # a wheels DEST's index.json is not read
    assert host.main([str(tmp_path / "b"), "--out", str(dest), "-q"]) == 0
    assert not leftover.exists() and (dest / "index.json").read_text() == "not json"


def test_image_files_said_as_blobs_and_the_have_hint(images: Any, tmp_path: Path,  # noqa: F811
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    layout, made = images
    plain, plain_blobs = made["plain"]
    bundle_image(ImageRequest(layout.root, plain, frozenset(), 5000, tmp_path / "b1"), lambda _line: None)
    capsys.readouterr()
    assert host.main([str(tmp_path / "b1"), "--check"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("file ")]
    assert len(said) == 5 and all(line.startswith(f"file {i}/5 blob sha256:") for i, line in enumerate(said, 1))
    assert host.main([str(tmp_path / "b1"), "--out", str(tmp_path / "host"), "-q"]) == 0
    int64, int64_blobs = made["int64"]
    bundle_image(ImageRequest(layout.root, int64, frozenset(plain_blobs), 5000, tmp_path / "b2"), lambda _line: None)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert host.main([str(tmp_path / "b2"), "--check", "-q", "--have", str(empty)]) == 2
    size = layout.blob_path(int64_blobs[1]).stat().st_size
    assert capsys.readouterr().err == (f"unbundle: refused: blob {int64_blobs[1]} ({size} bytes): not in the bundle "
                                       f"and not in {empty}\n")
    assert host.main([str(tmp_path / "b2"), "--check"]) == 2
    assert capsys.readouterr().err.endswith("not in DEST (pass --have LAYOUT: a layout that holds it)\n")


def test_the_shown_value_and_field_bounds_at_and_one_past() -> None:
    assert host._shown("a" * 78) == repr("a" * 78)  # 80 characters with its quotes: shown whole
    assert host._shown("a" * 79) == repr("a" * 79)[:77] + "..."
    assert host._text("a" * host.MAX_TEXT, "w") == "a" * host.MAX_TEXT
    with pytest.raises(host.Refused, match=r"^manifest.json: w: expected a string, got 'aaa"):
        host._text("a" * (host.MAX_TEXT + 1), "w")
    assert host._int(7, "w", 7) == 7
    with pytest.raises(host.Refused, match=r"^manifest.json: w: expected an integer from 0 to 7, got 8$"):
        host._int(8, "w", 7)
    assert host._list([1, 2], "w", lambda v, where: (v, where), 2) == [(1, "w[0]"), (2, "w[1]")]
    with pytest.raises(host.Refused, match=r"^manifest.json: w: expected a list of at most 2 entries$"):
        host._list([1, 2, 3], "w", lambda v, where: v, 2)
    with pytest.raises(host.Refused, match=r"^manifest.json: w.kind: expected one of wheels, image, got 'x'$"):
        host._object({"kind": "x"}, "w", {"kind": host._one_of("wheels", "image")})
    with pytest.raises(host.Refused, match=r"^manifest.json: w.a: unknown key$"):
        host._object({"b": 1, "a": 1}, "w", {})


def test_an_index_blobs_manifests_are_descriptors() -> None:
    digest = "sha256:" + "a" * 64
    assert host._descriptors({"manifests": [{"digest": digest, "size": 3}], "layers": "x"}, "w") == [(digest, 3)]
    for bad in ({"digest": "sha256:x", "size": 3}, {"digest": digest, "size": "3"}, {"size": 3}, "x"):
        with pytest.raises(host.Refused, match=r"^w: a descriptor without a sha256 digest and size$"):
            host._descriptors({"manifests": [bad]}, "w")


def test_asking_whether_a_process_lives_sends_it_nothing(tmp_path: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert host._alive(sleeper.pid)
        time.sleep(0.3)
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()
    lines: list[str] = []
    (tmp_path / ".dest.unbundle-999999999").write_text("a file, not a staging folder")
    (tmp_path / ".dest.unbundle-999999998").symlink_to(tmp_path)
    host.remove_stale_staging(tmp_path / "dest", lines.append)
    assert lines == [] and (tmp_path / ".dest.unbundle-999999999").is_file()
