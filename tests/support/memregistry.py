"""An honest OCI distribution registry in memory, on 127.0.0.1, for the tests of pinmatrix.registry.client and
of the evidence built on it (attest, verify) that need no docker-registry: blobs per repository (with
cross-repository mounts), upload sessions, manifests by tag and by digest, tag lists, a paginated catalog, and,
when asked, the OCI 1.1 referrers API. It checks what it is sent as a registry does (a blob or a manifest PUT by
digest must hash to it) and records every request, so a test can see what pinmatrix sent.

Switches for the cases an honest registry may present: ``referrers_api`` (serve /referrers/), ``mounts``
(answer a mount with 201, else with an upload session as a registry may), ``catalog_page`` (names per page),
``basic`` (a user:password every request must carry)."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OCI_INDEX = "application/vnd.oci.image.index.v1+json"


def digest_of(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


@dataclass
class MemoryRegistry:
    referrers_api: bool = False
    deletes: bool = False  # DELETE of a manifest by digest (distribution's storage.delete.enabled); else 405
    mounts: bool = True
    catalog_page: int = 1000
    basic: tuple[str, str] | None = None
    blobs: dict[str, bytes] = field(default_factory=dict)  # digest -> bytes (content store)
    linked: dict[str, set[str]] = field(default_factory=dict)  # repository -> digests it holds
    manifests: dict[str, tuple[bytes, str]] = field(default_factory=dict)  # digest -> (body, media type)
    tags: dict[str, dict[str, str]] = field(default_factory=dict)  # repository -> tag -> digest
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # (method, path, Authorization)
    address: str = ""

    # -- what a test puts in directly ------------------------------------------------------------------
    def add_blob(self, repository: str, data: bytes) -> str:
        digest = digest_of(data)
        self.blobs[digest] = data
        self.linked.setdefault(repository, set()).add(digest)
        return digest

    def add_manifest(self, repository: str, body: bytes, media_type: str, tag: str | None = None) -> str:
        digest = digest_of(body)
        self.manifests[digest] = (body, media_type)
        self.linked.setdefault(repository, set()).add(digest)
        if tag:
            self.tags.setdefault(repository, {})[tag] = digest
        return digest

    def referrers_of(self, repository: str, digest: str) -> list[dict[str, object]]:
        out = []
        for d in sorted(self.linked.get(repository, ())):
            if d not in self.manifests:
                continue
            body, media_type = self.manifests[d]
            doc = json.loads(body)
            if (doc.get("subject") or {}).get("digest") == digest:
                desc: dict[str, object] = {"mediaType": media_type, "digest": d, "size": len(body)}
                if doc.get("artifactType"):
                    desc["artifactType"] = doc["artifactType"]
                if doc.get("annotations"):
                    desc["annotations"] = doc["annotations"]
                out.append(desc)
        return out


def _handler(reg: MemoryRegistry) -> type[BaseHTTPRequestHandler]:
    uploads = itertools.count(1)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _error(self, status: int, code: str) -> None:
            self._send(status, json.dumps({"errors": [{"code": code, "message": code.lower()}]}).encode(),
                       {"Content-Type": "application/json"})

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _start(self) -> tuple[str, dict[str, list[str]]] | None:
            reg.requests.append((self.command, self.path, self.headers.get("Authorization")))
            if reg.basic is not None:
                want = "Basic " + base64.b64encode(":".join(reg.basic).encode()).decode()
                if self.headers.get("Authorization") != want:
                    if self.command in ("PUT", "POST"):
                        self._body()
                    self._send(401, b"", {"WWW-Authenticate": 'Basic realm="memory"'})
                    return None
            split = urllib.parse.urlsplit(self.path)
            return split.path, urllib.parse.parse_qs(split.query)

        def _route(self, path: str) -> tuple[str, str, str] | None:
            """(repository, kind, rest) for /v2/<repository>/<kind>/<rest>."""
            for kind in ("manifests", "blobs/uploads", "blobs", "tags", "referrers"):
                marker = f"/{kind}/"
                if path.startswith("/v2/") and marker in path:
                    repo, _, rest = path[4:].partition(marker)
                    return repo, kind, rest
            return None

        def do_HEAD(self) -> None:  # noqa: N802
            self.do_GET()

        def do_GET(self) -> None:  # noqa: N802
            started = self._start()
            if started is None:
                return
            path, query = started
            if path == "/v2/":
                return self._send(200, b"{}", {"Content-Type": "application/json"})
            if path == "/v2/_catalog":
                names = sorted(r for r in reg.linked if reg.linked[r])
                last = query.get("last", [""])[0]
                n = min(int(query.get("n", ["1000"])[0]), reg.catalog_page)
                page = [r for r in names if r > last][:n]
                headers = {"Content-Type": "application/json"}
                if page and page[-1] != names[-1]:
                    headers["Link"] = f'</v2/_catalog?n={n}&last={page[-1]}>; rel="next"'
                return self._send(200, json.dumps({"repositories": page}).encode(), headers)
            route = self._route(path)
            if route is None:
                return self._error(404, "NAME_UNKNOWN")
            repo, kind, rest = route
            if kind == "manifests":
                digest = rest if rest.startswith("sha256:") else reg.tags.get(repo, {}).get(rest)
                if digest is None or digest not in reg.linked.get(repo, ()) or digest not in reg.manifests:
                    return self._error(404, "MANIFEST_UNKNOWN")
                body, media_type = reg.manifests[digest]
                return self._send(200, body, {"Content-Type": media_type, "Docker-Content-Digest": digest})
            if kind == "blobs":
                if rest not in reg.linked.get(repo, ()) or rest not in reg.blobs:
                    return self._error(404, "BLOB_UNKNOWN")
                return self._send(200, reg.blobs[rest], {"Content-Type": "application/octet-stream",
                                                         "Docker-Content-Digest": rest})
            if kind == "tags" and rest == "list":
                if repo not in reg.tags and repo not in reg.linked:
                    return self._error(404, "NAME_UNKNOWN")
                return self._send(200, json.dumps({"name": repo, "tags": sorted(reg.tags.get(repo, {}))}).encode(),
                                  {"Content-Type": "application/json"})
            if kind == "referrers" and reg.referrers_api:
                found = reg.referrers_of(repo, rest)
                wanted = query.get("artifactType", [None])[0]
                if wanted:
                    found = [d for d in found if d.get("artifactType") == wanted]
                body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": found}).encode()
                return self._send(200, body, {"Content-Type": OCI_INDEX})
            return self._error(404, "NAME_UNKNOWN")

        def do_POST(self) -> None:  # noqa: N802
            started = self._start()
            if started is None:
                return
            path, query = started
            self._body()
            route = self._route(path)
            if route is None or route[1] != "blobs/uploads":
                return self._error(404, "NAME_UNKNOWN")
            repo = route[0]
            mount, source = query.get("mount", [None])[0], query.get("from", [None])[0]
            if mount and source and reg.mounts and mount in reg.linked.get(source, ()):
                reg.linked.setdefault(repo, set()).add(mount)
                return self._send(201, b"", {"Location": f"/v2/{repo}/blobs/{mount}", "Docker-Content-Digest": mount})
            with lock:
                session = next(uploads)
            return self._send(202, b"", {"Location": f"/v2/{repo}/blobs/uploads/{session}?state=s{session}"})

        def do_PUT(self) -> None:  # noqa: N802
            started = self._start()
            if started is None:
                return
            path, query = started
            body = self._body()
            route = self._route(path)
            if route is None:
                return self._error(404, "NAME_UNKNOWN")
            repo, kind, rest = route
            if kind == "blobs/uploads":
                digest = query.get("digest", [""])[0]
                if digest_of(body) != digest:
                    return self._error(400, "DIGEST_INVALID")
                reg.add_blob(repo, body)
                return self._send(201, b"", {"Location": f"/v2/{repo}/blobs/{digest}", "Docker-Content-Digest": digest})
            if kind == "manifests":
                digest = digest_of(body)
                if rest.startswith("sha256:") and rest != digest:
                    return self._error(400, "DIGEST_INVALID")
                reg.add_manifest(repo, body, self.headers.get("Content-Type", ""),
                                 None if rest.startswith("sha256:") else rest)
                return self._send(201, b"", {"Docker-Content-Digest": digest})
            return self._error(404, "NAME_UNKNOWN")

        def do_DELETE(self) -> None:  # noqa: N802
            started = self._start()
            if started is None:
                return
            route = self._route(started[0])
            if route is None or route[1] != "manifests" or not route[2].startswith("sha256:"):
                return self._error(404, "NAME_UNKNOWN")
            if not reg.deletes:
                return self._error(405, "UNSUPPORTED")
            repo, _, digest = route
            if digest not in reg.linked.get(repo, set()):
                return self._error(404, "MANIFEST_UNKNOWN")
            reg.linked[repo].discard(digest)
            return self._send(202)

    return Handler


@contextmanager
def serve_registry(reg: MemoryRegistry | None = None) -> Iterator[MemoryRegistry]:
    """``reg`` (a fresh one by default) served on a free port of 127.0.0.1 until the block ends."""
    reg = reg or MemoryRegistry()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(reg))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    reg.address = f"127.0.0.1:{server.server_port}"
    try:
        yield reg
    finally:
        server.shutdown()
        server.server_close()
