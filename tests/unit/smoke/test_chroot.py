"""The chroot runtime that trusts the image with root (``smoke --runtime chroot-trusting-root``): images unpacked
from an OCI layout by digest, safely, and the demo cells' smokes run inside their own images, with the image's Env,
User and WorkingDir."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hostile_images import add_image

from pinmatrix.matrix.selection import load
from pinmatrix.oci.unpack import RootfsError, unpack_image
from pinmatrix.project.catalogue import load_catalogue
from pinmatrix.project.policy import PromotionPolicy
from pinmatrix.release.promote import check_policy
from pinmatrix.results.store import HostFingerprint, ResultsStore
from pinmatrix.smoke.cellrun import run_cell
from pinmatrix.smoke.chroot import ChrootSmokes, prepare
from pinmatrix.smoke.chroot_host import (
    ChrootRefused,
    DriverFiles,
    check_architecture,
    find_driver,
    gpu_device_nodes,
    privilege_mode,
)
from pinmatrix.smoke.runner import HostCell, RunOptions
from pinmatrix.smoke.sandbox_user import resolve_user

REPO = Path(__file__).resolve().parents[3]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="unpacking with owners and entering a root need root")
needs_unshare = pytest.mark.skipif(not hasattr(os, "unshare") and shutil.which("unshare") is None,
                                   reason="needs Python >= 3.12 or util-linux unshare")


# ------------------------------------------------------------------------------------------------ helpers


def _entry(name: str, kind: str = "file", data: bytes = b"", mode: int = 0o644, link: str = "",
           uid: int = 0, gid: int = 0) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE,
                 "hard": tarfile.LNKTYPE}[kind]
    info.mode, info.linkname, info.uid, info.gid, info.mtime = mode, link, uid, gid, 1735689600
    info.size = len(data) if kind == "file" else 0
    return info, data


def layer(entries: Iterable[tuple[tarfile.TarInfo, bytes]], compression: str = "gzip") -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    if compression == "gzip":
        return gzip.compress(raw.getvalue(), mtime=0)
    if compression == "zstd":
        return zstandard.ZstdCompressor(level=3, threads=1).compress(raw.getvalue())
    return raw.getvalue()


def _pinmatrix(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pinmatrix", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=900, check=False)


SMOKE_MODULE = '''
import json, os, sys
from _smokelib import Context, main

SMOKES = {"where-am-i": {"func": "where", "description": "reports the process's view from inside the root",
                         "timeout_s": 60}}


def where(ctx: Context) -> None:
    lib = "/opt/pinmatrix-driver/lib"
    ctx.metric("uid", os.getuid())
    ctx.metric("gid", os.getgid())
    ctx.metric("cwd", os.getcwd())
    ctx.metric("flag", os.environ.get("PMTEST_FLAG", ""))
    ctx.metric("cuda_home", os.environ.get("CUDA_HOME", ""))
    ctx.metric("cuda_visible", os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    ctx.metric("home", os.environ.get("HOME", ""))
    ctx.metric("python", sys.executable)
    ctx.metric("ld_library_path", os.environ.get("LD_LIBRARY_PATH", ""))
    ctx.metric("driver_libs", ",".join(sorted(os.listdir(lib))) if os.path.isdir(lib) else "")
    ctx.metric("libcuda", open(lib + "/libcuda.so.1").read() if os.path.exists(lib + "/libcuda.so.1") else "")
    ctx.metric("dev", ",".join(sorted(os.listdir("/dev"))))
    ctx.metric("nvidia0_is_char", int(os.path.exists("/dev/nvidia0") and
                                      __import__("stat").S_ISCHR(os.stat("/dev/nvidia0").st_mode)))
    ctx.metric("host_repo_visible", int(os.path.exists(os.environ.get("PMTEST_HOST_PATH", "/nonexistent"))))
    ctx.metric("proc", int(os.path.exists("/proc/self/status")))
    with open("scribble", "w") as fh:  # in the working directory: must not reach the unpacked root
        fh.write("x")
    ctx.summary = "looked around"


if __name__ == "__main__":
    main(SMOKES, globals())
'''


# ------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The demo stack's images, built as `pinmatrix build --stack demo --engine none` writes them."""
    tmp = tmp_path_factory.mktemp("demo-images")
    meta = tmp / "built.json"
    done = _pinmatrix("build", str(REPO / "matrix.toml"), "--stack", "demo", "--engine", "none", "--layout",
                      str(tmp / "oci"), "--metadata-file", str(meta), "--logs-dir", str(tmp / "build-logs"))
    assert done.returncode == 0, done.stderr[-2000:]
    built = json.loads(meta.read_text())  # keyed by cell id
    return {"layout": tmp / "oci", "roots": tmp / "roots", "digests": {cell: b["digest"] for cell, b in built.items()},
            "tmp": tmp}


