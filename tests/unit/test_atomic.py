"""atomic: the writer-liveness check that decides whether a temporary file or an owner record may be removed."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from pinmatrix import atomic


def test_asking_whether_a_writer_lives_sends_it_no_signal() -> None:
    code = ("import signal, sys, time\nfor s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):\n"
            "    signal.signal(s, signal.SIG_DFL)\nprint('ready', flush=True)\ntime.sleep(30)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"  # a default handler for each
        assert atomic.process_alive(child.pid) is True
        time.sleep(0.2)
        assert child.poll() is None  # still running: signal 0 only asks
    finally:
        child.kill()
        child.wait()
    assert atomic.process_alive(child.pid) is False


def test_a_pid_of_another_user_counts_as_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(pid: int, sig: int) -> None:
        raise PermissionError

    monkeypatch.setattr(atomic.os, "kill", denied)
    assert atomic.process_alive(12345) is True
    assert atomic.process_alive(os.getpid()) is True
