"""The host's unpack script (src/pinmatrix/shipped/unbundle.py, standard library only) against a hostile transfer
folder: a FIFO in place of manifest.json or lock.txt is refused in one line (it hung the unpacker), a link in place
of a part or the manifest is not followed, and the staging folder of an unpack killed with -9 is removed by the
next run (each run removed only its own pid's, so a killed one stayed beside DEST for good). Its progress, on a
fake clock: the parts hashed and the files reassembled each say, at most once a second, the bytes done of the
whole with the share, rate and time left, ending at 100%; its lines are the ones pinmatrix.transfer writes for the
same bytes and times (the script cannot import it), so the two copies of the format cannot drift apart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_pack import Project, make_wheels_bundle, project, refusal, unbundle, unbundle_module  # noqa: F401

from pinmatrix.transfer import TransferMeter


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


class Clock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def test_the_scripts_lines_are_pinmatrix_s_own() -> None:
    shipped = unbundle_module()
    for total, steps in ((48 << 20, [(12 << 20, 3.0), (36 << 20, 1.0)]), (10, [(3, 0.5), (7, 700.0)]),
                         (7 << 40, [(5 << 30, 3.0), (1 << 40, 4000.0)]), (0, [(0, 2.0)]), (100, [(0, 5.0)])):
        clock = Clock()
        ours, theirs = TransferMeter(total, clock=clock), shipped.Progress("x", total, print, clock)
        assert theirs.line() == ours.line()
        for count, seconds in steps:
            clock.now += seconds
            ours.advance(count)
            theirs.done += count
            assert theirs.line() == ours.line(), (total, count)


def test_unpacking_says_the_bytes_of_the_whole_once_a_second(project: Project, tmp_path: Path) -> None:  # noqa: F811
    manifest = make_wheels_bundle(project, tmp_path / "b")
    shipped = unbundle_module()
    ticks = iter(range(0, 10**6, 2))  # every read of the clock two seconds on: every chunk is worth a line
    said: list[str] = []
    shipped.unpack(tmp_path / "b", tmp_path / "dest", None, said.append, clock=lambda: float(next(ticks)))
    parts = [line for line in said if line.startswith("checking the parts: ")]
    files = [line for line in said if line.startswith("unpacking: ")]
    assert len(parts) == len(manifest.parts) and len(files) >= len(manifest.wheels), said  # a line a read
    whole = f"{sum(p.size for p in manifest.parts) / 1024:.1f} KiB"
    assert parts[-1].startswith(f"checking the parts: {whole} of {whole} (100%), ") and parts[-1].endswith("0:00 left")
    assert files[-1].startswith(f"unpacking: {whole} of {whole} (100%), ") and files[-1].endswith("0:00 left")
    assert said.index(parts[-1]) < said.index(files[0])  # every part is checked before a file is written
