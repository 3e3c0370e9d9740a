"""pinmatrix.oci.compression: the bytes of a compressed layer depend on the data, the format, the level and
the pinned library alone, never on the number of threads or how the tar arrives in pieces; every gzip and zstd
reader reads them back; the key names everything the bytes depend on; ``--compression`` text is parsed or refused
in one line; ``auto`` picks zstd only for an engine that reads it."""

from __future__ import annotations

import gzip
import io
import os
import random
import struct
import zlib

import pytest
import zstandard

from pinmatrix.oci import compression
from pinmatrix.oci.compression import (
    DEFAULT_COMPRESSION,
    GZIP_BLOCK,
    CompressionError,
    LayerCompression,
    check_readable,
    choose,
    for_consumer,
    requested,
)


def _data(size: int, seed: int = 7) -> bytes:
    """Compressible bytes with matches that reach back across block boundaries (repeats of earlier slices)."""
    rng = random.Random(seed)
    out = bytearray(rng.randbytes(4096))
    while len(out) < size:
        if rng.random() < 0.5:
            start = rng.randrange(max(1, len(out) - 30000), len(out))
            out += out[start:start + rng.randrange(16, 600)]
        else:
            out += rng.randbytes(rng.randrange(1, 300))
    return bytes(out[:size])


def _compress(chosen: LayerCompression, data: bytes, threads: int, piece: int) -> bytes:
    comp = chosen.compressor(threads)
    out = bytearray()
    for i in range(0, len(data), piece):
        out += comp.compress(data[i:i + piece])
    return bytes(out + comp.flush())


SIZES = [0, 1, GZIP_BLOCK - 1, GZIP_BLOCK, GZIP_BLOCK + 1, 3 * GZIP_BLOCK + 12345]


