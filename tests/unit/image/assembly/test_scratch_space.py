"""Where a scratch root goes (image/assembly/scratch_space.py): in memory only on a tmpfs that runs programs, with room
for the root and the machine's memory for it and the compile; a root left in memory by a process that is gone is
removed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pinmatrix.image.assembly import scratch_space
from pinmatrix.image.assembly.scratch_space import (
    HEADROOM,
    PREFIX,
    available_memory,
    in_memory,
    mount_of,
    remove_orphans,
    scratch_dir,
)

MOUNTS = """/dev/vda / ext4 rw,relatime 0 0
tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0
tmpfs /dev/shm/locked tmpfs rw,nosuid,nodev,noexec 0 0
/dev/vdb /mnt/with\\040space xfs rw 0 0
"""


def test_a_path_is_on_the_mount_with_the_longest_point_that_holds_it() -> None:
    assert mount_of(Path("/dev/shm/x"), MOUNTS) == ("tmpfs", {"rw", "nosuid", "nodev"})
    assert mount_of(Path("/dev/shm"), MOUNTS) == ("tmpfs", {"rw", "nosuid", "nodev"})
    assert mount_of(Path("/dev/shm/locked/y"), MOUNTS) == ("tmpfs", {"rw", "nosuid", "nodev", "noexec"})
    assert mount_of(Path("/dev/shmother"), MOUNTS) == ("ext4", {"rw", "relatime"})  # not inside /dev/shm
    assert mount_of(Path("/mnt/with space/z"), MOUNTS) == ("xfs", {"rw"})
    assert mount_of(Path("/x"), "garbage\n") is None


def test_a_mounts_line_of_four_fields_is_read_and_a_shorter_one_skipped() -> None:
    assert mount_of(Path("/m/x"), "tmpfs /m tmpfs rw\n") == ("tmpfs", {"rw"})
    assert mount_of(Path("/m/x"), "tmpfs /m tmpfs\n/dev/vda / ext4 rw 0 0\n") == ("ext4", {"rw"})  # read on past it


def test_of_two_mounts_on_one_point_the_later_one_is_seen() -> None:
    assert mount_of(Path("/m/x"), "/dev/vdb /m ext4 rw 0 0\ntmpfs /m tmpfs rw,noexec 0 0\n") == (
        "tmpfs", {"rw", "noexec"})


def test_the_files_are_read_whole_up_to_one_mib_and_a_missing_one_is_empty(tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.write_text("MemAvailable: 1 kB\n")
    big = tmp_path / "big"
    big.write_text("x" * (2 << 20))
    assert scratch_space._read(str(small)) == "MemAvailable: 1 kB\n"
    assert scratch_space._read(str(big)) == "x" * (1 << 20)
    assert scratch_space._read(str(tmp_path / "absent")) == ""
    odd = tmp_path / "odd"
    odd.write_bytes(b"caf\xc3\xa9 \xff\n")  # the kernel's text is ASCII; anything else is replaced, never raised
    assert scratch_space._read(str(odd)) == "caf\ufffd\ufffd \ufffd\n"


def test_the_root_fits_when_the_tmpfs_has_it_and_256_mib_more_free(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    _machine(monkeypatch, tmp_path, available=1 << 60)
    need = 1 << 30

    class Stats:
        f_frsize = 4096
        f_bavail = (need + (256 << 20)) // 4096

    monkeypatch.setattr(scratch_space.os, "statvfs", lambda path: Stats)
    assert in_memory(need, tmp_path)
    Stats.f_bavail -= 1
    assert not in_memory(need, tmp_path)


def test_available_memory_is_meminfos_memavailable_in_bytes() -> None:
    assert available_memory("MemTotal: 100 kB\nMemAvailable:  2048 kB\n") == 2048 * 1024
    assert available_memory("MemTotal: 100 kB\n") == 0
    assert available_memory("MemAvailable: lots\n") == 0


def _machine(monkeypatch: pytest.MonkeyPatch, memory: Path, *, fstype: str = "tmpfs", options: str = "rw",
             available: int = 64 << 30) -> None:
    texts = {"/proc/self/mounts": f"/dev/vda / ext4 rw 0 0\n{fstype} {memory.resolve()} {fstype} {options} 0 0\n",
             "/proc/meminfo": f"MemAvailable: {available // 1024} kB\n"}
    monkeypatch.setattr(scratch_space, "_read", lambda path: texts[path])


@pytest.mark.parametrize(("fstype", "options", "available", "need", "expected"), [
    ("tmpfs", "rw,nosuid", 64 << 30, 1 << 20, True),
    ("tmpfs", "rw,noexec", 64 << 30, 1 << 20, False),  # the generator runs the cell's Python there
    ("ext4", "rw", 64 << 30, 1 << 20, False),  # a disk: nothing gained
    ("tmpfs", "rw", HEADROOM + (1 << 20) - 1, 1 << 20, False),  # the root and the compile beside it do not fit
    ("tmpfs", "rw", HEADROOM + (1 << 20), 1 << 20, True),
    ("tmpfs", "rw", 64 << 30, 0, False),  # the root's size is not known
    ("tmpfs", "rw", 64 << 30, 1, True),
])
def test_a_root_goes_to_memory_only_when_the_tmpfs_runs_programs_and_memory_holds_it_and_the_compile(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fstype: str, options: str, available: int, need: int,
        expected: bool) -> None:
    _machine(monkeypatch, tmp_path, fstype=fstype, options=options, available=available)
    assert in_memory(need, tmp_path) is expected


def test_a_root_larger_than_the_tmpfs_has_room_for_goes_to_the_cache(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    _machine(monkeypatch, tmp_path, available=1 << 60)
    stats = os.statvfs(tmp_path)
    assert not in_memory(stats.f_bavail * stats.f_frsize, tmp_path)


def test_the_scratch_folder_is_in_memory_named_by_this_process_or_under_the_cache(monkeypatch: pytest.MonkeyPatch,
                                                                                  tmp_path: Path) -> None:
    memory, cache = tmp_path / "shm", tmp_path / "cache"
    memory.mkdir()
    _machine(monkeypatch, memory)
    with scratch_dir(cache, 1 << 20, memory) as folder:
        assert Path(folder).parent == memory and Path(folder).name.startswith(f"{PREFIX}{os.getpid()}-")
    assert list(memory.iterdir()) == []
    with scratch_dir(cache, 0, memory) as folder:
        assert Path(folder).parent == cache / "aot" and Path(folder).name.startswith("build-")
    with scratch_dir(cache, memory=memory) as folder:  # the root's size not given: not known, so the cache
        assert Path(folder).parent == cache / "aot"
    _machine(monkeypatch, memory, options="rw,noexec")
    with scratch_dir(cache, 1 << 20, memory) as folder:
        assert Path(folder).parent == cache / "aot"


def test_a_root_left_in_memory_by_a_process_that_is_gone_is_removed_and_no_other(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    orphan = tmp_path / f"{PREFIX}{gone}-abc"
    (orphan / "usr" / "lib").mkdir(parents=True)
    (orphan / "usr" / "lib" / "libx.so").write_bytes(b"x")
    (orphan / "usr").chmod(0o555)  # a read-only folder, as layers have
    mine = tmp_path / f"{PREFIX}{os.getpid()}-def"
    mine.mkdir()
    other = tmp_path / "someone-elses"
    other.mkdir()
    odd = tmp_path / f"{PREFIX}notapid-x"
    odd.mkdir()
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep").write_text("kept")
    dashed = tmp_path / f"{PREFIX}{gone}-ab-cd"  # the pid is the part before the first dash
    dashed.mkdir()
    link = tmp_path / f"{PREFIX}{gone}-link"
    link.symlink_to(target)  # a name like an orphan's, but a link: neither it nor what it points at is touched
    assert sorted(remove_orphans(tmp_path)) == sorted([orphan, dashed])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, other.name, odd.name, target.name,
                                                                 link.name])
    assert (target / "keep").read_text() == "kept"
    assert remove_orphans(tmp_path / "absent") == []


def test_a_left_root_of_another_user_is_not_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    theirs = tmp_path / f"{PREFIX}{gone}-abc"
    theirs.mkdir()
    monkeypatch.setattr(os, "getuid", lambda: theirs.stat().st_uid + 1)  # as if another user made it
    assert remove_orphans(tmp_path) == [] and theirs.is_dir()
