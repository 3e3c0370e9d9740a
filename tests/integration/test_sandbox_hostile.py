"""Hostile images against the sandbox runtime, run by root and by an ordinary user (65534): what the chroot runtime
let through as root (issue 40) lands nowhere on the host. Each escape is tried on the old runtime too
(``chroot-trusting-root``, as root), where it must get through: the test shows the boundary, not a broken smoke.

- writes through /proc/1/root, /proc/$PPID/root and ``..`` from the working directory, to a host folder and to
  another image's kernel cache;
- a WorkingDir outside the root (through /proc/1/root) and under /proc;
- a setuid-root member and device nodes in a layer;
- a User no kernel takes."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hostile_images import add_image, layer, member
from sandbox_runs import build_demo, bwrap_usable, open_folder, pinmatrix_as, readable, who_runs

pytestmark = [pytest.mark.slow, pytest.mark.skipif(bwrap_usable() is not None, reason=str(bwrap_usable()))]

ESCAPES = '''
import json, os
from _smokelib import Context, main

SMOKES = {"escape": {"func": "escape", "description": "tries to write outside its image", "timeout_s": 60},
          "hang": {"func": "hang", "description": "hangs until its timeout", "timeout_s": 600},
          "whoami": {"func": "whoami", "description": "says who and where it is", "timeout_s": 60}}


def whoami(ctx: Context) -> None:
    ctx.metric("who", json.dumps([os.getuid(), os.getgid(), os.getcwd(), os.environ.get("HOME"),
                                  os.environ.get("PMTEST_FLAG"), sorted(os.listdir("/proc")).count("1")]))
    with open(os.path.join(os.environ["HOME"], "scribble"), "w") as fh:  # a home of its own, writable
        fh.write("x")
    try:
        open("/srv/work/scribble", "w").write("x")
        ctx.metric("root_writable", 1)
    except OSError:
        ctx.metric("root_writable", 0)


def hang(ctx: Context) -> None:
    import time
    print("hanging", flush=True)
    time.sleep(600)


def escape(ctx: Context) -> None:
    tried = {}
    for what, folder in (("host", os.environ.get("PINMATRIX_HOSTILE_HOST", "/nonexistent")),
                         ("cache", os.environ.get("PINMATRIX_HOSTILE_CACHE", "/nonexistent"))):
        for how, path in (("proc1", "/proc/1/root" + folder), ("ppid", f"/proc/{os.getppid()}/root" + folder),
                          ("dotdot", "../" * 40 + folder.lstrip("/")), ("plain", folder)):
            try:
                with open(os.path.join(path, f"{how}-{what}"), "w") as fh:
                    fh.write("escaped")
                tried[f"{how}-{what}"] = "written"
            except OSError as err:
                tried[f"{how}-{what}"] = type(err).__name__
    ctx.metric("tried", json.dumps(tried, sort_keys=True))
    ctx.summary = "tried"


if __name__ == "__main__":
    main(SMOKES, globals())
'''
RUNS = [("sandbox", "root"), ("sandbox", "user"), ("chroot-trusting-root", "root")]
# Some hosts close /proc/1/root even to root (a VM's init under an LSM); the old runtime's escape through it is
# shown only where it is open, the one through /proc/$PPID/root everywhere.
INIT_ROOT_OPEN = os.access("/proc/1/root/", os.R_OK | os.X_OK)


@pytest.fixture(scope="module")
def base() -> Any:
    with open_folder() as folder:
        built = build_demo(folder)
        smokes = folder / "hostile-smoke"
        smokes.mkdir()
        (smokes / "escape.py").write_text(ESCAPES)
        yield {**built, "folder": folder, "smokes": smokes, "base": sorted(built["digests"].values())[0]}


def _smoke(setup: dict[str, Any], tmp: Path, runtime: str, who: str, image: str, *,
           env: dict[str, str] | None = None, smoke: str = "escape", more: tuple[str, ...] = ()) -> Any:
    readable(setup["folder"])
    return pinmatrix_as(who_runs(who), ["smoke", "--runtime", runtime, "--image", image, "--layout",
                                  str(setup["layout"]), "--roots", str(tmp / "roots"), "--smoke-dir",
                                  str(setup["smokes"]), "--smoke", smoke, "--results", str(tmp / "r.sqlite"),
                                  "--logs", str(tmp / "logs"), "--json", str(tmp / "run.json"), *more], cwd=tmp,
                        env=env)


@pytest.mark.parametrize(("runtime", "who"), RUNS)
def test_writes_through_proc_and_dotdot_land_nowhere_on_the_host(base: dict[str, Any], runtime: str,
                                                                  who: str) -> None:
    with open_folder() as tmp:
        target = tmp / "host-target"
        target.mkdir(mode=0o777)
        os.chmod(target, 0o777)
        other = add_image(base["layout"], "t:other", [layer([member("srv", "dir"), member("srv/other", data=b"b")])],
                          base=base["base"])
        cache = tmp / "roots" / "kernel-cache" / other[7:]
        first = _smoke(base, tmp, runtime, who, other)  # the other image's run: its kernel cache exists now
        assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
        assert cache.is_dir()
        env = {"PINMATRIX_HOSTILE_HOST": str(target), "PINMATRIX_HOSTILE_CACHE": str(cache)}
        done = _smoke(base, tmp, runtime, who, base["base"], env=env)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        (record,) = json.loads((tmp / "run.json").read_text())
        tried = json.loads(record["metrics"]["tried"])
        landed = sorted(p.name for p in [*target.iterdir(), *cache.iterdir()] if p.name.endswith(("-host", "-cache")))
        if runtime == "sandbox":
            assert landed == [], tried
            assert set(tried.values()) <= {"FileNotFoundError", "PermissionError", "OSError"}, tried
        else:  # the hand-made chroot as root: the host's PID namespace and /proc, so /proc/1/root is the host's
            assert {"ppid-host", "ppid-cache"} <= set(landed), tried
            assert {"proc1-host", "proc1-cache"} <= set(landed) or not INIT_ROOT_OPEN, tried


@pytest.mark.parametrize(("runtime", "who"), RUNS)
def test_a_working_dir_outside_the_root_or_under_proc_is_refused(base: dict[str, Any], runtime: str,
                                                                   who: str) -> None:
    with open_folder() as tmp:
        outside = tmp / "made-by-workdir"
        through = add_image(base["layout"], "t:workdir-out", [], base=base["base"],
                            config={"WorkingDir": f"/proc/1/root{outside}"})
        done = _smoke(base, tmp, runtime, who, through)
        if runtime == "sandbox":
            assert done.returncode == 2 and not outside.exists()
            assert done.stderr.strip().splitlines()[-1] == (
                f"pinmatrix: error: WorkingDir '/proc/1/root{outside}': under /proc, which is the kernel's, not "
                "the image's")
            under = add_image(base["layout"], "t:workdir-sys", [], base=base["base"], config={"WorkingDir": "/sys/x"})
            done = _smoke(base, tmp, runtime, who, under)
            assert done.returncode == 2 and "'/sys/x': under /sys" in done.stderr.splitlines()[-1]
        elif INIT_ROOT_OPEN:
            assert outside.is_dir()  # the old runtime made the folder on the host


@pytest.mark.parametrize("who", ["root", "user"])
def test_setuid_members_and_device_nodes_never_reach_the_host(base: dict[str, Any], who: str) -> None:
    with open_folder() as tmp:
        hostile = add_image(base["layout"], "t:nodes", [layer([
            member("srv", "dir"), member("srv/su", data=b"#!/bin/sh\nid\n", mode=0o4755),
            member("srv/mem", "chr", mode=0o666, dev=(1, 1)), member("srv/disk", "blk", mode=0o666, dev=(8, 0)),
            member("srv/pipe", "fifo", mode=0o666)])], base=base["base"])
        done = _smoke(base, tmp, "sandbox", who, hostile)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "3 device node(s) and FIFO(s) in the layers not made" in done.stdout
        root = tmp / "roots" / hostile[7:] / "rootfs"
        assert stat.S_IMODE(os.lstat(root / "srv" / "su").st_mode) == 0o755
        assert not any(os.path.lexists(root / "srv" / n) for n in ("mem", "disk", "pipe"))
        assert stat.S_IMODE((tmp / "roots").stat().st_mode) == 0o700


@pytest.mark.parametrize("who", ["root", "user"])
def test_a_user_no_kernel_takes_is_one_line(base: dict[str, Any], who: str) -> None:
    with open_folder() as tmp:
        huge = add_image(base["layout"], "t:huge-uid", [], base=base["base"], config={"User": "99999999999"})
        done = _smoke(base, tmp, "sandbox", who, huge)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert done.stderr.strip().splitlines()[-1] == (
            "pinmatrix: error: the image's User '99999999999': uid 99999999999 is above 4294967294, the largest id "
            "the kernel takes")


@pytest.mark.parametrize("who", ["root", "user"])
def test_a_hung_smoke_gets_its_stacks_written_at_its_timeout(base: dict[str, Any], who: str) -> None:
    """The runner's SIGABRT reaches the smoke inside the sandbox (the launcher passes it on), so faulthandler
    writes where it hung, as with the host runtime."""
    with open_folder() as tmp:
        done = _smoke(base, tmp, "sandbox", who, base["base"], smoke="hang", more=("--timeout", "8", "--no-batch"))
        assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
        (record,) = json.loads((tmp / "run.json").read_text())
        assert record["status"] == "fail" and record["failure_class"] == "timeout", record
        log = Path(record["log_path"]).read_text()
        assert "hanging" in log and "Fatal Python error: Aborted" in log and "in hang" in log, log[-2000:]


@pytest.mark.parametrize("who", ["root", "user"])
def test_the_images_user_working_dir_and_env_apply_inside_a_read_only_root(base: dict[str, Any], who: str) -> None:
    with open_folder() as tmp:
        blobs = base["layout"] / "blobs" / "sha256"
        manifest = json.loads((blobs / base["base"][7:]).read_bytes())
        env = json.loads((blobs / manifest["config"]["digest"][7:]).read_bytes())["config"]["Env"]
        passwd = b"root:x:0:0:root:/root:/bin/sh\npmtest:x:4242:4343::/home/pmtest:/bin/sh\n"
        group = b"root:x:0:\npmtest:x:4343:\nextra:x:4444:pmtest\n"
        image = add_image(base["layout"], "t:user", [layer([
            member("etc/passwd", data=passwd), member("etc/group", data=group), member("srv", "dir", mode=0o755),
            member("srv/work", "dir", mode=0o777, uid=4242, gid=4343)])], base=base["base"],
            config={"User": "pmtest", "WorkingDir": "/srv/work", "Env": [*env, "PMTEST_FLAG=from-image"]})
        done = _smoke(base, tmp, "sandbox", who, image, smoke="whoami")
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "the image's user's other groups [4343, 4444] are not set: one id is mapped in the sandbox" in done.stdout
        (record,) = json.loads((tmp / "run.json").read_text())
        assert json.loads(record["metrics"]["who"]) == [4242, 4343, "/srv/work", "/home/pmtest", "from-image", 1]
        assert record["metrics"]["root_writable"] == 0  # the image root is read-only, its own 0777 folder too
        assert not list((tmp / "roots").glob("*/rootfs/srv/work/scribble"))
