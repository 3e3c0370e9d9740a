"""The image's User and WorkingDir resolved inside its root without following a symlink; mount points made there;
every value that cannot be honoured one line."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pinmatrix.smoke.sandbox_user import ImageRunRefused, in_root, resolve_user, working_dir


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\npm:x:4242:4343::/home/pm:/bin/sh\n"
                                          "big:x:4294967295:1::/:/bin/sh\n")
    (root / "etc" / "group").write_text("root:x:0:\npm:x:4343:\nextra:x:4444:pm\nhuge:x:99999999999:pm\n")
    return root


def test_users_by_name_id_and_group(tmp_path: Path) -> None:
    root = _root(tmp_path)
    assert resolve_user(root, "") == resolve_user(root, "root")
    assert resolve_user(root, "").home == "/root"
    assert resolve_user(root, "1000:pm").gid == 4343 and resolve_user(root, "1000").gid == 1000
    with pytest.raises(ImageRunRefused, match=r"the image's user 'ghost' is not in its /etc/passwd"):
        resolve_user(root, "ghost")
    with pytest.raises(ImageRunRefused, match=r"the image's group 'nope' is not in its /etc/group"):
        resolve_user(root, "pm:nope")


def test_an_id_no_kernel_takes_is_one_line(tmp_path: Path) -> None:
    root = _root(tmp_path)
    assert resolve_user(root, "4294967294").uid == 4294967294
    with pytest.raises(ImageRunRefused, match=r"^the image's User '99999999999': uid 99999999999 is above 4294967294"):
        resolve_user(root, "99999999999")
    with pytest.raises(ImageRunRefused, match=r"User 'big': uid 4294967295 is above"):
        resolve_user(root, "big")
    with pytest.raises(ImageRunRefused, match=r"User '0:99999999999': gid 99999999999 is above"):
        resolve_user(root, "0:99999999999")
    with pytest.raises(ImageRunRefused, match=r"User 'pm': gid 99999999999 is above"):  # pm is in group huge
        resolve_user(root, "pm")


def test_an_account_file_that_is_a_symlink_is_not_read(tmp_path: Path) -> None:
    root = _root(tmp_path)
    outside = tmp_path / "host-passwd"
    outside.write_text("evil:x:0:0::/:/bin/sh\n")
    (root / "etc" / "passwd").unlink()
    os.symlink(outside, root / "etc" / "passwd")
    with pytest.raises(ImageRunRefused, match="'evil' is not in its /etc/passwd"):
        resolve_user(root, "evil")


def test_working_dirs_are_made_inside_and_refused_under_proc_sys_or_through_links(tmp_path: Path) -> None:
    root = _root(tmp_path)
    assert working_dir(root, "/srv/./work/") == "/srv/work" and (root / "srv" / "work").is_dir()
    for bad, why in [("/proc/1/root/tmp/x", "under /proc"), ("/sys/kernel", "under /sys"),
                     ("relative", "not a plain absolute path"), ("/srv/../..", "not a plain absolute path")]:
        with pytest.raises(ImageRunRefused, match=why):
            working_dir(root, bad)
    os.symlink(str(tmp_path), root / "escape")
    with pytest.raises(ImageRunRefused, match=r"WorkingDir '/escape/made': /escape is a symlink in the image"):
        working_dir(root, "/escape/made")
    assert not (tmp_path / "made").exists()


def test_mount_points_are_made_in_folders_read_only_to_their_owner(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (root / "opt").mkdir(mode=0o555)
    os.chmod(root / "opt", 0o555)
    made = in_root(root, "/opt/pinmatrix-smoke/lib", what="mount point", make="dir")
    assert made.is_dir() and stat.S_IMODE((root / "opt").stat().st_mode) == 0o555
    assert in_root(root, "/opt/file", what="mount point", make="file").is_file()
    with pytest.raises(ImageRunRefused, match="a file in the image, where a folder is mounted"):
        in_root(root, "/opt/file", what="mount point", make="dir")
    with pytest.raises(ImageRunRefused, match="/nothing is not in the image"):
        in_root(root, "/nothing/here", what="mount point")


@pytest.mark.skipif(os.geteuid() == 0, reason="root enters any folder")
def test_a_folder_this_user_may_not_enter_is_one_line(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (root / "srv").mkdir(mode=0o644)
    os.chmod(root / "srv", 0o644)
    with pytest.raises(ImageRunRefused, match=r"WorkingDir '/srv/work': /srv/work: Permission denied in the unpacked"):
        working_dir(root, "/srv/work")
