"""Layer blobs sent ahead of the push (image/blobsahead.py): a registry that is not there, and a slow one on
127.0.0.1 that the build leaves in the middle of an upload. Against Debian's docker-registry:
tests/integration/test_blobsahead_registry.py."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from blobsahead_layers import put_layer

from pinmatrix.image.blobsahead import BlobsAhead
from pinmatrix.oci.layout import OCILayout
from pinmatrix.registry.client import Registry


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
        ahead.add(put_layer(layout, b"layer"))
        assert ahead.finish().sent == 1
    assert seen == [19]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own  # the caller's own is left as it was


def test_a_registry_that_is_not_there_stops_sending_without_raising(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    with BlobsAhead(Registry("127.0.0.1:9"), "ahead/none", layout.blob_path) as ahead:
        ahead.add(put_layer(layout, b"layer"))
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
    big = put_layer(layout, b"x" * (48 << 20))  # about 7 s at the server's pace
    later = put_layer(layout, b"later")
    ahead = BlobsAhead(Registry(address), "ahead/slow", layout.blob_path)
    with pytest.raises(RuntimeError, match="the build failed"), ahead:
        ahead.add(big)
        ahead.add(later)
        assert handler.started.wait(30)
        raise RuntimeError("the build failed")
    assert not ahead._thread.is_alive()
    assert ahead._report.stopped == "the build ended first" and ahead._report.sent == 0
    assert sum(handler.received) < big.size  # cut off, not sent to the end
