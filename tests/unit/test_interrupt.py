"""Ctrl-C at each long step (issue 45): a real `pinmatrix` process, its process group sent SIGINT as a terminal does,
while a slow tool runs (a fake mmdebstrap for the Debian base, a fake uv for a lock, a smoke that waits): within 2 s
it says "interrupted" and exits 130, the running cell is not reported FAILED, the tool and the tool's own child are
gone, and no scratch folder is left; pinmatrix.interrupt's pieces on their own below."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, project_copy
from pinmatrix import interrupt

DEADLINE_S = 2.0

FAKE_TOOL = """#!/bin/sh
# a slow stand-in: a scratch folder of its own in $TMPDIR, a child of its own, then a long wait
[ "$1" = "--version" ] && { echo "uv 0.13.9"; exit 0; }
scratch=$(mktemp -d "${TMPDIR:-/tmp}/fake.XXXXXXXX")
sleep 300 &
echo "$$ $! $scratch" > "$FAKE_RECORD.tmp" && mv "$FAKE_RECORD.tmp" "$FAKE_RECORD"
wait
"""

SLOW_SMOKE = """from __future__ import annotations

import os
import subprocess

from _smokelib import Context, main

SMOKES = {{"slow": {{"func": "slow", "description": "waits", "needs": {{}}, "phase": 0, "timeout_s": 300}}}}


def slow(ctx: Context) -> None:
    child = subprocess.Popen(["sleep", "300"])
    with open({record!r} + ".tmp", "w") as fh:
        fh.write(f"{{os.getpid()}} {{child.pid}} -\\n")
    os.rename({record!r} + ".tmp", {record!r})
    child.wait()


if __name__ == "__main__":
    main(SMOKES, globals())
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _interrupt(argv: list[str], *, cwd: Path, env: dict[str, str], record: Path) -> str:
    """Start ``argv`` in a session of its own, wait for the slow tool's record, send SIGINT to the whole group
    (as a terminal's Ctrl-C) and check the exit: 130 within DEADLINE_S, "interrupted" said, the tool gone."""
    # SIGINT's default action in the child even where this run inherited it ignored (a background job)
    proc = subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        start = time.monotonic()
        while not record.is_file():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() - start < 120, "the slow tool never started"
            time.sleep(0.05)
        time.sleep(0.3)
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130 and took < DEADLINE_S, (proc.returncode, took, err[-2000:])
    assert "pinmatrix: interrupted" in err and "Traceback" not in err and "FAILED" not in err, err[-2000:]
    tool, child, scratch = record.read_text().split()
    deadline = time.monotonic() + 1
    while (_alive(int(tool)) or _alive(int(child))) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(int(tool)) and not _alive(int(child)), "a child process outlived the interrupt"
    assert scratch == "-" or not Path(scratch).exists(), scratch
    return err


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = project_copy(tmp_path, smoke=True)
    shutil.copy(REPO / "matrix.toml", root / "matrix.toml")
    shutil.copytree(REPO / "locks", root / "locks")
    return root


@pytest.fixture
def fakes(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A folder of slow fake tools first on PATH, their record file, and TMPDIR a folder of the test's own."""
    bin_dir, tmp = tmp_path / "bin", tmp_path / "tmp"
    bin_dir.mkdir()
    tmp.mkdir()
    for name in ("mmdebstrap", "uv"):
        (bin_dir / name).write_text(FAKE_TOOL)
        (bin_dir / name).chmod(0o755)
    record = tmp_path / "record"
    return record, {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_RECORD": str(record),
                    "TMPDIR": str(tmp)}


def test_ctrl_c_while_mmdebstrap_makes_the_base(project: Path, fakes: tuple[Path, dict[str, str]],
                                                tmp_path: Path) -> None:
    record, env = fakes
    cache = tmp_path / "cache"
    err = _interrupt([sys.executable, "-m", "pinmatrix", "build", "--stack", "demo", "--engine", "none", "-j", "1",
                      "--cache-dir", str(cache), "--layout", str(tmp_path / "layout"), "--logs-dir",
                      str(tmp_path / "logs")], cwd=project, env=env, record=record)
    assert "interrupted, not failed" in err.splitlines()[-1], err[-2000:]
    assert not list(cache.glob("pinmatrix-rootfs-*")) and not list(cache.rglob("fake.*"))


def test_ctrl_c_while_uv_locks_a_cell(project: Path, fakes: tuple[Path, dict[str, str]]) -> None:
    """uv is found beside the interpreter first: this run's interpreter is said to live beside the fake uv."""
    record, env = fakes
    fake_python = Path(env["PATH"].split(os.pathsep)[0]) / "python"
    code = (f"import sys; sys.executable = {str(fake_python)!r}; sys.argv = ['pinmatrix', 'lock', '-k', 'demo']\n"
            "from pinmatrix.cli import main\nsys.exit(main())")
    err = _interrupt([sys.executable, "-c", code], cwd=project, env=env, record=record)
    assert "interrupted, not locked" in err.splitlines()[-1], err[-2000:]
    assert list(Path(env["TMPDIR"]).iterdir()) == []  # pinmatrix's scratch folder (and uv's in it) removed


def test_ctrl_c_while_a_smoke_runs(project: Path, fakes: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    record, env = fakes
    catalogue = tmp_path / "catalogue"
    catalogue.mkdir()
    (catalogue / "slow.py").write_text(SLOW_SMOKE.format(record=str(record)))
    store = tmp_path / "results.sqlite"
    err = _interrupt([sys.executable, "-m", "pinmatrix", "smoke", "--smoke-dir", str(catalogue), "--smoke", "slow",
                      "--results", str(store), "--logs", str(tmp_path / "logs")], cwd=project, env=env, record=record)
    assert "pinmatrix: interrupted: cell host smoke slow interrupted, not recorded" in err, err[-2000:]
    done = subprocess.run([sys.executable, "-m", "pinmatrix", "results", "--results", str(store), "--json"],
                          cwd=project, capture_output=True, text=True, check=False, timeout=60)
    assert done.stdout.strip() in ("", "[]"), done.stdout  # nothing recorded for the smoke it stopped


def test_run_stops_its_group_on_interrupt_and_scratch_folders_go(tmp_path: Path) -> None:
    with interrupt.scratch_folder("pinmatrix-test-", tmp_path) as scratch:
        (scratch / "file").write_text("x")
        assert interrupt.stop() == [] and not scratch.exists()  # as cli.py calls it after Ctrl-C
    assert list(tmp_path.iterdir()) == []


def test_a_timeout_ends_the_whole_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    with pytest.raises(subprocess.TimeoutExpired):
        interrupt.run(["sh", "-c", f"sleep 300 & echo $! > {pids}; wait"], timeout=1)
    deadline = time.monotonic() + 2
    while _alive(int(pids.read_text())) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(int(pids.read_text()))
    done = interrupt.run(["sh", "-c", "echo out; echo err >&2; exit 3"], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    with pytest.raises(subprocess.CalledProcessError):
        interrupt.run(["false"], check=True)
