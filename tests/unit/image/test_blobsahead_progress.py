"""The progress of the blobs sent ahead during ``build --push`` (image/blobsahead.py), on a fake clock: bytes of
the blob, rate and time left, at most a line a second, through the build's step channel; the summary line as it
was. The uploads themselves: test_blobsahead.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from blobsahead_layers import put_layer

from pinmatrix.image.blobsahead import BlobsAhead
from pinmatrix.image.build import CellBuilder
from pinmatrix.image.settings import BuildSettings
from pinmatrix.oci.layout import OCILayout
from pinmatrix.registry.blobs import CHUNK
from pinmatrix.registry.client import Registry


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Reading(Registry):
    """Reads each body to its end the way http.client does (8 KiB asked each time), the clock moving 0.4 s a read."""

    def __init__(self, clock: _Clock) -> None:
        super().__init__("127.0.0.1:9")
        self.clock = clock

    def another(self) -> Registry:
        return self

    def push_blob_as(self, repository: str, digest: str, body: Callable[[], tuple[BinaryIO, int]]) -> bool:
        reader, _ = body()
        while reader.read(8192):
            self.clock.now += 0.4
        self.clock.now += 0.4
        reader.close()
        return True


def test_an_upload_says_bytes_of_the_blob_rate_and_time_left_at_most_once_a_second(tmp_path: Path) -> None:
    clock, said = _Clock(), []
    layout = OCILayout(tmp_path / "oci").init()
    big = put_layer(layout, b"x" * (6 * CHUNK))  # six reads of a chunk, 0.4 s apart, and the empty one at 2.4 s
    with BlobsAhead(_Reading(clock), "ahead/p", layout.blob_path, say=said.append, clock=clock) as ahead:
        ahead.add(big)
        report = ahead.finish()
    what = f"push: sending {big.digest[:19]} ahead"
    assert said == [f"{what}: 4.0 MiB of 6.0 MiB (66%), 3.3 MiB/s, 0:01 left",  # at 1.2 s
                    f"{what}: 6.0 MiB of 6.0 MiB (100%), 2.5 MiB/s, 0:00 left"]  # at 2.4 s
    assert report.describe() == "1 blob(s) sent ahead (6.3 MB), 0 already there"  # the summary as it was


def test_a_blob_sent_within_a_second_says_nothing_and_each_blob_has_its_own_meter(tmp_path: Path) -> None:
    clock, said = _Clock(), []
    layout = OCILayout(tmp_path / "oci").init()
    with BlobsAhead(_Reading(clock), "ahead/p", layout.blob_path, say=said.append, clock=clock) as ahead:
        for n in range(4):  # one read and the empty one each: 0.8 s per blob, 3.2 s in all
            ahead.add(put_layer(layout, bytes([n]) * 1000))
        assert ahead.finish().sent == 4
    assert said == []


def test_build_push_says_the_uploads_progress_through_the_cells_steps(tmp_path: Path) -> None:
    clock, said = _Clock(), []
    registry = _Reading(clock)
    builder = CellBuilder(BuildSettings(root=tmp_path, cache_dir=tmp_path / "cache", push=True), None, registry)
    builder.assembler.clock = clock  # the build's one clock: layer writes and uploads
    layer = put_layer(builder.assembler.layout.init(), b"y" * (3 * CHUNK))
    with builder._ahead("127.0.0.1:9/ahead/p:x", said.append) as ahead:  # noqa: SLF001 - the build's wiring
        assert ahead is not None
        ahead.add(layer)
        ahead.finish()
    assert said == [f"push: sending {layer.digest[:19]} ahead: 3.0 MiB of 3.0 MiB (100%), 2.5 MiB/s, 0:00 left"]
