"""pinmatrix.smoke.guard rule by rule, in this process (mutmut cannot reach the guard it starts: that one runs
``python -I -S``, without site-packages): the smoke's first process asks for SIGKILL at its parent's death and
exits at once when the parent is already gone; the guard is started isolated, in a session of its own, holding
the read end of the runner's pipe, without the token in its environment; it reads the group ids the runner
wrote (however many writes, never 0 or 1), kills those groups and every process whose environment carries the
token exactly (not a longer token, not the text elsewhere), gives up after five rounds, ignores SIGINT and
SIGHUP, then runs the clean-up command, whose failure does not stop it.

Every kill in this file goes through a fence that lets through only the processes the test started: a mutant
that reads the token test backwards would otherwise SIGKILL every process on the machine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pinmatrix.smoke import guard
from pinmatrix.smoke.guard import TOKEN_ENV, _token_pids, die_with_parent, main, name_group, start_guard, sweep


class Fence:
    """os.kill and os.killpg for the processes a test started; any other target is refused and recorded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.allowed: set[int] = set()
        self.refused: list[tuple[str, int]] = []
        self.kills: list[int] = []
        self.group_kills: list[int] = []
        real_kill, real_killpg = os.kill, os.killpg

        def kill(pid: int, sig: int) -> None:
            self.kills.append(pid)
            if pid not in self.allowed:
                self.refused.append(("kill", pid))
                return
            real_kill(pid, sig)

        def killpg(pgid: int, sig: int) -> None:
            self.group_kills.append(pgid)
            if pgid not in self.allowed:
                self.refused.append(("killpg", pgid))
                raise ProcessLookupError(pgid)
            real_killpg(pgid, sig)

        monkeypatch.setattr(os, "kill", kill)
        monkeypatch.setattr(os, "killpg", killpg)


@pytest.fixture()
def fence(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fence]:
    f = Fence(monkeypatch)
    yield f


@pytest.fixture()
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


def sleeper(procs: list[subprocess.Popen[bytes]], fence: Fence, *, token: str | None = None,
            extra_env: dict[str, str] | None = None, session: bool = False) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    if token is not None:
        env[TOKEN_ENV] = token
    env.update(extra_env or {})
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env,
                         start_new_session=session, stdin=subprocess.DEVNULL)
    procs.append(p)
    fence.allowed.add(p.pid)
    # the environment is in /proc once the child has exec'd (before that, it is the parent's)
    for _ in range(500):
        try:
            if b"time.sleep(120)" in Path(f"/proc/{p.pid}/cmdline").read_bytes():
                break
        except OSError:
            pass
        time.sleep(0.01)
    return p


def dies(p: subprocess.Popen[bytes], within: float = 10.0) -> bool:
    try:
        p.wait(timeout=within)
    except subprocess.TimeoutExpired:
        return False
    return p.returncode == -signal.SIGKILL


# ------------------------------------------------------------------------------------------- die_with_parent
class FakeLibc:
    def __init__(self) -> None:
        self.calls: list[tuple[int, ...]] = []

    def prctl(self, *args: int) -> int:
        self.calls.append(args)
        return 0


class Exited(Exception):
    pass


def _exit(code: int) -> None:
    raise Exited(code)


def test_the_smoke_asks_for_sigkill_when_its_parent_dies(monkeypatch: pytest.MonkeyPatch) -> None:
    libc = FakeLibc()
    monkeypatch.setattr(guard, "_LIBC", libc)
    monkeypatch.setattr(os, "_exit", _exit)
    die_with_parent(os.getppid())  # the parent is alive: no exit
    assert libc.calls == [(1, int(signal.SIGKILL), 0, 0, 0)]  # prctl(PR_SET_PDEATHSIG, SIGKILL)


def test_a_smoke_whose_parent_is_already_gone_exits_137_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    libc = FakeLibc()
    monkeypatch.setattr(guard, "_LIBC", libc)
    monkeypatch.setattr(os, "_exit", _exit)
    with pytest.raises(Exited) as gone:
        die_with_parent(os.getppid() + 1_000_000)  # not this process's parent
    assert gone.value.args == (137,)
    assert libc.calls == [(1, int(signal.SIGKILL), 0, 0, 0)]


def test_without_prctl_the_parent_check_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard, "_LIBC", None)
    monkeypatch.setattr(os, "_exit", _exit)
    die_with_parent(os.getppid())
    with pytest.raises(Exited):
        die_with_parent(os.getppid() + 1_000_000)