# ----------------------------------------------------------------------------------- the demo cells, end to end


@needs_root
@needs_unshare
def test_the_demo_cells_smokes_run_inside_their_images_and_count_as_image_runs(demo: dict[str, Any]) -> None:
    tmp = demo["tmp"]
    args = ["smoke", str(REPO / "matrix.toml"), "--stack", "demo", "--runtime", "chroot-trusting-root", "--layout",
            str(demo["layout"]), "--roots", str(demo["roots"]), "--results", str(tmp / "r.sqlite"),
            "--logs", str(tmp / "logs"), "--json", str(tmp / "run.json")]
    done = _pinmatrix(*args)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = json.loads((tmp / "run.json").read_text())
    assert len(records) == 8 and {r["status"] for r in records} == {"pass"}
    host_python = f"{sys.version_info.major}.{sys.version_info.minor}"
    for r in records:
        assert r["image_digest"] == demo["digests"][r["cell_id"]]  # recorded against the image's manifest
        env = r["environment"]
        assert env["runtime"] == "chroot-trusting-root" and "host_vs_lock" not in env  # the image is the lock
        assert env["batch"]["of"] == 2  # host-probe and python-imports: one process in the image (smoke/batch.py)
        if r["smoke"] == "host-probe":
            assert env["python"].startswith("3.13.")  # the image's own interpreter (the demo base: trixie)
    if host_python != "3.13":
        assert all(not r["environment"].get("python", "3.13").startswith(host_python) for r in records)

    matrix, expansion = load(REPO / "matrix.toml")
    store = ResultsStore(tmp / "r.sqlite")
    for cell in [c for c in expansion.cells if c.stack == "demo"]:
        check = check_policy(cell, PromotionPolicy(host_runs="refuse"), store.query(cell_id=cell.id),
                             catalogue=[s.name for s in load_catalogue(REPO / "smoke")])
        assert check.ok, check.problems  # host_runs = "refuse" counts them: they are image runs
        assert check.digest == demo["digests"][cell.id]

    again = _pinmatrix(*args[:-2], "--rerun", "--cell", expansion.cells[0].id if expansion.cells[0].stack == "demo"
                       else next(c.id for c in expansion.cells if c.stack == "demo"))
    assert again.returncode == 0 and "(reused)" in again.stdout + again.stderr  # unpacked once per digest


# ----------------------------------------------------------------------------------------------- unpacking


