"""The sandbox runtime's own rules: bwrap's options built as a list from the image and the host (never a shell),
what the smoke leaves copied back without following a link, a sandbox that does not start recorded as
infrastructure, and a host without user namespaces refused in one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pinmatrix.oci.unpack import ImageRoot
from pinmatrix.smoke.chroot_host import DriverFiles
from pinmatrix.smoke.runner import ProcessResult
from pinmatrix.smoke.sandbox import SandboxSmokes, check_host, copy_out
from pinmatrix.smoke.sandbox_gpu import GpuWiring
from pinmatrix.smoke.sandbox_user import ImageRunRefused, ImageUser


def _runtime(tmp_path: Path, *, env: list[str] | None = None, drop: tuple[int, int] | None = None,
             gpu: GpuWiring | None = None) -> SandboxSmokes:
    root = tmp_path / "rootfs"
    (root / "opt" / "venv" / "bin").mkdir(parents=True)
    (root / "opt" / "venv" / "bin" / "python").write_text("")
    image = ImageRoot("sha256:" + "a" * 64, root, {"config": {"Env": env or []}})
    smokes = tmp_path / "smoke"
    smokes.mkdir()
    return SandboxSmokes(image, smokes, bwrap=Path("/usr/bin/bwrap"), gpu=gpu or GpuWiring("none"),
                         user=ImageUser(4242, 4343, (4343,), "/home/pm"), cwd="/srv", scratch_root=tmp_path / "runs",
                         drop=drop)


def test_bwrap_options_unshare_everything_drop_capabilities_and_bind_the_root_read_only(tmp_path: Path) -> None:
    lib = tmp_path / "libcuda.so.580.1"
    lib.write_text("")
    gpu = GpuWiring("discovered", (("/dev/nvidia0", "/dev/nvidia0"),), DriverFiles({lib: ("libcuda.so.1",)}))
    runtime = _runtime(tmp_path, env=["LD_PRELOAD=/evil.so", "A=1"], gpu=gpu)
    scratch = tmp_path / "runs" / "run-x"
    args = runtime.setup(scratch, runtime.environment({"PINMATRIX_SMOKE_RESULT": "/pinmatrix-out/r.json"}), [])
    words = [a if isinstance(a, str) else f"<{a['path']}>" for a in args]
    text = " ".join(words)
    assert words[:6] == ["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    assert "--uid 4242 --gid 4343" in text and words[-2:] == ["--chdir", "/srv"]
    assert f"--ro-bind <{runtime.image.path}> / --proc /proc --dev /dev --dev-bind /dev/nvidia0 /dev/nvidia0" in text
    assert f"--bind <{scratch / 'tmp'}> /tmp" in text and f"--bind <{scratch / 'home'}> /home/pm" in text
    assert f"--ro-bind <{lib}> /opt/pinmatrix-driver/lib/{lib.name}" in text
    assert "--setenv LD_PRELOAD /evil.so" in text  # the image's Env reaches the sandbox only, as --setenv
    assert "--setenv LD_LIBRARY_PATH /opt/pinmatrix-driver/lib" in text and "--share-net" not in text
    folder = runtime.driver_dir
    assert folder is not None and os.readlink(folder / "lib" / "libcuda.so.1") == lib.name


def test_what_the_smoke_leaves_is_copied_back_without_following_links(tmp_path: Path) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    work.mkdir()
    secret = tmp_path / "host-secret.json"
    secret.write_text('{"status": "pass", "metrics": {"stolen": 1}}')
    (out / ".a.result.json").write_text(json.dumps({"status": "pass", "environment": {"python": "3.13"}}))
    (out / "a.log").write_text("log line\n")
    os.symlink(secret, out / ".b.result.json")
    os.mkfifo(out / "fifo")
    copy_out(out, work, {"sandbox": {"gpu": "none"}})
    assert sorted(os.listdir(work)) == [".a.result.json", "a.log"]
    assert json.loads((work / ".a.result.json").read_text())["environment"] == {"python": "3.13",
                                                                               "sandbox": {"gpu": "none"}}
    assert (work / "a.log").read_text() == "log line\n"


def test_a_sandbox_that_does_not_start_is_infrastructure_not_the_smokes_result(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    log = tmp_path / "smoke.log"
    log.write_text("$ python ...\nbwrap: Can't mkdir /opt/x: Read-only file system\n")
    failed = runtime._failed_start(scratch, ProcessResult(1, False, None, 0.1), log)
    assert failed == (f"image {runtime.image.digest}: the sandbox did not start: bwrap: Can't mkdir /opt/x: "
                      "Read-only file system")
    assert runtime._failed_start(scratch, ProcessResult(1, False, {"status": "fail"}, 0.1), log) is None
    log.write_text("Traceback ...\nAssertionError\n")
    assert runtime._failed_start(scratch, ProcessResult(1, False, None, 0.1), log) is None  # the smoke's own exit
    (scratch / "setup-error").write_text("pinmatrix sandbox: setup failed: PermissionError: drop\n")
    assert runtime._failed_start(scratch, ProcessResult(125, False, None, 0.1), log) == (
        f"image {runtime.image.digest}: pinmatrix sandbox: setup failed: PermissionError: drop")


def test_a_host_without_user_namespaces_is_one_line_saying_what_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pinmatrix.smoke.sandbox.user_namespaces", lambda: "user.max_user_namespaces = 0")
    with pytest.raises(ImageRunRefused, match=r"^the sandbox runtime needs unprivileged user namespaces: .*; here "
                                              r"user.max_user_namespaces = 0$"):
        check_host()


@pytest.mark.skipif(os.geteuid() != 0, reason="hands the scratch to the unprivileged id")
def test_root_hands_the_scratch_to_the_unprivileged_id(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path, drop=(65534, 65534))
    scratch = runtime._scratch()
    assert {(scratch / s).stat().st_uid for s in ("tmp", "home", "out")} == {65534}
    assert scratch.stat().st_uid == 0
