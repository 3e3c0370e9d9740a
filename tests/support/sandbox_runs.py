"""Running ``pinmatrix smoke`` in an image runtime as root or as an ordinary user (65534, through setpriv), over
the demo stack's images built as ``pinmatrix build --engine none`` writes them: for the sandbox runtime's tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534


def who_runs(who: str) -> int | None:
    """The uid that runs pinmatrix for ``who`` (None: this process). "root": this process, which must be root;
    "user": 65534 through setpriv when this process is root, else this process (an ordinary user already, as in
    CI)."""
    if who == "root":
        if os.geteuid() != 0:
            pytest.skip("runs pinmatrix as root")
        return None
    return NOBODY if os.geteuid() == 0 else None


def outside_uid(who: str) -> int:
    """The id a sandbox of ``who``'s run has outside: 65534 for root's and setpriv's runs, else this user's."""
    return NOBODY if os.geteuid() == 0 else os.getuid()


def bwrap_usable() -> str | None:
    """Why the sandbox cannot run here (no unprivileged user namespaces, no setpriv to become 65534), or None."""
    probe = ["unshare", "-Urmp", "--fork", "true"]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            return "needs util-linux setpriv"
        probe = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *probe]
    done = subprocess.run(probe, capture_output=True, check=False)
    return None if done.returncode == 0 else "unprivileged user namespaces are not allowed here"


def build_demo(folder: Path) -> dict[str, object]:
    """The demo stack's images in ``folder/oci``: {"layout": Path, "digests": {cell id: manifest digest}}."""
    meta = folder / "built.json"
    done = subprocess.run([sys.executable, "-m", "pinmatrix", "build", str(REPO / "matrix.toml"), "--stack", "demo",
                           "--engine", "none", "--layout", str(folder / "oci"), "--metadata-file", str(meta),
                           "--logs-dir", str(folder / "build-logs")], capture_output=True, text=True, timeout=900,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    built = json.loads(meta.read_text())
    return {"layout": folder / "oci", "digests": {cell: b["digest"] for cell, b in built.items()}}


def _interpreter(uid: int) -> str | None:
    """This interpreter, or the system's of the same version, if ``uid`` may run it (pytest's may live in /root)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/python{version}"):
        probe = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "env", candidate,
                                "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True,
                               check=False)
        if probe.returncode == 0 and probe.stdout.strip() == str(sys.version_info[:2]):
            return candidate
    return None


@contextmanager
def open_folder() -> Iterator[Path]:
    """A fresh folder every user may enter and write (an ordinary user's run keeps its files there)."""
    folder = Path(tempfile.mkdtemp(prefix="pinmatrix-sandbox-test-"))
    os.chmod(folder, 0o777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def readable(folder: Path) -> None:
    """Every file under ``folder`` readable, every folder enterable, by any user."""
    for dirpath, _dirs, files in os.walk(folder):
        os.chmod(dirpath, os.stat(dirpath).st_mode | 0o755)
        for name in files:
            os.chmod(os.path.join(dirpath, name), os.stat(os.path.join(dirpath, name)).st_mode | 0o644)


def pinmatrix_as(uid: int | None, args: list[str], *, cwd: Path, env: dict[str, str] | None = None,
                 timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``python -m pinmatrix ARGS`` as this process (``uid`` None) or as ``uid`` (no groups)."""
    extra = dict(env or {})
    if uid is None:
        return subprocess.run([sys.executable, "-m", "pinmatrix", *args], capture_output=True, text=True, cwd=cwd,
                              env={**os.environ, **extra}, timeout=timeout, check=False)
    python = _interpreter(uid)
    assert python is not None, "no interpreter of this version that an ordinary user may run"
    path = os.pathsep.join([str(REPO / "src"), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    variables = [f"{k}={v}" for k, v in {"HOME": str(cwd), "PYTHONPATH": path,
                                         "PATH": os.environ.get("PATH", "/usr/bin:/bin"), **extra}.items()]
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "env", "-i", *variables,
                           python, "-m", "pinmatrix", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, check=False)
