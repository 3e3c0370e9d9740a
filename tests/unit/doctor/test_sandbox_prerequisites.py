"""Whether the sandbox runtime can start here is checked, not assumed: the kernel's switches and a user namespace
made in a child process, bubblewrap found as the runtime finds it, the GPU wired as the runtime would."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from pinmatrix.doctor import sandbox
from pinmatrix.smoke.sandbox_user import ImageRunRefused


def test_the_kernels_answer_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    class Refusing:
        def unshare(self, flags: int) -> int:
            ctypes.set_errno(1)  # EPERM, as under kernel.apparmor_restrict_unprivileged_userns = 1
            return -1

    monkeypatch.setattr(sandbox.ctypes, "CDLL", lambda *a, **k: Refusing())
    ok, words = sandbox.can_make_user_namespace()
    assert not ok and "cannot make a user namespace: Operation not permitted" in words


def test_a_kernel_switch_that_forbids_them_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "user_namespaces", lambda: "kernel.apparmor_restrict_unprivileged_userns = 1")
    ok, words = sandbox._userns()
    assert not ok and words.startswith("the sandbox runtime needs unprivileged user namespaces")
    assert "here kernel.apparmor_restrict_unprivileged_userns = 1" in words


def _refuse() -> None:
    raise ImageRunRefused("the sandbox runtime needs bubblewrap >= 0.8.0 (bwrap): found none")


def test_what_the_runtime_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "find_bwrap", _refuse)
    monkeypatch.setattr(sandbox, "user_namespaces", lambda: "user.max_user_namespaces = 0")
    check = sandbox.check_sandbox()
    assert not check.ready and check.bwrap is None
    assert check.verdict() == ("the sandbox runtime (`pinmatrix smoke --runtime sandbox`) cannot start here: it "
                               "lacks a user namespace and bubblewrap")
    assert check.to_dict()["can_start"] is False and "found none" in check.bwrap_words


def test_on_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    check = sandbox.check_sandbox()
    assert check.lines()[0] == check.verdict() and set(check.devices) == set(sandbox.DEVICE_NODES)
    for node, state in check.devices.items():
        assert state == "absent" or Path(node).exists()
    if check.bwrap is not None:
        assert check.bwrap_words.startswith("bubblewrap ")


def test_a_bad_cdi_spec_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    def bad() -> None:
        raise ImageRunRefused("/etc/cdi/nvidia.yaml: not a CDI spec")

    monkeypatch.setattr(sandbox, "gpu_wiring", bad)
    assert sandbox._gpu() == "cannot be wired in: /etc/cdi/nvidia.yaml: not a CDI spec"