def test_whiteouts_opaque_dirs_links_modes_and_owners(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    lower = layer([_entry("a", "dir", mode=0o755), _entry("a/keep", data=b"keep"), _entry("a/gone", data=b"gone"),
                   _entry("b", "dir", mode=0o750), _entry("b/old", data=b"old"), _entry("b/sub", "dir"),
                   _entry("b/sub/deep", data=b"deep"), _entry("c", data=b"c"), _entry("d", "dir"),
                   _entry("d/x", data=b"x"),
                   _entry("tool", data=b"#!/bin/sh\n", mode=0o4755, uid=1234, gid=4321),
                   _entry("link", "sym", link="a/keep"), _entry("abs-link", "sym", link="/etc/passwd"),
                   _entry("hard", "hard", link="a/keep")])
    upper = layer([_entry("a/.wh.gone"), _entry("b/early", data=b"early"), _entry("b/.wh..wh..opq"),
                   _entry("b/new", data=b"new"), _entry(".wh.c"), _entry(".wh.d"), _entry("d", "dir"),
                   _entry("d/y", data=b"y"), _entry("a/keep", data=b"changed", mode=0o600)])
    digest = add_image(layout, "t:whiteouts", [lower, upper])
    root = unpack_image(layout, digest, tmp_path / "roots").path
    assert sorted(os.listdir(root / "a")) == ["keep"] and (root / "a" / "keep").read_bytes() == b"changed"
    assert sorted(os.listdir(root / "b")) == ["early", "new"]  # opaque: the lower layer's entries are gone
    assert not (root / "c").exists() and sorted(os.listdir(root / "d")) == ["y"]  # whiteout, then a new folder
    assert stat.S_IMODE(os.stat(root / "b").st_mode) == 0o750
    assert stat.S_IMODE(os.stat(root / "a" / "keep").st_mode) == 0o600
    assert os.readlink(root / "link") == "a/keep" and os.readlink(root / "abs-link") == "/etc/passwd"
    assert os.stat(root / "hard").st_ino != os.stat(root / "a" / "keep").st_ino  # the upper layer replaced keep
    assert (root / "hard").read_bytes() == b"keep"
    tool = os.lstat(root / "tool")
    if os.geteuid() == 0:
        assert (tool.st_uid, tool.st_gid) == (1234, 4321)
        assert stat.S_IMODE(tool.st_mode) == 0o755  # the setuid bit dropped (oci/unpack.py)
    assert tool.st_mtime == 1735689600
    again = unpack_image(layout, digest, tmp_path / "roots")
    assert again.reused and again.path == root


def test_a_hard_link_in_one_layer_shares_the_inode(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    digest = add_image(layout, "t:hard", [layer([_entry("f", data=b"one"), _entry("g", "hard", link="f")])])
    root = unpack_image(layout, digest, tmp_path / "roots").path
    assert os.stat(root / "f").st_ino == os.stat(root / "g").st_ino


def test_gzip_layers_without_a_gzip_binary_are_inflated_in_process(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import pinmatrix.oci.unpack as rootfs

    layout = tmp_path / "oci"
    blob = layer([_entry("g", data=b"gzip!" * 1000)])
    digest = add_image(layout, "t:gzip", [blob])
    monkeypatch.setattr(rootfs.shutil, "which", lambda _name: None)
    assert (unpack_image(layout, digest, tmp_path / "roots").path / "g").read_bytes() == b"gzip!" * 1000
    path = layout / "blobs" / "sha256" / hashlib.sha256(blob).hexdigest()
    path.write_bytes(blob[:-4] + bytes(4))  # the gzip trailer damaged: caught by the digest, in-process too
    with pytest.raises(RootfsError, match="does not match its digest"):
        unpack_image(layout, digest, tmp_path / "roots2")


def test_zstd_layers(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    digest = add_image(layout, "t:zstd", [layer([_entry("z", data=b"zstd!" * 1000)], "zstd")],
                       media="application/vnd.oci.image.layer.v1.tar+zstd")
    assert (unpack_image(layout, digest, tmp_path / "roots").path / "z").read_bytes() == b"zstd!" * 1000


def test_zstd_layers_without_a_zstd_binary_are_inflated_in_process(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU host without Debian's zstd still unpacks the zstd layers pinmatrix builds, through the same hash."""
    import pinmatrix.oci.unpack as rootfs

    layout = tmp_path / "oci"
    blob = layer([_entry("z", data=b"zstd!" * 1000)], "zstd")
    digest = add_image(layout, "t:zstd", [blob], media="application/vnd.oci.image.layer.v1.tar+zstd")
    monkeypatch.setattr(rootfs.shutil, "which", lambda _name: None)
    assert (unpack_image(layout, digest, tmp_path / "roots").path / "z").read_bytes() == b"zstd!" * 1000
    path = layout / "blobs" / "sha256" / hashlib.sha256(blob).hexdigest()
    path.write_bytes(blob + b"\0")  # one byte past the end: caught by the size and digest, in-process too
    with pytest.raises(RootfsError, match="does not match its digest|longer than"):
        unpack_image(layout, digest, tmp_path / "roots2")


@pytest.mark.parametrize(("entries", "member", "why"), [
    ([[_entry("evil", "sym", link="OUTSIDE")], [_entry("evil/planted", data=b"x")]], "evil/planted",
     "passes through the symlink /evil"),
    ([[_entry("/etc/planted", data=b"x")]], "/etc/planted", "absolute path"),
    ([[_entry("a/../../planted", data=b"x")]], "a/../../planted", "'..' path"),
    ([[_entry("h", "hard", link="../../etc/passwd")]], "h", "'..' path"),
    ([[_entry("h", "hard", link="/etc/passwd")]], "h", "absolute path"),
    ([[_entry("h", "hard", link="nothing/here")]], "h", "not in the root"),
    ([[_entry("evil", "sym", link="OUTSIDE")], [_entry("h", "hard", link="evil/passwd")]], "h",
     "passes through the symlink /evil"),
])
def test_a_member_that_would_leave_the_root_is_refused(tmp_path: Path, entries: list[list[Any]], member: str,
                                                      why: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    fixed = [[(_entry(i.name, "sym", link=str(outside))[0], b"") if i.issym() and i.linkname == "OUTSIDE" else (i, d)
              for i, d in group] for group in entries]
    layout = tmp_path / "oci"
    blobs = [layer(group) for group in fixed]
    digest = add_image(layout, "t:evil", blobs)
    bad = "sha256:" + hashlib.sha256(blobs[-1]).hexdigest()
    with pytest.raises(RootfsError) as err:
        unpack_image(layout, digest, tmp_path / "roots")
    line = str(err.value)
    assert line.startswith(f"layer {bad}: member {member!r}: ") and why in line and "\n" not in line
    assert os.listdir(outside) == []  # nothing written outside
    assert [p.name for p in (tmp_path / "roots").iterdir() if not p.name.endswith(".lock")] == []  # nor half a root


def test_a_tampered_layer_blob_is_refused_and_leaves_no_root(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    blob = layer([_entry("f", data=b"genuine content " * 64)])
    digest = add_image(layout, "t:tamper", [blob])
    path = layout / "blobs" / "sha256" / hashlib.sha256(blob).hexdigest()
    tampered = bytearray(blob)
    tampered[len(tampered) // 2] ^= 0x01
    path.write_bytes(bytes(tampered))
    with pytest.raises(RootfsError, match=r"does not match its digest and size.*tampered or damaged; refused"):
        unpack_image(layout, digest, tmp_path / "roots")
    assert [p.name for p in (tmp_path / "roots").iterdir() if not p.name.endswith(".lock")] == []
    path.write_bytes(blob + b"appended")  # the tar is intact, the blob is not
    with pytest.raises(RootfsError, match="longer than the"):
        unpack_image(layout, digest, tmp_path / "roots")
    path.write_bytes(blob)
    manifest = layout / "blobs" / "sha256" / digest[7:]
    manifest.write_bytes(manifest.read_bytes().replace(b'"schemaVersion": 2', b'"schemaVersion":  2'))
    with pytest.raises(RootfsError, match="manifest .* does not match its digest"):
        unpack_image(layout, digest, tmp_path / "roots")


def test_a_missing_blob_or_an_index_is_one_line(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    blob = layer([_entry("f", data=b"x")])
    digest = add_image(layout, "t:missing", [blob])
    (layout / "blobs" / "sha256" / hashlib.sha256(blob).hexdigest()).unlink()
    with pytest.raises(RootfsError, match=r"blob sha256:[0-9a-f]{64} is missing"):
        unpack_image(layout, digest, tmp_path / "roots")
    with pytest.raises(RootfsError, match="not an OCI image layout"):
        unpack_image(tmp_path / "nowhere", digest, tmp_path / "roots")


# ------------------------------------------------------------------------------------- inside the image


@pytest.fixture()
def looking_glass(demo: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """A demo image plus a layer with a user of its own, an Env, a WorkingDir; a catalogue with one smoke that
    reports what it sees."""
    first = sorted(demo["digests"].values())[0]
    blobs = demo["layout"] / "blobs" / "sha256"
    manifest = json.loads((blobs / first[7:]).read_bytes())
    base_root = unpack_image(demo["layout"], first, demo["roots"]).path
    passwd = (base_root / "etc" / "passwd").read_bytes() + b"pmtest:x:4242:4343::/home/pmtest:/bin/sh\n"
    group = (base_root / "etc" / "group").read_bytes() + b"pmtest:x:4343:\nextra:x:4444:pmtest\n"
    extra = layer([_entry("etc/passwd", data=passwd), _entry("etc/group", data=group),
                   _entry("srv", "dir", mode=0o755), _entry("srv/work", "dir", mode=0o755, uid=4242, gid=4343)])
    assert manifest["layers"]
    digest = add_image(demo["layout"], "t:looking-glass", [extra], base=first,
                       config={"Env": [*json.loads((blobs / manifest["config"]["digest"][7:]).read_bytes())
                                       ["config"]["Env"], "PMTEST_FLAG=from-image", "CUDA_HOME=/image/cuda"],
                               "User": "pmtest", "WorkingDir": "/srv/work"})
    smokes = tmp_path / "smoke"
    smokes.mkdir()
    (smokes / "where_am_i.py").write_text(SMOKE_MODULE)
    return {"digest": digest, "smokes": smokes, "tmp": tmp_path}


def _run(runtime: ChrootSmokes, smokes: Path, tmp: Path) -> Any:
    store = ResultsStore(tmp / "r.sqlite")
    options = RunOptions(smoke_dir=smokes, logs_dir=tmp / "logs", runtime=runtime, image_digest=runtime.image.digest)
    host = {"PMTEST_HOST_PATH": str(REPO / "matrix.toml"),  # passed only if the runtime leaked host variables
            "CUDA_HOME": "/host/cuda", "CUDA_VISIBLE_DEVICES": "0"}  # the image's CUDA_HOME wins, the other passes
    saved = {k: os.environ.get(k) for k in host}
    os.environ.update(host)
    try:
        run = run_cell(HostCell(), load_catalogue(smokes), store, options, host=HostFingerprint.make(hostname="t"),
                       run_id="t-run", echo=lambda _line: None)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    (record,) = run.records
    return record


@needs_root
@needs_unshare
def test_the_images_env_user_and_working_dir_apply_and_its_root_stays_as_unpacked(demo: dict[str, Any],
                                                                                 looking_glass: dict[str, Any]) -> None:
    runtime = prepare(demo["layout"], looking_glass["digest"], demo["roots"], looking_glass["smokes"],
                      smokes=load_catalogue(looking_glass["smokes"]), gpu_required=False,
                      log_dir=looking_glass["tmp"] / "probe", echo=lambda _line: None,
                      driver=DriverFiles(), dev=looking_glass["tmp"] / "no-dev")
    record = _run(runtime, looking_glass["smokes"], looking_glass["tmp"])
    assert record.status == "pass", (record.reason, Path(record.log_path).read_text()[-2000:])
    m = record.metrics
    assert (m["uid"], m["gid"], m["cwd"], m["flag"], m["home"]) == (4242, 4343, "/srv/work", "from-image",
                                                                     "/home/pmtest")
    assert m["python"] == "/opt/venv/bin/python" and m["proc"] == 1
    assert (m["cuda_home"], m["cuda_visible"]) == ("/image/cuda", "0")
    assert m["host_repo_visible"] == 0  # the host's files are not there
    assert set(m["dev"].split(",")) == {"full", "null", "random", "tty", "urandom", "zero", "shm", "fd", "stdin",
                                        "stdout", "stderr"}
    assert record.image_digest == looking_glass["digest"] and record.environment["runtime"] == "chroot-trusting-root"
    root = unpack_image(demo["layout"], looking_glass["digest"], demo["roots"])
    assert root.reused and not (root.path / "srv" / "work" / "scribble").exists()  # writes went to the overlay
    assert not (root.path / "opt" / "pinmatrix-smoke").exists()  # and so did the mount points
    assert resolve_user(root.path, "pmtest").groups == (4343, 4444)


@needs_root
@needs_unshare
def test_gpu_nodes_and_driver_libraries_are_bound_in(demo: dict[str, Any], looking_glass: dict[str, Any]) -> None:
    tmp = looking_glass["tmp"]
    lib, dev = tmp / "driver" / "lib64", tmp / "dev"
    lib.mkdir(parents=True)
    dev.mkdir()
    (lib / "libcuda.so.580.159.04").write_text("fake libcuda")
    (lib / "libcuda.so.1").symlink_to("libcuda.so.580.159.04")
    (lib / "libnvidia-ml.so.580.159.04").write_text("fake nvml")
    (lib / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.580.159.04")
    (lib / "libunrelated.so.1").write_text("not a driver library")
    os.mknod(dev / "nvidia0", stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a char node (the null device's numbers)
    driver = find_driver(library_dirs=(str(lib),), bin_dirs=(), use_ldconfig=False)
    assert driver.found and sorted(driver.libraries[(lib / "libcuda.so.580.159.04").resolve()]) == [
        "libcuda.so", "libcuda.so.1", "libcuda.so.580.159.04"]
    assert [p.name for p in gpu_device_nodes(dev)] == ["nvidia0"]
    runtime = prepare(demo["layout"], looking_glass["digest"], demo["roots"], looking_glass["smokes"],
                      smokes=load_catalogue(looking_glass["smokes"]), gpu_required=True, log_dir=tmp / "probe",
                      echo=lambda _line: None, driver=driver, dev=dev)
    record = _run(runtime, looking_glass["smokes"], tmp)
    m = record.metrics
    assert record.status == "pass" and m["nvidia0_is_char"] == 1 and m["libcuda"] == "fake libcuda"
    assert m["driver_libs"] == ("libcuda.so,libcuda.so.1,libcuda.so.580.159.04,libnvidia-ml.so,libnvidia-ml.so.1,"
                                "libnvidia-ml.so.580.159.04")
    assert m["ld_library_path"].split(":")[0] == "/opt/pinmatrix-driver/lib"


# ------------------------------------------------------------------------------------------------ refusals


@needs_root
@needs_unshare
def test_gpu_nodes_without_a_driver_library_are_refused_only_where_a_gpu_is_needed(
        demo: dict[str, Any], looking_glass: dict[str, Any]) -> None:
    tmp = looking_glass["tmp"]
    dev = tmp / "dev"
    dev.mkdir()
    os.mknod(dev / "nvidia0", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    common = {"log_dir": tmp / "probe", "echo": lambda _line: None, "driver": DriverFiles(), "dev": dev}
    with pytest.raises(ChrootRefused, match=r"GPU device nodes \(nvidia0\) but no NVIDIA driver library"):
        prepare(demo["layout"], looking_glass["digest"], demo["roots"], looking_glass["smokes"],
                smokes=load_catalogue(looking_glass["smokes"]), gpu_required=True, **common)
    cpu = prepare(demo["layout"], looking_glass["digest"], demo["roots"], looking_glass["smokes"],
                  smokes=load_catalogue(looking_glass["smokes"]), gpu_required=False, **common)
    assert cpu.driver.libraries == {}


def test_no_root_and_no_user_namespaces_is_refused() -> None:
    assert privilege_mode(euid=0, userns=False) == "root"
    assert privilege_mode(euid=1000, userns=True) == "userns"
    with pytest.raises(ChrootRefused, match=r"needs root or user namespaces, and this user \(uid 1000\) has neither"):
        privilege_mode(euid=1000, userns=False)


def test_an_image_for_another_architecture_needs_a_binfmt_handler(tmp_path: Path) -> None:
    root, binfmt = tmp_path / "root", tmp_path / "binfmt"
    root.mkdir()
    binfmt.mkdir()
    assert check_architecture("amd64", root, machine="x86_64", binfmt=binfmt) is None
    with pytest.raises(ChrootRefused, match="no enabled binfmt_misc handler runs arm64 binaries here"):
        check_architecture("arm64", root, machine="x86_64", binfmt=binfmt)
    entry = ("enabled\ninterpreter /usr/bin/qemu-aarch64-static\nflags: {flags}\noffset 0\n"
             "magic 7f454c460201010000000000000000000200b700\nmask ffffffffffffff00fffffffffffffffffeffffff\n")
    (binfmt / "qemu-aarch64").write_text(entry.format(flags="P"))
    with pytest.raises(ChrootRefused):  # not preloaded, and the root has no interpreter
        check_architecture("arm64", root, machine="x86_64", binfmt=binfmt)
    (binfmt / "qemu-aarch64").write_text(entry.format(flags="PF"))
    assert check_architecture("arm64", root, machine="x86_64", binfmt=binfmt) == "qemu-aarch64"
    (binfmt / "qemu-aarch64").write_text(entry.format(flags="PF").replace("enabled", "disabled"))
    with pytest.raises(ChrootRefused):
        check_architecture("arm64", root, machine="x86_64", binfmt=binfmt)


@needs_root
@needs_unshare
def test_a_root_that_cannot_be_entered_is_infrastructure_not_a_result(demo: dict[str, Any], tmp_path: Path) -> None:
    first = sorted(demo["digests"].values())[0]
    opt_moved = layer([_entry(".wh.opt"), _entry("srv", "dir"), _entry("opt", "sym", link="/srv")])
    digest = add_image(demo["layout"], "t:opt-is-a-link", [opt_moved], base=first)
    done = _pinmatrix("smoke", str(REPO / "matrix.toml"), "--stack", "demo", "--cell",
                      next(c for c, d in demo["digests"].items() if d == first), "--runtime", "chroot-trusting-root",
                      "--image", digest, "--layout", str(demo["layout"]), "--roots", str(demo["roots"]),
                      "--results", str(tmp_path / "r.sqlite"), "--logs", str(tmp_path / "logs"))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith(f"pinmatrix: error: image {digest}: pinmatrix chroot: setup failed: the image has a "
                                "symlink at /opt, where pinmatrix mounts"), done.stderr
    assert ResultsStore(tmp_path / "r.sqlite").query() == []  # nothing recorded against the cell


@needs_root
@needs_unshare
def test_an_unsafe_layer_is_one_line_from_the_command(demo: dict[str, Any], tmp_path: Path) -> None:
    first = sorted(demo["digests"].values())[0]
    evil = layer([_entry("usr/lib/os-release-link", "hard", link="../../../etc/shadow")])
    digest = add_image(demo["layout"], "t:evil", [evil], base=first)
    done = _pinmatrix("smoke", str(REPO / "matrix.toml"), "--stack", "demo", "--cell",
                      next(c for c, d in demo["digests"].items() if d == first), "--runtime", "chroot-trusting-root",
                      "--image", digest, "--layout", str(demo["layout"]), "--roots", str(tmp_path / "roots"),
                      "--results", str(tmp_path / "r.sqlite"), "--logs", str(tmp_path / "logs"))
    assert done.returncode == 2
    evil_digest = "sha256:" + hashlib.sha256(evil).hexdigest()
    assert done.stderr.strip().splitlines()[-1] == (
        f"pinmatrix: error: layer {evil_digest}: member 'usr/lib/os-release-link': a '..' path; refused")


def _interpreter_for(uid: int) -> str | None:
    """This interpreter, or the system's of the same version, if ``uid`` may run it (pytest's may live in /root)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/python{version}"):
        probe = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "env", candidate, "-c",
                                "import sys; print(sys.version_info[:2])"], capture_output=True, text=True,
                               check=False)
        if probe.returncode == 0 and probe.stdout.strip() == str(sys.version_info[:2]):
            return candidate
    return None


@needs_root
@pytest.mark.skipif(shutil.which("setpriv") is None or shutil.which("unshare") is None,
                    reason="needs util-linux setpriv and unshare")
def test_without_root_the_image_runs_in_a_user_namespace(demo: dict[str, Any]) -> None:
    import sysconfig
    import tempfile

    nobody = 65534
    python = _interpreter_for(nobody)
    if python is None:
        pytest.skip("no interpreter of this version that an unprivileged user may run")
    if subprocess.run(["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups", "unshare", "--user",
                       "--map-root-user", "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("unprivileged user namespaces are not allowed here")
    cell, digest = sorted(demo["digests"].items())[0]
    work = Path(tempfile.mkdtemp(prefix="pinmatrix-userns-"))
    try:
        os.chmod(work, 0o777)
        layout = work / "oci"
        blobs = layout / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        manifest = json.loads((demo["layout"] / "blobs" / "sha256" / digest[7:]).read_bytes())
        for d in [digest, manifest["config"]["digest"], *(layer["digest"] for layer in manifest["layers"])]:
            shutil.copy(demo["layout"] / "blobs" / "sha256" / d[7:], blobs / d[7:])
        shutil.copy(demo["layout"] / "index.json", layout / "index.json")
        for folder, dirs, files in os.walk(work):
            for name in dirs:
                os.chmod(os.path.join(folder, name), 0o755)
            for name in files:
                os.chmod(os.path.join(folder, name), 0o644)
        os.chmod(work, 0o777)
        path = os.pathsep.join([str(REPO / "src"), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
        done = subprocess.run(
            ["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups", "env", f"HOME={work}",
             f"PYTHONPATH={path}", python, "-m", "pinmatrix", "smoke", str(REPO / "matrix.toml"), "--stack", "demo",
             "--cell", cell, "--runtime", "chroot-trusting-root", "--layout", str(layout), "--roots",
             str(work / "roots"), "--results", str(work / "r.sqlite"), "--logs", str(work / "logs"), "--json",
             str(work / "run.json"), "--smoke-dir", str(REPO / "smoke")],
            capture_output=True, text=True, timeout=600, check=False, cwd=work)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert ", userns, " in done.stdout + done.stderr
        records = json.loads((work / "run.json").read_text())
        assert {r["status"] for r in records} == {"pass"} and {r["image_digest"] for r in records} == {digest}
        unpacked = work / "roots" / digest[7:] / "rootfs" / "etc" / "passwd"
        assert unpacked.stat().st_uid == nobody  # unpacked as that user: its own files are root's inside
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ------------------------------------------------------------------------------------- the kernel cache

CACHE_SMOKES = '''
import os
from _smokelib import Context, main

SMOKES = {
    "cache-write": {"func": "write", "description": "leaves a file in Triton's cache folder", "timeout_s": 60},
    "cache-read": {"func": "read", "description": "finds what the first smoke left", "timeout_s": 60},
}


def write(ctx: Context) -> None:
    folder = os.environ.get("TRITON_CACHE_DIR", "")
    ctx.metric("triton_cache", folder)
    ctx.metric("flashinfer_base", os.environ.get("FLASHINFER_WORKSPACE_BASE", ""))
    if folder:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "kernel.bin"), "w") as fh:
            fh.write("compiled once")
    ctx.summary = "wrote"


def read(ctx: Context) -> None:
    path = os.path.join(os.environ.get("TRITON_CACHE_DIR", "/nonexistent"), "kernel.bin")
    ctx.metric("found", open(path).read() if os.path.exists(path) else "")
    ctx.summary = "read"


if __name__ == "__main__":
    main(SMOKES, globals())
'''


def _cache_run(demo: dict[str, Any], digest: str, smokes: Path, tmp: Path, mode: str) -> dict[str, Any]:
    runtime = prepare(demo["layout"], digest, demo["roots"], smokes, smokes=load_catalogue(smokes),
                      gpu_required=False, log_dir=tmp / f"probe-{mode}", echo=lambda _line: None,
                      driver=DriverFiles(), dev=tmp / "no-dev", kernel_cache=mode)
    options = RunOptions(smoke_dir=smokes, logs_dir=tmp / f"logs-{mode}", runtime=runtime, rerun=True,
                         image_digest=digest, kernel_cache=mode)
    run = run_cell(HostCell(), load_catalogue(smokes), ResultsStore(tmp / f"{mode}.sqlite"), options,
                   host=HostFingerprint.make(hostname="t"), run_id=f"t-{mode}", echo=lambda _line: None)
    records = {r.smoke: r for r in run.records}
    for r in records.values():
        assert r.status == "pass", (r.reason, Path(r.log_path).read_text()[-2000:])
        assert r.environment["kernel_cache"] == mode
    return {name: r.metrics for name, r in records.items()}


@needs_root
@needs_unshare
def test_the_kernel_cache_is_shared_by_an_images_smokes_kept_emptied_or_off(demo: dict[str, Any],
                                                                           looking_glass: dict[str, Any]) -> None:
    smokes = looking_glass["tmp"] / "cache-smokes"
    smokes.mkdir()
    (smokes / "cache_smokes.py").write_text(CACHE_SMOKES)
    digest, tmp = looking_glass["digest"], looking_glass["tmp"]  # an image that runs as uid 4242
    folder = demo["roots"] / "kernel-cache" / digest[7:]
    shutil.rmtree(folder, ignore_errors=True)

    kept = _cache_run(demo, digest, smokes, tmp, "keep")
    assert kept["cache-write"]["triton_cache"] == "/var/cache/pinmatrix/triton"
    assert kept["cache-write"]["flashinfer_base"] == "/var/cache/pinmatrix"
    assert kept["cache-read"]["found"] == "compiled once"  # the second smoke sees the first one's kernels
    assert (folder / "triton" / "kernel.bin").read_text() == "compiled once"  # and the host keeps them
    assert os.stat(folder).st_uid == 4242 and stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    (folder / "triton" / "kernel.bin").write_text("from an earlier run")
    (folder / "triton" / "stale.bin").write_text("x")
    assert _cache_run(demo, digest, smokes, tmp, "keep")["cache-read"]["found"] == "compiled once"
    cold = _cache_run(demo, digest, smokes, tmp, "cold")  # emptied first, then shared again
    assert cold["cache-read"]["found"] == "compiled once" and not (folder / "triton" / "stale.bin").exists()
    off = _cache_run(demo, digest, smokes, tmp, "off")
    assert off["cache-write"]["triton_cache"] == "" and off["cache-read"]["found"] == ""


@needs_root
@needs_unshare
def test_the_image_or_the_cell_naming_its_own_cache_folder_wins(demo: dict[str, Any], tmp_path: Path) -> None:
    first = sorted(demo["digests"].values())[0]
    blobs = demo["layout"] / "blobs" / "sha256"
    manifest = json.loads((blobs / first[7:]).read_bytes())
    env = json.loads((blobs / manifest["config"]["digest"][7:]).read_bytes())["config"]["Env"]
    digest = add_image(demo["layout"], "t:own-cache", [layer([_entry("srv", "dir", mode=0o755)])], base=first,
                       config={"Env": [*env, "TRITON_CACHE_DIR=/srv/triton"]})
    smokes = tmp_path / "cache-smokes"
    smokes.mkdir()
    (smokes / "cache_smokes.py").write_text(CACHE_SMOKES)
    metrics = _cache_run(demo, digest, smokes, tmp_path, "keep")
    assert metrics["cache-write"]["triton_cache"] == "/srv/triton"  # the image's own, not the mount
    assert metrics["cache-write"]["flashinfer_base"] == "/var/cache/pinmatrix"  # the others still point at it
