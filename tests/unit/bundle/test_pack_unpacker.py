"""The host's unpack script (src/pinmatrix/shipped/unbundle.py, standard library only) against a hostile transfer
folder: a FIFO in place of manifest.json or lock.txt is refused in one line (it hung the unpacker), a link in place
of a part or the manifest is not followed, and the staging folder of an unpack killed with -9 is removed by the
next run (each run removed only its own pid's, so a killed one stayed beside DEST for good)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_pack import Project, make_wheels_bundle, project, refusal, unbundle  # noqa: F401 - the fixture


@pytest.mark.parametrize("name", ["manifest.json", "lock.txt"])
def test_a_fifo_in_place_of_the_manifest_or_the_lock_is_refused(project: Project, tmp_path: Path,  # noqa: F811
                                                                name: str) -> None:
    make_wheels_bundle(project, tmp_path / "b")
    (tmp_path / "b" / name).unlink()
    os.mkfifo(tmp_path / "b" / name)
    line = refusal(unbundle(tmp_path / "b", "--out", str(tmp_path / "dest")))  # within the helper's timeout
    assert line == (f"unbundle: refused: {tmp_path / 'b' / name}: not a regular file (a FIFO, device or folder): "
                    f"refused as {'a manifest' if name == 'manifest.json' else 'the lock'}")
    assert not (tmp_path / "dest").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".dest")]


def test_a_link_in_place_of_the_manifest_is_not_followed(project: Project, tmp_path: Path) -> None:  # noqa: F811
    make_wheels_bundle(project, tmp_path / "b")
    real = tmp_path / "elsewhere.json"
    (tmp_path / "b" / "manifest.json").rename(real)
    (tmp_path / "b" / "manifest.json").symlink_to(real)
    line = refusal(unbundle(tmp_path / "b", "--check"))
    assert line == f"unbundle: refused: {tmp_path / 'b' / 'manifest.json'}: a symbolic link: refused as a manifest"


def test_a_killed_unpacks_staging_folder_is_removed_by_the_next_run(project: Project, tmp_path: Path) -> None:  # noqa: F811
    make_wheels_bundle(project, tmp_path / "b")
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    stale = tmp_path / f".dest.unbundle-{victim.pid}"  # what an unpack killed with -9 leaves
    (stale / "sub").mkdir(parents=True)
    (stale / "alpha-1.0-py3-none-any.whl").write_bytes(b"x" * 4096)
    alive = tmp_path / f".dest.unbundle-{os.getpid()}"  # a running unpack's (this process is alive): kept
    alive.mkdir()
    done = unbundle(tmp_path / "b", "--out", str(tmp_path / "dest"))
    assert done.returncode == 0, done.stderr
    assert not stale.exists() and alive.is_dir()
    assert f"removed {stale}: the staging folder of an unpack whose process {victim.pid} is gone" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".dest")) == [alive.name]


def test_the_summary_names_the_manifests_sha256(project: Project, tmp_path: Path) -> None:  # noqa: F811
    import hashlib

    make_wheels_bundle(project, tmp_path / "b")
    sha = hashlib.sha256((tmp_path / "b" / "manifest.json").read_bytes()).hexdigest()
    done = unbundle(tmp_path / "b", "--check")
    assert done.returncode == 0 and f"manifest sha256 {sha} (not compared" in done.stdout
    done = unbundle(tmp_path / "b", "--check", "--manifest-sha256", sha)
    assert done.returncode == 0 and done.stdout.rstrip().endswith(f"manifest sha256 {sha}")
    line = refusal(unbundle(tmp_path / "b", "--check", "--manifest-sha256", "0" * 64))
    assert line.endswith(f"sha256 {sha} is not the {'0' * 64} the bundle was made with: another manifest")
