"""pinmatrix.oci.layer as the one reader of a tar: a layer streamed from any source (a registry's answer) in each
compression reads as its blob does, and leaves that source open; a plain tar file another tool wrote reads whole."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
import zstandard

from pinmatrix.oci.compression import LayerCompression
from pinmatrix.oci.layer import LayerWriter, open_layer, open_layer_stream, open_plain_tar


def _layer(blobs: Path, fmt: str) -> tuple[Path, str]:
    writer = LayerWriter(blobs, epoch=0, compression=LayerCompression(fmt, 1 if fmt != "none" else 0))  # type: ignore[arg-type]
    writer.add_bytes("var/lib/dpkg/status", b"Package: x\n" * 100)
    writer.add_symlink("usr/bin/python3", "python3.13")
    desc = writer.close()
    return blobs / desc.digest[7:], desc.media_type


def _read(tar: tarfile.TarFile) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for member in tar:
        handle = tar.extractfile(member) if member.isreg() else None
        out[member.name] = handle.read() if handle else member.linkname
    return out


@pytest.mark.parametrize("fmt", ["gzip", "zstd", "none"])
def test_a_streamed_layer_reads_as_its_blob_and_its_stream_stays_open(tmp_path: Path, fmt: str) -> None:
    path, media_type = _layer(tmp_path, fmt)
    with open_layer(path, media_type) as tar:
        expected = _read(tar)
    assert expected["var/lib/dpkg/status"] == b"Package: x\n" * 100 and expected["usr/bin/python3"] == "python3.13"
    stream = io.BytesIO(path.read_bytes())
    with open_layer_stream(stream, fmt) as tar:  # type: ignore[arg-type]
        assert _read(tar) == expected
    assert not stream.closed  # the caller's: it reads on to the end, where a registry reader checks the digest


@pytest.mark.parametrize(("fmt", "wrong"), [("gzip", "zstd"), ("zstd", "gzip"), ("gzip", "none")])
def test_a_stream_in_another_compression_is_refused(tmp_path: Path, fmt: str, wrong: str) -> None:
    path, _ = _layer(tmp_path, fmt)
    with pytest.raises((tarfile.TarError, zstandard.ZstdError, OSError)):  # noqa: PT012 - opening or reading fails
        with open_layer_stream(io.BytesIO(path.read_bytes()), wrong) as tar:  # type: ignore[arg-type]
            _read(tar)


def test_a_plain_tar_file_reads_whole(tmp_path: Path) -> None:
    path, _ = _layer(tmp_path, "none")
    with open_plain_tar(path) as tar:
        assert _read(tar)["var/lib/dpkg/status"] == b"Package: x\n" * 100
        assert tar.getmember("usr/bin/python3").linkname == "python3.13"  # a file: members found by name too
