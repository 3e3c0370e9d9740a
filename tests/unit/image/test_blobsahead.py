"""Layer blobs sent ahead of the push (image/blobsahead.py): against Debian's docker-registry on 127.0.0.1, a
registry that is not there, and a slow one on 127.0.0.1 that the build leaves in the middle of an upload."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pinmatrix.engine.services import Service
from pinmatrix.image.blobsahead import BlobsAhead
from pinmatrix.oci.layer import LayerDescriptor
from pinmatrix.oci.layout import OCILayout
from pinmatrix.registry.client import Registry


def _layer(layout: OCILayout, data: bytes) -> LayerDescriptor:
    digest = layout.put_blob(data)
    return LayerDescriptor(digest=digest, size=len(data), diff_id=digest,
                           media_type="application/vnd.oci.image.layer.v1.tar")


@pytest.mark.registry
def test_each_blob_handed_over_is_in_the_registry_after_finish_and_sent_once(docker_registry: Service,
                                                                              tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    layers = [_layer(layout, bytes([n]) * (n * 300_000 + 7)) for n in range(1, 4)]
    registry = Registry(docker_registry.address)
    with BlobsAhead(registry, "ahead/one", layout.blob_path) as ahead:
        for layer in [*layers, layers[0]]:
            ahead.add(layer)
        report = ahead.finish()
    assert (report.sent, report.present, report.stopped) == (3, 0, None)
    assert report.bytes_sent == sum(layer.size for layer in layers)
    for layer in layers:
        assert registry.get_blob("ahead/one", layer.digest) == layout.blob_path(layer.digest).read_bytes()
    new = _layer(layout, b"one more layer")
    with BlobsAhead(registry, "ahead/one", layout.blob_path) as ahead:
        for layer in [*layers, new]:
            ahead.add(layer)
        again = ahead.finish()
    assert (again.sent, again.present, again.bytes_sent) == (1, 3, new.size)
    assert again.describe() == "1 blob(s) sent ahead (0.0 MB), 3 already there"
    assert report.describe() == f"3 blob(s) sent ahead ({report.bytes_sent / 1e6:.1f} MB), 0 already there"
    assert report.describe() == "3 blob(s) sent ahead (1.8 MB), 0 already there"


def test_an_upload_reads_its_blob_a_chunk_at_a_time_never_whole(tmp_path: Path) -> None:
    import threading

    from pinmatrix.image.blobsahead import _CancellableReader
    from pinmatrix.registry.blobs import CHUNK

    blob = tmp_path / "blob"
    blob.write_bytes(b"z" * (3 * CHUNK + 5))
    reader = _CancellableReader(blob, threading.Event())
    sizes = [len(reader.read(8192)) for _ in range(5)]  # http.client asks for 8 KiB at a time
    reader.close()
    assert sizes == [CHUNK, CHUNK, CHUNK, 5, 0]


@pytest.mark.registry
def test_a_blob_that_is_not_its_digest_is_refused_and_sending_stops_with_the_reason(docker_registry: Service,
                                                                                     tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    good = _layer(layout, b"a good layer" * 1000)
    claimed = "sha256:" + hashlib.sha256(b"what the layer should be").hexdigest()
    layout.blob_path(claimed).write_bytes(b"what the file holds instead")
    bad = LayerDescriptor(digest=claimed, size=len(b"what the file holds instead"), diff_id=claimed,
                          media_type="application/vnd.oci.image.layer.v1.tar")
    registry = Registry(docker_registry.address)
    with BlobsAhead(registry, "ahead/bad", layout.blob_path) as ahead:
        ahead.add(bad)
        ahead.add(good)
        report = ahead.finish()
    assert report.sent == 0 and report.stopped is not None and claimed in report.stopped
    assert "stopped early" in report.describe()
    assert not registry.has_blob("ahead/bad", claimed) and not registry.has_blob("ahead/bad", good.digest)


def test_the_uploads_run_at_the_lowest_priority_so_they_take_only_the_cores_the_build_leaves(tmp_path: Path) -> None:
    import os
    import threading

    seen: list[int] = []

    class Watching(Registry):
        def another(self) -> Registry:
            return self

        def push_blob_as(self, repository, digest, body):  # noqa: ANN001, ANN201
            seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
            return True

    layout = OCILayout(tmp_path / "oci").init()
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    with BlobsAhead(Watching("127.0.0.1:9"), "ahead/nice", layout.blob_path) as ahead:
        ahead.add(_layer(layout, b"layer"))
        assert ahead.finish().sent == 1
    assert seen == [19]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own  # the caller's own is left as it was


def test_a_registry_that_is_not_there_stops_sending_without_raising(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    with BlobsAhead(Registry("127.0.0.1:9"), "ahead/none", layout.blob_path) as ahead:
        ahead.add(_layer(layout, b"layer"))
        report = ahead.finish()
    assert report.sent == 0 and report.stopped is not None and "unreachable" in report.stopped


class _SlowRegistry(http.server.BaseHTTPRequestHandler):
    """No blob is there; an upload's body is read 64 KiB at a time, slowly, and counted."""

    received: list[int]
    started: threading.Event

    def log_message(self, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:  # noqa: N802
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:  # noqa: N802
        self.send_response(202)
        self.send_header("Location", "/v2/ahead/slow/blobs/uploads/u1")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_PUT(self) -> None:  # noqa: N802
        length = int(self.headers["Content-Length"])
        self.started.set()
        got = 0
        while got < length:
            chunk = self.rfile.read(min(65536, length - got))
            if not chunk:
                break
            got += len(chunk)
            self.received.append(len(chunk))
            threading.Event().wait(0.01)
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def slow_registry() -> Iterator[tuple[str, type[_SlowRegistry]]]:
    handler = type("Handler", (_SlowRegistry,), {"received": [], "started": threading.Event()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_leaving_the_block_on_an_error_cuts_the_upload_under_way_off(slow_registry: tuple[str, type[_SlowRegistry]],
                                                                      tmp_path: Path) -> None:
    address, handler = slow_registry
    layout = OCILayout(tmp_path / "oci").init()
    big = _layer(layout, b"x" * (48 << 20))  # about 7 s at the server's pace
    later = _layer(layout, b"later")
    ahead = BlobsAhead(Registry(address), "ahead/slow", layout.blob_path)
    with pytest.raises(RuntimeError, match="the build failed"), ahead:
        ahead.add(big)
        ahead.add(later)
        assert handler.started.wait(30)
        raise RuntimeError("the build failed")
    assert not ahead._thread.is_alive()
    assert ahead._report.stopped == "the build ended first" and ahead._report.sent == 0
    assert sum(handler.received) < big.size  # cut off, not sent to the end
