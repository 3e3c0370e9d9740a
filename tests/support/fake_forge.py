"""A fake forge on 127.0.0.2 for the upstream tests: GitHub-REST-shaped answers per path (a pull request or
issue as JSON, or a hostile one: a lie about a field's type, a huge body, a slow or trickling one, a redirect),
and every request it saw with its headers. ``serve_forge`` yields its base URL and stops it at the end."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


def pull(number: int, *, state: str = "open", merged: bool = False, merged_at: str | None = None,
         closed_at: str | None = None, **more: Any) -> dict[str, Any]:
    """A pull request as the forge answers it, with a few of the fields pinmatrix ignores."""
    return {"number": number, "state": state, "merged": merged, "merged_at": merged_at, "closed_at": closed_at,
            "title": f"PR {number}", "html_url": f"https://github.com/o/pkg/pull/{number}", "draft": False,
            "user": {"login": "someone", "id": 1}, "labels": [], "comments": 3, **more}


@dataclass
class Route:
    status: int = 200
    body: bytes = b""
    delay: float = 0.0  # before the answer
    trickle: float = 0.0  # between its bytes, one at a time
    location: str | None = None  # a redirect's target


@dataclass
class FakeForge:
    routes: dict[str, Route] = field(default_factory=dict)
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # (path, headers)

    def answer(self, path: str, payload: dict[str, Any] | bytes, **route: Any) -> None:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.routes[path] = Route(body=body, **route)


@contextmanager
def serve_forge(forge: FakeForge, host: str = "127.0.0.2") -> Iterator[str]:
    """A threaded HTTP server on ``host`` answering ``forge``'s routes (404 elsewhere); yields its base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            forge.seen.append((self.path, dict(self.headers.items())))
            route = forge.routes.get(self.path, Route(404, b'{"message": "Not Found"}'))
            time.sleep(route.delay)
            try:
                self.send_response(route.status)
                if route.location:
                    self.send_header("Location", route.location)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(route.body)))
                self.end_headers()
                if route.trickle:
                    for i in range(len(route.body)):
                        self.wfile.write(route.body[i:i + 1])
                        self.wfile.flush()
                        time.sleep(route.trickle)
                else:
                    self.wfile.write(route.body)
            except OSError:
                pass

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer((host, 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
