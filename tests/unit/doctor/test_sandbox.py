"""The sandbox's prerequisites are checked, not assumed: the kernel is asked for a user namespace in a child
process, bwrap must answer --version, device nodes are tried with access()."""

from __future__ import annotations

import ctypes
import os
import stat
import sys
from pathlib import Path

import pytest

from pinmatrix.doctor import sandbox


def test_the_kernels_answer_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    class Refusing:
        def unshare(self, flags: int) -> int:
            ctypes.set_errno(1)  # EPERM, as with kernel.apparmor_restrict_unprivileged_userns
            return -1

    monkeypatch.setattr(sandbox.ctypes, "CDLL", lambda *a, **k: Refusing())
    ok, words = sandbox.can_make_user_namespace()
    assert not ok and "cannot make a user namespace: Operation not permitted" in words


def test_bwrap_is_what_answers_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert sandbox.bwrap_version() == (None, "bwrap (bubblewrap) is not on PATH")
    exe = tmp_path / "bwrap"
    exe.write_text(f"#!{sys.executable}\nprint('bubblewrap 0.11.0')\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    assert sandbox.bwrap_version() == (str(exe), f"{exe}: bubblewrap 0.11.0")
    exe.write_text(f"#!{sys.executable}\nimport sys\nsys.exit(1)\n")
    assert sandbox.bwrap_version()[0] is None


def test_the_report_says_the_runtime_is_not_built(monkeypatch: pytest.MonkeyPatch) -> None:
    check = sandbox.check_sandbox()
    assert check.lines()[0] == sandbox.NOT_BUILT and check.to_dict()["runtime"] == "not built"
    assert set(check.devices) == set(sandbox.DEVICE_NODES)
    for node, state in check.devices.items():
        assert state == ("absent" if not os.path.exists(node) else state)
