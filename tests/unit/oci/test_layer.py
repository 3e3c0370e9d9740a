"""pinmatrix.oci.layer rule by rule: a layer's bytes depend on its entries alone (mtime the layer's epoch,
uid/gid 0 and no user names, modes normalised, parents added once in order, a gzip member with mtime 0 and no
file name, in the compression asked for), its digest and diff_id are the sha256 of the blob and of the tar, the blob
is moved under its digest (a blob already there is kept), copied entries keep their type, owner ids and link
targets but not their times past the epoch or their user names, and nothing outside the image root is written."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import zlib
from pathlib import Path

import pytest

from pinmatrix.oci.compression import DEFAULT_COMPRESSION, MEDIA_TYPES, LayerCompression
from pinmatrix.oci.layer import (
    LayerDescriptor,
    LayerWriter,
    open_layer,
)

EPOCH = 1735689600


def _blob(tmp_path: Path, desc: LayerDescriptor) -> bytes:
    return (tmp_path / desc.digest.removeprefix("sha256:")).read_bytes()


def _members(path: Path, media_type: str) -> list[tarfile.TarInfo]:
    with open_layer(path, media_type) as tar:
        return list(tar)


def _write(blobs: Path, *, epoch: int = EPOCH, level: int | None = DEFAULT_COMPRESSION.level,
           fmt: str = "gzip") -> LayerDescriptor:
    writer = LayerWriter(blobs, epoch=epoch,
                         compression=LayerCompression(fmt, level) if level is not None  # type: ignore[arg-type]
                         else LayerCompression("none", 0))
    writer.add_bytes("opt/venv/bin/tool", b"#!/bin/sh\n", executable=True)
    writer.add_bytes("opt/venv/lib/mod.py", b"x = 1\n" * 50)
    writer.add_symlink("opt/venv/bin/python3", "/usr/bin/python3")
    writer.add_dir("opt/venv/include")
    return writer.close()


# -- the descriptor -------------------------------------------------------------------------------------

def test_a_descriptor_is_written_as_oci_with_sorted_annotations_only_when_given() -> None:
    desc = LayerDescriptor("sha256:" + "a" * 64, 10, "sha256:" + "b" * 64, MEDIA_TYPES["gzip"], entries=3, unpacked=2048)
    assert desc.as_oci() == {"mediaType": MEDIA_TYPES["gzip"], "digest": "sha256:" + "a" * 64, "size": 10}
    assert desc.as_oci({}) == desc.as_oci()
    annotated = desc.as_oci({"z": "1", "a": "2"})
    assert list(annotated["annotations"]) == ["a", "z"]  # type: ignore[call-overload]
    assert annotated["annotations"] == {"a": "2", "z": "1"}


def test_a_descriptor_record_reads_back_the_same_and_old_records_count_zero_entries() -> None:
    desc = LayerDescriptor("sha256:" + "a" * 64, 10, "sha256:" + "b" * 64, MEDIA_TYPES["none"], entries=3, unpacked=2048)
    record = desc.to_json()
    assert record == {"digest": desc.digest, "size": 10, "diff_id": desc.diff_id, "media_type": MEDIA_TYPES["none"],
                      "entries": 3, "unpacked": 2048}
    assert LayerDescriptor.from_json(record) == desc
    old = {k: v for k, v in record.items() if k not in ("entries", "unpacked")}
    assert LayerDescriptor.from_json(old) == LayerDescriptor(desc.digest, 10, desc.diff_id, MEDIA_TYPES["none"], 0, 0)
    as_text = {k: str(v) for k, v in record.items()}  # a record written with strings still gives numbers
    assert LayerDescriptor.from_json(as_text) == desc  # type: ignore[arg-type]


# -- the bytes ------------------------------------------------------------------------------------------

def test_the_same_entries_give_the_same_bytes_in_another_directory_and_umask(tmp_path: Path) -> None:
    first = _write(tmp_path / "a")
    old = os.umask(0o077)
    try:
        second = _write(tmp_path / "b" / "deeper")  # blobs_dir and its parents are made
    finally:
        os.umask(old)
    assert first == second
    assert _blob(tmp_path / "a", first) == _blob(tmp_path / "b" / "deeper", second)
    assert _write(tmp_path / "c", epoch=EPOCH + 1).digest != first.digest  # the epoch is in the bytes


def test_digest_and_diff_id_are_the_sha256_of_the_blob_and_of_its_tar(tmp_path: Path) -> None:
    desc = _write(tmp_path)
    blob = _blob(tmp_path, desc)
    tar = zlib.decompress(blob, 31)
    assert desc.digest == "sha256:" + hashlib.sha256(blob).hexdigest()
    assert desc.diff_id == "sha256:" + hashlib.sha256(tar).hexdigest()
    assert (desc.size, desc.unpacked, desc.media_type) == (len(blob), len(tar), MEDIA_TYPES["gzip"])
    assert len(tar) % tarfile.RECORDSIZE == 0  # the tar ends on a record, as tarfile pads a file it writes
    names = [m.name for m in _members(tmp_path / desc.digest[7:], desc.media_type)]
    assert names == ["opt", "opt/venv", "opt/venv/bin", "opt/venv/bin/tool", "opt/venv/lib", "opt/venv/lib/mod.py",
                     "opt/venv/bin/python3", "opt/venv/include"]
    assert desc.entries == len(names)


def test_the_gzip_member_has_mtime_zero_no_name_and_the_level_asked_for(tmp_path: Path) -> None:
    for level in (1, 9):
        desc = _write(tmp_path / str(level), level=level)
        blob = _blob(tmp_path / str(level), desc)
        assert blob[:4] == b"\x1f\x8b\x08\x00"  # gzip, deflate, no flags: no file name, no comment
        assert blob[4:8] == b"\0\0\0\0"  # mtime 0
        assert blob[8:10] == b"\0\xff"  # no extra flags, OS unknown: nothing of the host
        tar = zlib.decompress(blob, 31)
        assert zlib.decompress(blob, 31) == tar and len(tar) == desc.unpacked
    assert _blob(tmp_path / "1", _write(tmp_path / "1")) != _blob(tmp_path / "9", _write(tmp_path / "9", level=9))
    # the default is gzip level 1: changing it changes every layer's bytes
    default = LayerWriter(tmp_path / "default", epoch=0)
    one = LayerWriter(tmp_path / "one", epoch=0, compression=LayerCompression("gzip", 1))
    for writer in (default, one):
        writer.add_bytes("opt/a", b"abc" * 1000)
    assert default.close() == one.close()


def test_a_layer_without_compression_is_the_tar_itself(tmp_path: Path) -> None:
    desc = _write(tmp_path, level=None)
    blob = _blob(tmp_path, desc)
    assert desc.media_type == MEDIA_TYPES["none"] and desc.digest == desc.diff_id and desc.size == desc.unpacked == len(blob)
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:") as tar:
        assert tar.getnames()[-1] == "opt/venv/include"
    assert [m.name for m in _members(tmp_path / desc.digest[7:], MEDIA_TYPES["none"])][-1] == "opt/venv/include"


def test_a_zstd_layer_is_one_zstd_stream_of_the_same_tar_read_back_by_open_layer(tmp_path: Path) -> None:
    import zstandard

    gz, zst = _write(tmp_path / "gz"), _write(tmp_path / "zst", fmt="zstd", level=3)
    blob = _blob(tmp_path / "zst", zst)
    assert blob[:4] == b"\x28\xb5\x2f\xfd"  # the zstd frame magic
    assert zst.media_type == "application/vnd.oci.image.layer.v1.tar+zstd"
    assert zst.diff_id == gz.diff_id and zst.digest != gz.digest  # the same tar, other bytes
    tar = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(blob), read_across_frames=True).read()
    assert "sha256:" + hashlib.sha256(tar).hexdigest() == zst.diff_id and zst.unpacked == len(tar)
    assert [m.name for m in _members(tmp_path / "zst" / zst.digest[7:], zst.media_type)] == \
        [m.name for m in _members(tmp_path / "gz" / gz.digest[7:], gz.media_type)]


def _open_fds_on(path: Path) -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == str(path)
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return count


@pytest.mark.parametrize(("fmt", "level"), [("zstd", 3), ("gzip", 1), ("none", None)])
@pytest.mark.parametrize("read_all", [True, False])
def test_closing_the_tar_of_open_layer_closes_the_blob_at_once(tmp_path: Path, fmt: str, level: int | None,
                                                               read_all: bool) -> None:
    """Not left to the garbage collector: the blob's descriptor is gone the moment the tar is closed, whether its
    entries were all read or not."""
    desc = _write(tmp_path, fmt=fmt, level=level)
    path = (tmp_path / desc.digest[7:]).resolve()
    tar = open_layer(path, desc.media_type)
    assert _open_fds_on(path) == 1
    names = [m.name for m in tar] if read_all else [tar.next().name]  # type: ignore[union-attr]
    assert names[0] == "opt"
    tar.close()
    assert _open_fds_on(path) == 0
    with open_layer(path, desc.media_type) as tar:
        assert tar.next() is not None
    assert _open_fds_on(path) == 0


def test_a_large_file_is_compressed_with_the_full_window(tmp_path: Path) -> None:
    block = os.urandom(24 << 10)  # repeated past a 16 KiB window: only the full 32 KiB window finds it
    writer = LayerWriter(tmp_path, epoch=0)
    writer.add_bytes("data", block * 2)
    desc = writer.close()
    assert desc.size < len(block) * 1.2


def test_every_entry_has_the_epoch_owner_zero_no_names_and_normalised_modes(tmp_path: Path) -> None:
    desc = _write(tmp_path)
    members = {m.name: m for m in _members(tmp_path / desc.digest[7:], desc.media_type)}
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members.values()} == {(EPOCH, 0, 0, "", "")}
    assert {n: (m.type, m.mode) for n, m in members.items()} == {
        "opt": (tarfile.DIRTYPE, 0o755), "opt/venv": (tarfile.DIRTYPE, 0o755), "opt/venv/bin": (tarfile.DIRTYPE, 0o755),
        "opt/venv/bin/tool": (tarfile.REGTYPE, 0o755), "opt/venv/lib": (tarfile.DIRTYPE, 0o755),
        "opt/venv/lib/mod.py": (tarfile.REGTYPE, 0o644), "opt/venv/bin/python3": (tarfile.SYMTYPE, 0o777),
        "opt/venv/include": (tarfile.DIRTYPE, 0o755)}
    assert members["opt/venv/bin/python3"].linkname == "/usr/bin/python3"
    assert members["opt/venv/lib/mod.py"].size == 300
    assert all(not m.pax_headers for m in members.values())  # nothing of the host in PAX records


def test_a_long_name_is_a_pax_record(tmp_path: Path) -> None:
    name = "opt/" + "d" * 120 + "/f.txt"
    writer = LayerWriter(tmp_path, epoch=0)
    writer.add_bytes(name, b"x")
    desc = writer.close()
    (member,) = [m for m in _members(tmp_path / desc.digest[7:], desc.media_type) if m.isreg()]
    assert member.name == name and member.pax_headers == {"path": name}


def test_a_directory_given_a_mode_keeps_it_and_is_written_once(tmp_path: Path) -> None:
    writer = LayerWriter(tmp_path, epoch=0)
    writer.add_dir("/srv/data/", mode=0o700)
    writer.add_dir("srv/data")
    writer.add_dir("srv")  # already added as a parent
    writer.add_bytes("srv/data/f", b"")
    desc = writer.close()
    members = _members(tmp_path / desc.digest[7:], desc.media_type)
    assert [(m.name, m.mode) for m in members] == [("srv", 0o755), ("srv/data", 0o700), ("srv/data/f", 0o644)]
    assert desc.entries == 3


@pytest.mark.parametrize("name", ["", "/", "a//b", "a/./b", "./a", "a/../../etc/passwd", "..", "a/."])
def test_an_entry_outside_the_image_root_is_refused(tmp_path: Path, name: str) -> None:
    writer = LayerWriter(tmp_path, epoch=0)
    for add in (lambda: writer.add_bytes(name, b"x"), lambda: writer.add_symlink(name, "t"),
                lambda: writer.add_dir(name + "/x" if name not in ("", "/") else name)):
        with pytest.raises(ValueError, match=r"^refusing a layer entry outside the image root: "):
            add()
    writer.abort()


def test_a_leading_slash_is_dropped(tmp_path: Path) -> None:
    writer = LayerWriter(tmp_path, epoch=0)
    writer.add_bytes("/etc/x", b"1")
    writer.add_symlink("/etc/y", "x")
    desc = writer.close()
    assert [m.name for m in _members(tmp_path / desc.digest[7:], desc.media_type)] == ["etc", "etc/x", "etc/y"]


# -- copied entries -------------------------------------------------------------------------------------

def _source_tar() -> tarfile.TarFile:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        def add(name: str, kind: bytes, **attrs: object) -> None:
            info = tarfile.TarInfo(name)
            info.type = kind
            data = attrs.pop("data", None)
            for key, value in {"mode": 0o644, "uid": 0, "gid": 0, "mtime": EPOCH - 100, **attrs}.items():
                setattr(info, key, value)
            if data is not None:
                info.size = len(data)  # type: ignore[arg-type]
            tar.addfile(info, io.BytesIO(data) if data is not None else None)  # type: ignore[arg-type]

        add("./", tarfile.DIRTYPE, mode=0o755)
        add(".", tarfile.DIRTYPE, mode=0o755)
        add("./usr/", tarfile.DIRTYPE, mode=0o755, mtime=EPOCH + 10**6)
        add("./usr/lib/", tarfile.DIRTYPE, mode=0o750, uid=5, gid=6)
        add("./usr/lib/a.so", tarfile.REGTYPE, mode=0o4755, uid=100, gid=101, uname="user", gname="group",
            data=b"ELF", pax_headers={"SCHILY.xattr.security.capability": "x", "atime": "1"})
        add("./usr/lib/b.so", tarfile.LNKTYPE, linkname="./usr/lib/a.so")
        add("./usr/lib/c.so", tarfile.SYMTYPE, linkname="./a.so", mode=0o777)
        add("./dev/null", tarfile.CHRTYPE, devmajor=1, devminor=3, mode=0o666)
        add("./usr/", tarfile.DIRTYPE, mode=0o700)  # a repeat: not written again
    buf.seek(0)
    return tarfile.open(fileobj=buf, mode="r:")


def test_a_copied_entry_keeps_type_mode_owner_ids_links_and_devices_but_not_names_or_later_times(
        tmp_path: Path) -> None:
    writer = LayerWriter(tmp_path, epoch=EPOCH)
    with _source_tar() as source:
        for member in source:
            writer.add_member(member, source.extractfile(member) if member.isreg() else None)
    desc = writer.close()
    out = _members(tmp_path / desc.digest[7:], desc.media_type)
    got = {m.name: (m.type, m.mode, m.uid, m.gid, m.linkname, m.mtime, m.uname, m.gname, m.size) for m in out}
    # copied as they come: a root filesystem's tar names its directories itself
    assert [m.name for m in out] == ["usr", "usr/lib", "usr/lib/a.so", "usr/lib/b.so", "usr/lib/c.so", "dev/null"]
    assert got["usr"] == (tarfile.DIRTYPE, 0o755, 0, 0, "", EPOCH, "", "", 0)  # a later time: the epoch
    assert got["usr/lib"] == (tarfile.DIRTYPE, 0o750, 5, 6, "", EPOCH - 100, "", "", 0)
    assert got["usr/lib/a.so"] == (tarfile.REGTYPE, 0o4755, 100, 101, "", EPOCH - 100, "", "", 3)
    assert got["usr/lib/b.so"] == (tarfile.LNKTYPE, 0o644, 0, 0, "usr/lib/a.so", EPOCH - 100, "", "", 0)
    assert got["usr/lib/c.so"] == (tarfile.SYMTYPE, 0o777, 0, 0, "./a.so", EPOCH - 100, "", "", 0)
    null = next(m for m in out if m.name == "dev/null")
    assert (null.type, null.devmajor, null.devminor) == (tarfile.CHRTYPE, 1, 3)
    assert all(not m.pax_headers for m in out)  # xattrs and atimes of the source are not copied
    with open_layer(tmp_path / desc.digest[7:], desc.media_type) as tar:
        for member in tar:
            if member.name == "usr/lib/a.so":
                handle = tar.extractfile(member)
                assert handle is not None and handle.read() == b"ELF"
    assert desc.entries == 6


def test_a_copied_directory_the_layer_already_holds_is_skipped_and_a_later_file_needs_no_new_parent(
        tmp_path: Path) -> None:
    writer = LayerWriter(tmp_path, epoch=EPOCH)
    writer.add_bytes("usr/lib/x", b"x")
    with _source_tar() as source:
        for member in source:
            if member.isdir():
                writer.add_member(member, None)
    writer.add_bytes("dev/y", b"")  # dev/ is not a copied entry: added once, as a parent
    desc = writer.close()
    names = [m.name for m in _members(tmp_path / desc.digest[7:], desc.media_type)]
    assert names == ["usr", "usr/lib", "usr/lib/x", "dev", "dev/y"]


def test_a_copied_entry_outside_the_image_root_is_refused(tmp_path: Path) -> None:
    writer = LayerWriter(tmp_path, epoch=0)
    info = tarfile.TarInfo("./../etc/passwd")
    with pytest.raises(ValueError, match="outside the image root"):
        writer.add_member(info, io.BytesIO(b""))
    writer.abort()


# -- the blob store -------------------------------------------------------------------------------------

def test_the_blob_is_written_beside_the_others_and_moved_under_its_digest(tmp_path: Path) -> None:
    writer = LayerWriter(tmp_path, epoch=0)
    writer.add_bytes("x", b"x")
    (temp,) = list(tmp_path.iterdir())
    assert temp.name == f".layer-{os.getpid()}-{id(writer):x}.tmp"  # the pid: oci.py removes a dead writer's
    desc = writer.close()
    assert [p.name for p in tmp_path.iterdir()] == [desc.digest[7:]]


def test_a_blob_already_stored_is_kept_and_the_new_copy_removed(tmp_path: Path) -> None:
    first = _write(tmp_path)
    path = tmp_path / first.digest[7:]
    inode = path.stat().st_ino
    second = _write(tmp_path)
    assert second == first and path.stat().st_ino == inode  # not replaced: a hard link to it stays shared
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_an_aborted_layer_leaves_nothing_and_may_be_aborted_twice(tmp_path: Path) -> None:
    writer = LayerWriter(tmp_path, epoch=0)
    writer.add_bytes("x", b"x" * 1000)
    writer.abort()
    writer.abort()
    assert list(tmp_path.iterdir()) == [] and writer._file.closed


def test_a_blob_store_that_exists_is_used_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "keep").write_bytes(b"k")
    desc = _write(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([desc.digest[7:], "keep"])


def test_names_that_begin_or_end_with_any_letter_are_kept_whole(tmp_path: Path) -> None:
    writer = LayerWriter(tmp_path, epoch=0)
    writer.add_dir("etc/X/")  # only slashes are stripped, never a letter
    writer.add_bytes("/X11/xorg.conf", b"")
    writer.add_symlink("usr/lib/libX", "libX.so.6")
    desc = writer.close()
    names = [m.name for m in _members(tmp_path / desc.digest[7:], desc.media_type)]
    assert names == ["etc", "etc/X", "X11", "X11/xorg.conf", "usr", "usr/lib", "usr/lib/libX"]


def test_a_streamed_file_is_plain_unless_said_executable(tmp_path: Path) -> None:
    writer = LayerWriter(tmp_path, epoch=0)
    writer.add_file("opt/data.bin", io.BytesIO(b"1234"), 4)
    writer.add_file("opt/run", io.BytesIO(b"#!"), 2, executable=True)
    desc = writer.close()
    modes = {m.name: m.mode for m in _members(tmp_path / desc.digest[7:], desc.media_type)}
    assert modes == {"opt": 0o755, "opt/data.bin": 0o644, "opt/run": 0o755}


def _tar_of(*members: tuple[tarfile.TarInfo, bytes | None]) -> tarfile.TarFile:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    buf.seek(0)
    return tarfile.open(fileobj=buf, mode="r|")


def _copy(tmp_path: Path, source: tarfile.TarFile) -> dict[str, bytes | None]:
    writer = LayerWriter(tmp_path, epoch=0)
    with source:
        for member in source:
            writer.add_member(member, source.extractfile(member) if member.isreg() else None)
    desc = writer.close()
    out: dict[str, bytes | None] = {}
    with open_layer(tmp_path / desc.digest[7:], desc.media_type) as tar:
        for member in tar:
            handle = tar.extractfile(member) if member.isreg() else None
            out[member.name] = handle.read() if handle else None
    return out


def test_a_copied_link_whose_header_claims_a_size_is_written_without_it(tmp_path: Path) -> None:
    link = tarfile.TarInfo("lnk")
    link.type, link.linkname, link.size = tarfile.SYMTYPE, "x", 600  # a hostile base's header: no data follows
    after = tarfile.TarInfo("after")
    after.size = 5
    assert _copy(tmp_path, _tar_of((link, None), (after, b"hello"))) == {"lnk": None, "after": b"hello"}
    (blob,) = [p for p in tmp_path.iterdir()]
    with open_layer(blob, MEDIA_TYPES["gzip"]) as tar:  # what GNU tar or containers/storage would skip as the link's data
        assert {m.name: m.size for m in tar} == {"lnk": 0, "after": 5}


def test_a_copied_name_is_kept_but_for_its_dot_slash(tmp_path: Path) -> None:
    entries = []
    for name in ("./opt/name ", "./usr/lib/libX", "./etc/ X"):
        info = tarfile.TarInfo(name)
        info.size = 1
        entries.append((info, b"1"))
    assert set(_copy(tmp_path, _tar_of(*entries))) == {"opt/name ", "usr/lib/libX", "etc/ X"}


@pytest.mark.parametrize("fmt", ["gzip", "zstd", "none"])
def test_open_layer_copies_members_out_a_mebibyte_at_a_time_and_reads_them_whole(tmp_path: Path, fmt: str) -> None:
    writer = LayerWriter(tmp_path, epoch=EPOCH, compression=LayerCompression.parse(fmt))
    big = os.urandom(3 << 20)
    writer.add_bytes("opt/big.bin", big)
    desc = writer.close()
    with open_layer(tmp_path / desc.digest.removeprefix("sha256:"), desc.media_type) as tar:
        assert tar.copybufsize == 1 << 20  # tarfile's 16 KiB default costs a call per 16 KiB unpacked
        tar.extractall(tmp_path / "out", filter="tar")
    assert (tmp_path / "out/opt/big.bin").read_bytes() == big