@pytest.mark.parametrize("size", SIZES)
def test_block_gzip_is_one_gzip_member_any_reader_inflates(size: int) -> None:
    data = _data(size)
    blob = _compress(LayerCompression("gzip", 1), data, threads=2, piece=65536)
    assert blob[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    assert gzip.decompress(blob) == data
    assert zlib.decompress(blob, 31) == data  # one member: zlib stops at its end, and there is nothing after it
    crc, isize = struct.unpack("<II", blob[-8:])
    assert crc == zlib.crc32(data) and isize == len(data)


@pytest.mark.parametrize("fmt,level", [("gzip", 1), ("gzip", 6), ("zstd", 3), ("zstd", 1), ("none", 0)])
def test_the_bytes_do_not_depend_on_threads_or_on_the_pieces_the_tar_comes_in(fmt: str, level: int) -> None:
    chosen = LayerCompression(fmt, level)  # type: ignore[arg-type]
    data = _data(5 * GZIP_BLOCK + 777)
    reference = _compress(chosen, data, threads=1, piece=len(data) or 1)
    for threads, piece in [(2, 10240), (3, GZIP_BLOCK), (4, 3 * GZIP_BLOCK + 1), (8, 1 << 16)]:
        assert _compress(chosen, data, threads, piece) == reference, (threads, piece)


def test_zstd_is_a_zstd_stream_of_the_data_and_smaller_than_gzip_level_1() -> None:
    data = _data(4 * GZIP_BLOCK)
    blob = _compress(LayerCompression("zstd", 3), data, threads=2, piece=1 << 16)
    assert blob[:4] == b"\x28\xb5\x2f\xfd"
    assert zstandard.ZstdDecompressor().stream_reader(io.BytesIO(blob), read_across_frames=True).read() == data
    assert len(blob) < len(_compress(LayerCompression("gzip", 1), data, threads=2, piece=1 << 16))


def test_each_block_is_primed_with_the_window_before_it() -> None:
    """Data that repeats across block boundaries: a block compressed without the 32 KiB before it (the bug a
    careless change makes) must spell out the repeated chunk again at its start, once per block."""
    from zlib_ng import zlib_ng

    chunk = os.urandom(20000)
    blocks = 6
    data = (chunk * ((blocks * GZIP_BLOCK) // len(chunk) + 2))[: blocks * GZIP_BLOCK + 100]
    blob = _compress(LayerCompression("gzip", 1), data, threads=2, piece=1 << 16)
    assert gzip.decompress(blob) == data
    unprimed = 0
    for i in range(0, len(data), GZIP_BLOCK):
        obj = zlib_ng.compressobj(1, zlib_ng.DEFLATED, -15)
        unprimed += len(obj.compress(data[i:i + GZIP_BLOCK]) + obj.flush())
    assert len(blob) < unprimed - blocks * len(chunk) // 2


def test_the_key_names_format_level_library_version_and_block() -> None:
    from zlib_ng import zlib_ng

    assert LayerCompression("gzip", 1).key == f"gzip-1/zlib-ng-{zlib_ng.ZLIBNG_VERSION}/block-{GZIP_BLOCK}"
    assert LayerCompression("zstd", 3).key == "zstd-3/libzstd-{}.{}.{}".format(*zstandard.ZSTD_VERSION)
    assert LayerCompression("none", 0).key == "none"
    keys = {LayerCompression(f, lv).key for f, lv in [("gzip", 1), ("gzip", 2), ("zstd", 3), ("zstd", 4), ("none", 0)]}
    assert len(keys) == 5


def test_media_types() -> None:
    assert LayerCompression("gzip", 1).media_type == "application/vnd.oci.image.layer.v1.tar+gzip"
    assert LayerCompression("zstd", 3).media_type == "application/vnd.oci.image.layer.v1.tar+zstd"
    assert LayerCompression("none", 0).media_type == "application/vnd.oci.image.layer.v1.tar"


@pytest.mark.parametrize("text,expected", [
    ("gzip", ("gzip", 1)), ("gzip:9", ("gzip", 9)), ("zstd", ("zstd", 3)), ("zstd:19", ("zstd", 19)),
    ("none", ("none", 0)), (" zstd:1 ", ("zstd", 1)),
])
def test_compression_text_is_parsed(text: str, expected: tuple[str, int]) -> None:
    chosen = LayerCompression.parse(text)
    assert (chosen.format, chosen.level) == expected
    assert LayerCompression.parse(str(chosen)) == chosen


@pytest.mark.parametrize("text,message", [
    ("brotli", "not one of gzip, zstd, none"), ("gzip:0", "level 0 is outside 1-9"),
    ("gzip:10", "level 10 is outside 1-9"), ("zstd:20", "level 20 is outside 1-19"), ("zstd:-1", "must be a number"),
    ("zstd:x", "must be a number"), ("none:1", "level 1 is outside 0-0"), ("gzip:", "must be a number"),
    ("zstd:" + "9" * 50, "must be a number"), ("", "not one of"),
])
def test_bad_compression_text_is_one_line(text: str, message: str) -> None:
    with pytest.raises(CompressionError, match=message) as err:
        LayerCompression.parse(text)
    assert "\n" not in str(err.value)


def test_auto_picks_zstd_only_for_an_engine_that_reads_it() -> None:
    assert for_consumer(True) == LayerCompression("zstd", 3)
    assert for_consumer(False) == DEFAULT_COMPRESSION == LayerCompression("gzip", 1)


def test_zstd_for_an_engine_that_cannot_read_it_is_refused() -> None:
    with pytest.raises(CompressionError, match=r"^--compression zstd:3: engine docker here cannot read zstd"):
        check_readable(LayerCompression("zstd", 3), "docker", reads_zstd=False)
    check_readable(LayerCompression("zstd", 3), "podman", reads_zstd=True)
    check_readable(LayerCompression("gzip", 1), "docker", reads_zstd=False)


def test_the_default_thread_count_is_the_cpus_this_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compression.os, "sched_getaffinity", lambda pid: {0, 1, 2})
    comp = LayerCompression("gzip", 1).compressor()
    assert isinstance(comp, compression.BlockGzip) and comp._pool is not None and comp._pool._max_workers == 3
    data = _data(2 * GZIP_BLOCK + 5)
    assert comp.compress(data) + comp.flush() == _compress(LayerCompression("gzip", 1), data, 1, len(data))


@pytest.mark.parametrize(("text", "engine", "reads", "expected"), [
    ("auto", "podman", True, "zstd:3"),
    ("auto", "docker", False, "gzip:1"),  # Debian's Docker 20.10
    ("auto", "docker", True, "zstd:3"),  # Docker >= 23
    ("auto", None, False, "gzip:1"),  # pushed or kept in the layout: the puller is not known
    ("auto", None, True, "gzip:1"),
    ("gzip:6", "podman", True, "gzip:6"),
    ("zstd:9", None, False, "zstd:9"),  # into the layout or a registry: the user's choice
])
def test_choose_follows_the_engine_that_loads_the_images(text: str, engine: str | None, reads: bool,
                                                         expected: str) -> None:
    assert str(choose(requested(text), engine, reads)) == expected


def test_choose_refuses_explicit_zstd_for_an_engine_that_cannot_read_it() -> None:
    with pytest.raises(CompressionError, match="engine docker here cannot read zstd layers"):
        choose(requested("zstd"), "docker", False)
    with pytest.raises(CompressionError, match="not one of"):
        requested("xz")
    assert requested("auto") is None


def test_an_image_with_zstd_layers_is_not_handed_to_an_engine_that_cannot_read_it() -> None:
    gz, zst = "application/vnd.oci.image.layer.v1.tar+gzip", "application/vnd.oci.image.layer.v1.tar+zstd"
    with pytest.raises(CompressionError, match=r"^r/x@sha256:1: 2 of its 3 layers are zstd, which engine docker "
                                               r"here cannot read \(Docker before 23\): pull with podman"):
        compression.check_pullable([gz, zst, zst], "r/x@sha256:1", "docker", reads_zstd=False)
    with pytest.raises(CompressionError) as docker_type:  # Docker's own media type for a zstd layer
        compression.check_pullable([gz, "application/vnd.docker.image.rootfs.diff.tar.zstd"], "r/x@sha256:1",
                                   "docker", reads_zstd=False)
    assert str(docker_type.value) == ("r/x@sha256:1: 1 of its 2 layers are zstd, which engine docker here cannot read "
                                      "(Docker before 23): pull with podman, or rebuild the cell with --compression gzip")
    compression.check_pullable([gz, zst], "r/x@sha256:1", "podman", reads_zstd=True)
    compression.check_pullable([gz, gz], "r/x@sha256:1", "docker", reads_zstd=False)
    compression.check_pullable([], "r/x@sha256:1", "docker", reads_zstd=False)


# Known answers: the sha256 of each compressor's bytes for one fixed input of exactly two blocks. Every image
# digest rests on these bytes; a change here (another block rule, window, memLevel, frame flag or library
# version) must come with a new key (LayerCompression.key names the library versions) and a new answer here.
KNOWN = {
    "gzip:1": "184ee92eca45f73428434b618fe8dde4eaefc707f44cd2b15aa1c15090531451",
    "zstd:1": "12444d0567bce0a4d8e5d1bf3705cf8ad2c4f1b25a4296f71aaa7097f6bdf664",
    "zstd:3": "15be5573f0245d9e587c6f975187359f07e41a50fb15f3143eda8501de2cdcb9",
}


@pytest.mark.parametrize("text", sorted(KNOWN))
def test_the_bytes_are_the_known_answer(text: str) -> None:
    import hashlib

    data = _data(2 * GZIP_BLOCK)  # a multiple of the block: the last block is cut at its end, not after it
    for threads in (1, 2):
        blob = _compress(LayerCompression.parse(text), data, threads, piece=1 << 16)
        assert hashlib.sha256(blob).hexdigest() == KNOWN[text], (text, threads)


def test_messages_name_the_value_and_the_choices() -> None:
    with pytest.raises(CompressionError) as made:
        LayerCompression("brotli", 1)  # type: ignore[arg-type]
    assert str(made.value) == "layer compression 'brotli': not one of gzip, zstd, none"
    with pytest.raises(CompressionError) as parsed:
        LayerCompression.parse("lz4")
    assert str(parsed.value) == "layer compression 'lz4': not one of gzip, zstd, none (with :LEVEL for gzip or zstd)"
    with pytest.raises(CompressionError) as refused:
        check_readable(LayerCompression("zstd", 3), "docker", reads_zstd=False)
    assert str(refused.value) == ("--compression zstd:3: engine docker here cannot read zstd layers (Docker before 23); "
                                  "use --compression gzip or auto")
    assert str(LayerCompression("none", 0)) == "none" and str(LayerCompression("gzip", 9)) == "gzip:9"
    assert str(choose(requested("zstd:9"), "podman", True)) == "zstd:9"  # an engine that reads zstd takes an explicit zstd


def test_each_layer_media_type_names_its_compression_and_others_none() -> None:
    assert compression.layer_format("application/vnd.oci.image.layer.v1.tar+zstd") == "zstd"
    assert compression.layer_format("application/vnd.docker.image.rootfs.diff.tar.gzip") == "gzip"
    assert compression.layer_format("application/vnd.oci.image.layer.nondistributable.v1.tar") == "none"
    for other in ("application/vnd.oci.image.config.v1+json", "application/x-foo+zstd", "", "tar+gzip"):
        assert compression.layer_format(other) is None
    # what the assembler writes is read back as what it is
    assert {compression.layer_format(m) for m in compression.MEDIA_TYPES.values()} == set(compression.FORMATS)
    assert all(compression.layer_format(compression.MEDIA_TYPES[f]) == f for f in compression.FORMATS)
