"""rootfs._mmdebstrap's mode: as root it makes the base with --mode=root in a scratch folder of ours; as an ordinary
user in a user namespace (--mode=unshare), whose root (a subordinate id) cannot enter our private folders, so
mmdebstrap gets a folder of its own in the user's TMPDIR, removed afterwards; a failure there names what an ordinary user needs. And the one trace the mode
left in the base (apt's download folders' owner) is not in its layer."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from pinmatrix.image.assembly import rootfs
from pinmatrix.image.assembly.rootfs import BaseImageError, RootfsInputs
from pinmatrix.oci.layer import open_layer
from pinmatrix.oci.layout import OCILayout

INPUTS = RootfsInputs(suite="trixie", packages=("python3",), source_date_epoch=1735689600, arch="amd64",
                      mirror="http://mirror.invalid/debian", variant="essential")


def _run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, euid: int, returncode: int = 0) -> dict[str, Any]:
    """_mmdebstrap as ``euid`` with mmdebstrap replaced: what it was started with."""
    seen: dict[str, Any] = {}

    def fake_run(argv: list[str], *, env: dict[str, str], stdout: Any, stderr: Any) -> subprocess.CompletedProcess[str]:
        tmpdir = Path(env["TMPDIR"])
        seen.update(argv=argv, env=env, mode=tmpdir.stat().st_mode & 0o777)
        (tmpdir / "mmdebstrap.left").mkdir()  # its scratch, as an interrupted run would leave it
        stdout.write("E: remove_tree failed\n")
        return subprocess.CompletedProcess(argv, returncode)

    monkeypatch.setattr(rootfs.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(rootfs.os, "geteuid", lambda: euid)
    monkeypatch.setattr(rootfs.interrupt, "run", fake_run)
    (tmp_path / "users-tmp").mkdir()
    monkeypatch.setattr(rootfs.tempfile, "tempdir", str(tmp_path / "users-tmp"))  # the user's TMPDIR
    (tmp_path / "scratch").mkdir()
    rootfs._mmdebstrap(INPUTS, tmp_path / "scratch" / "base.tar", tmp_path / "base.log")
    return seen


def test_as_root_the_base_is_made_in_root_mode_in_our_scratch_folder(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    seen = _run(monkeypatch, tmp_path, euid=0)
    assert "--mode=root" in seen["argv"] and not any(a == "--mode=unshare" for a in seen["argv"])
    assert seen["env"]["TMPDIR"] == str(tmp_path / "scratch")
    assert seen["env"]["SOURCE_DATE_EPOCH"] == "1735689600"


def test_an_ordinary_user_makes_it_in_a_user_namespace_with_the_users_tmpdir(monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path: Path) -> None:
    seen = _run(monkeypatch, tmp_path, euid=65534)
    assert "--mode=unshare" in seen["argv"] and "--mode=root" not in seen["argv"]
    tmpdir = Path(seen["env"]["TMPDIR"])  # not our 0700 folder, which the namespace's root cannot enter
    assert tmpdir.parent == tmp_path / "users-tmp" and seen["mode"] == 0o755
    assert seen["env"]["SOURCE_DATE_EPOCH"] == "1735689600"
    assert list((tmp_path / "users-tmp").iterdir()) == []  # its folder, and what it left there, removed


@pytest.mark.parametrize(("euid", "hint"), [(65534, True), (0, False)])
def test_a_failure_names_what_an_ordinary_user_needs_only_for_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                  euid: int, hint: bool) -> None:
    with pytest.raises(BaseImageError) as raised:
        _run(monkeypatch, tmp_path, euid=euid, returncode=25)
    message = str(raised.value)
    assert message.startswith("mmdebstrap trixie (amd64) failed (exit 25): E: remove_tree failed")
    assert ("/etc/subuid and /etc/subgid" in message) is hint
    assert "\n" not in message


def _dir(tar: tarfile.TarFile, name: str, uid: int) -> None:
    info = tarfile.TarInfo("./" + name)
    info.type, info.mode, info.uid, info.gid, info.mtime = tarfile.DIRTYPE, 0o700, uid, 0, 1735689600
    tar.addfile(info)


def test_apts_download_folders_are_roots_in_the_layer_whichever_user_ran_apt(tmp_path: Path) -> None:
    """mmdebstrap --mode=unshare leaves apt's partial folders to _apt (42), --mode=root to root: the layer has them
    as root's either way, so a base an ordinary user makes is the root's, byte for byte; other owners are kept."""
    with tarfile.open(tmp_path / "base.tar", "w") as tar:
        for name in ("var", "var/cache", "var/cache/apt", "var/cache/apt/archives", "var/lib", "var/lib/apt",
                     "var/lib/apt/lists"):
            _dir(tar, name, 0)
        _dir(tar, "var/cache/apt/archives/partial", 42)
        _dir(tar, "var/lib/apt/lists/partial", 42)
        _dir(tar, "var/lib/apt/mirrors", 42)
    layout = OCILayout(tmp_path / "oci").init()
    layer, _ = rootfs._rootfs_layer(tmp_path / "base.tar", layout, 1735689600)
    with open_layer(layout.blob_path(layer.digest), layer.media_type) as tar:
        owners = {m.name.removeprefix("./").rstrip("/"): (m.uid, m.gid) for m in tar}
    assert owners["var/cache/apt/archives/partial"] == owners["var/lib/apt/lists/partial"] == (0, 0)
    assert owners["var/lib/apt/mirrors"] == (42, 0)