def test_the_c_library_is_found_with_prctl() -> None:
    libc = guard._libc()
    assert libc is not None and hasattr(libc, "prctl")
    assert guard._LIBC is not None


def test_a_libc_without_prctl_is_not_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard, "_LIBC", object())  # not Linux: a C library, no prctl
    monkeypatch.setattr(os, "_exit", _exit)
    die_with_parent(os.getppid())
    with pytest.raises(Exited):
        die_with_parent(os.getppid() + 1_000_000)


def test_the_real_prctl_sets_the_parent_death_signal() -> None:
    """In a forked child (never in the test process itself): PR_GET_PDEATHSIG reads SIGKILL afterwards."""
    import ctypes

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read_end)
            die_with_parent(os.getppid())
            sig = ctypes.c_int(0)
            ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0)  # PR_GET_PDEATHSIG
            os.write(write_end, str(sig.value).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        assert os.read(read_end, 100) == str(int(signal.SIGKILL)).encode()
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)


# ----------------------------------------------------------------------------------------------- start_guard
class Recorder:
    """subprocess.Popen as start_guard calls it: the call is kept, the read end of the pipe duplicated so the
    test can read what the runner's end carries."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.argv: list[str] = []
        self.kwargs: dict[str, Any] = {}
        self.read_copy: int | None = None

    def __call__(self, argv: list[str], **kwargs: Any) -> str:
        self.argv, self.kwargs = list(argv), kwargs
        if self.fail:
            raise OSError("no python here")
        self.read_copy = os.dup(int(argv[4]))
        return "the guard"


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_the_guard_is_started_isolated_in_a_session_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder()
    monkeypatch.setattr(guard.subprocess, "Popen", rec)
    monkeypatch.setenv(TOKEN_ENV, "the runner's own")
    monkeypatch.setenv("PINMATRIX_GUARD_TEST", "kept")
    proc, fd = start_guard("tok123", ["docker", "rm", "--force", "c1"])
    try:
        assert proc == "the guard"
        assert rec.argv == [sys.executable, "-I", "-S", guard.__file__, rec.argv[4], "tok123", "--",
                            "docker", "rm", "--force", "c1"]
        read_fd = int(rec.argv[4])
        assert rec.kwargs["pass_fds"] == (read_fd,)  # the only descriptor it gets
        assert rec.kwargs["start_new_session"] is True  # Ctrl-C in the runner's terminal does not reach it
        assert rec.kwargs["stdin"] == rec.kwargs["stdout"] == rec.kwargs["stderr"] == subprocess.DEVNULL
        env = rec.kwargs["env"]
        assert TOKEN_ENV not in env and env["PINMATRIX_GUARD_TEST"] == "kept"  # os.environ, less the token
        # the read end is the guard's alone: closed here; what the runner writes reaches it
        with pytest.raises(OSError):
            os.fstat(read_fd)
        name_group(fd, 4242)
        assert rec.read_copy is not None
        assert os.read(rec.read_copy, 100) == b"4242\n"
    finally:
        os.close(fd)
        if rec.read_copy is not None:
            os.close(rec.read_copy)


def test_the_guards_environment_is_the_one_given_less_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder()
    monkeypatch.setattr(guard.subprocess, "Popen", rec)
    monkeypatch.delenv("PINMATRIX_GUARD_TEST", raising=False)
    _, fd = start_guard("t", None, env={"PATH": "/bin", TOKEN_ENV: "t", "ONLY": "this"})
    os.close(fd)
    assert rec.read_copy is not None
    os.close(rec.read_copy)
    assert rec.kwargs["env"] == {"PATH": "/bin", "ONLY": "this"}
    assert rec.argv[-1] == "--"  # no clean-up: nothing after the separator


def test_a_guard_that_cannot_start_leaves_no_descriptor_open(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard.subprocess, "Popen", Recorder(fail=True))
    before = open_fds()
    with pytest.raises(OSError, match="no python here"):
        start_guard("t")
    assert open_fds() == before


def test_a_started_guard_leaves_only_the_write_end_open(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder()
    monkeypatch.setattr(guard.subprocess, "Popen", rec)
    before = open_fds()
    _, fd = start_guard("t")
    assert rec.read_copy is not None
    assert open_fds() - before == {str(fd), str(rec.read_copy)}
    os.close(fd)
    assert os.read(rec.read_copy, 10) == b""  # the runner's end closed: end-of-file for the guard
    os.close(rec.read_copy)


# ------------------------------------------------------------------------------------------------- the token
def test_the_token_finds_exactly_the_processes_carrying_it(procs, fence: Fence) -> None:
    token = os.urandom(8).hex()
    carrier = sleeper(procs, fence, token=token)
    other_session = sleeper(procs, fence, token=token, session=True)  # left the group: still found
    longer = sleeper(procs, fence, token=token + "0")
    quoted = sleeper(procs, fence, extra_env={"NOTE": f"{TOKEN_ENV}={token}"})  # the text, in another variable
    plain = sleeper(procs, fence)
    found = _token_pids(token)
    assert sorted(found) == sorted([carrier.pid, other_session.pid])
    assert all(isinstance(pid, int) for pid in found)
    assert longer.pid not in found and quoted.pid not in found and plain.pid not in found


def test_the_token_search_leaves_out_the_guard_itself(procs, fence: Fence, monkeypatch: pytest.MonkeyPatch) -> None:
    token = os.urandom(8).hex()
    me, other = sleeper(procs, fence, token=token), sleeper(procs, fence, token=token)
    monkeypatch.setattr(os, "getpid", lambda: me.pid)
    assert _token_pids(token) == [other.pid]


def test_a_process_that_cannot_be_read_is_passed_over_not_the_end_of_the_search(
        procs, fence: Fence, monkeypatch: pytest.MonkeyPatch) -> None:
    token = os.urandom(8).hex()
    carrier = sleeper(procs, fence, token=token)
    gone = 2 ** 22 + 7  # above pid_max's default: no such process
    listed = ["self", "sys", str(gone), str(carrier.pid)]
    monkeypatch.setattr(os, "listdir", lambda _path: listed)
    assert _token_pids(token) == [carrier.pid]


def test_no_proc_no_token_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_proc(_path: str) -> list[str]:
        raise PermissionError("/proc")

    monkeypatch.setattr(os, "listdir", no_proc)
    assert _token_pids("t") == []


# ----------------------------------------------------------------------------------------------------- sweep
def test_a_sweep_kills_the_group_and_every_token_process(procs, fence: Fence) -> None:
    token = os.urandom(8).hex()
    group = sleeper(procs, fence, session=True)  # a group of its own, no token
    escaped = sleeper(procs, fence, token=token, session=True)  # left the group with setsid
    bystander = sleeper(procs, fence, session=True)
    sweep([group.pid], token)
    assert dies(group) and dies(escaped)
    assert bystander.poll() is None
    assert fence.refused == []


def test_a_group_already_gone_or_not_ours_does_not_stop_the_sweep(procs, fence: Fence,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    token = os.urandom(8).hex()
    carrier = sleeper(procs, fence, token=token, session=True)
    group = sleeper(procs, fence, session=True)
    real_killpg = os.killpg

    def killpg(pgid: int, sig: int) -> None:
        if pgid == 11:
            raise PermissionError(pgid)
        if pgid == 12:
            raise ProcessLookupError(pgid)
        real_killpg(pgid, sig)

    monkeypatch.setattr(os, "killpg", killpg)
    sweep([11, 12, group.pid], token)
    assert dies(group) and dies(carrier)


def test_a_token_process_that_is_gone_or_not_ours_does_not_stop_the_sweep(fence: Fence,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    killed: list[int] = []

    def kill(pid: int, _sig: int) -> None:
        killed.append(pid)
        if pid == 21:
            raise PermissionError(pid)
        if pid == 22:
            raise ProcessLookupError(pid)

    monkeypatch.setattr(os, "kill", kill)
    monkeypatch.setattr(guard, "_token_pids", lambda _token: [21, 22, 23])
    sweep([], "t", rounds=2)
    assert killed == [21, 22, 23, 21, 22, 23]


def test_a_sweep_against_processes_that_keep_coming_back_gives_up_after_five_rounds(
        fence: Fence, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: seen.append(f"kill {pid} {sig}"))
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: seen.append(f"killpg {pgid} {sig}"))
    monkeypatch.setattr(guard, "_token_pids", lambda token: [31] if token == "t" else [])
    sweep([30], "t")
    k = int(signal.SIGKILL)
    assert seen == [f"killpg 30 {k}", f"kill 31 {k}"] * 5


def test_a_sweep_stops_as_soon_as_no_token_process_is_left(fence: Fence, monkeypatch: pytest.MonkeyPatch) -> None:
    rounds: list[list[int]] = [[41], []]
    group_kills: list[int] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: None)
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: group_kills.append(pgid))
    monkeypatch.setattr(guard, "_token_pids", lambda _token: rounds.pop(0) if rounds else [99])
    sweep([40], "t")
    assert group_kills == [40, 40] and rounds == []


# ------------------------------------------------------------------------------------------------------ main
@pytest.fixture()
def signals() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGHUP)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def guard_argv(fd: int, token: str, *cleanup: str) -> list[str]:
    return [guard.__file__, str(fd), token, "--", *cleanup]


def test_the_guard_kills_the_group_the_runner_named_then_runs_the_clean_up(procs, fence: Fence, signals,
                                                                           tmp_path: Path) -> None:
    token = os.urandom(8).hex()
    group = sleeper(procs, fence, session=True)
    escaped = sleeper(procs, fence, token=token, session=True)
    read_end, write_end = os.pipe()
    name_group(write_end, group.pid)
    os.close(write_end)  # the runner is done (or died)
    done = tmp_path / "cleaned"
    try:
        assert main(guard_argv(read_end, token, sys.executable, "-c",
                               f"import pathlib; pathlib.Path({str(done)!r}).write_text('x')")) == 0
    finally:
        os.close(read_end)
    assert dies(group) and dies(escaped)
    assert done.read_text() == "x"
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # Ctrl-C in the runner's terminal
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    assert fence.refused == []


def test_the_guard_reads_every_write_not_only_the_last(procs, fence: Fence, signals) -> None:
    group = sleeper(procs, fence, session=True)
    read_end, write_end = os.pipe()
    name_group(write_end, group.pid)
    os.write(write_end, b"  \n" * 4000)  # more than one read's worth after the group id
    os.close(write_end)
    try:
        main(guard_argv(read_end, os.urandom(8).hex()))
    finally:
        os.close(read_end)
    assert dies(group)


def test_the_guard_never_kills_group_0_or_1_or_what_is_not_a_number(fence: Fence, signals,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    swept: list[tuple[list[int], str]] = []
    monkeypatch.setattr(guard, "sweep", lambda pgids, token: swept.append((pgids, token)))
    read_end, write_end = os.pipe()
    os.write(write_end, b"0\n1\n-5\nx7\n2\n77\n")
    os.close(write_end)
    try:
        main(guard_argv(read_end, "tok"))
    finally:
        os.close(read_end)
    assert swept == [([2, 77], "tok")]
    assert fence.refused == []


def test_a_guard_whose_pipe_cannot_be_read_still_sweeps_the_token(fence: Fence, signals,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    swept: list[tuple[list[int], str]] = []
    monkeypatch.setattr(guard, "sweep", lambda pgids, token: swept.append((pgids, token)))
    read_end, write_end = os.pipe()
    os.close(read_end)
    os.close(write_end)
    assert main(guard_argv(read_end, "tok")) == 0  # EBADF
    assert swept == [([], "tok")]


def test_a_clean_up_that_cannot_run_or_fails_does_not_fail_the_guard(fence: Fence, signals, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard, "sweep", lambda pgids, token: None)
    for cleanup in ([str(tmp_path / "no-such-tool")], [sys.executable, "-c", "raise SystemExit(3)"]):
        read_end, write_end = os.pipe()
        os.close(write_end)
        try:
            assert main(guard_argv(read_end, "tok", *cleanup)) == 0
        finally:
            os.close(read_end)


def test_the_sweep_comes_before_the_clean_up(fence: Fence, signals, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    monkeypatch.setattr(guard, "sweep", lambda pgids, token: order.append("sweep"))
    real_run = subprocess.run

    def run(argv: list[str], **kwargs: Any) -> Any:
        order.append("clean-up")
        assert kwargs["timeout"] > 0  # a clean-up that hangs does not keep the guard for ever
        return real_run(argv, **kwargs)

    monkeypatch.setattr(guard.subprocess, "run", run)
    read_end, write_end = os.pipe()
    os.close(write_end)
    try:
        main(guard_argv(read_end, "tok", sys.executable, "-c", "pass"))
        main(guard_argv(read_end, "tok"))  # no clean-up command: nothing run
    finally:
        os.close(read_end)
    assert order == ["sweep", "clean-up", "sweep"]
