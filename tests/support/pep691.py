"""A PEP 691 (JSON simple API) index on 127.0.0.1 serving fixed pages, for tests that lock or fetch wheels
without the network. ``serve_pages`` yields the server's base URL (``http://127.0.0.1:PORT``); paths it does not
hold answer 404. ``serve_handler`` serves any handler class the same way (hostile servers of other tests)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def serve_pages(pages: dict[str, bytes]) -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = pages.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    with serve_handler(Handler) as base:
        yield base


@contextmanager
def serve_handler(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threading HTTP server on 127.0.0.1 answering with ``handler``; yields ``http://127.0.0.1:PORT``. Its
    request threads are daemons, so a handler still writing or waiting cannot hold the test process."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
