"""The host unpacker (``pinmatrix/shipped/unbundle.py``) in process, around DEST: parents made, this process's
own leftover staging folder replaced, a wheels DEST's unrelated ``index.json`` left alone, the lines said per image
file, and the ``--have`` hint only when ``--have`` was not given."""

from __future__ import annotations

import os
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
