"""Serve an OCI image layout read-only over the registry API on a loopback port (standard library only).

    python3 -I serve_layout.py LAYOUT 127.0.0.1:5000

The H200 machine has no registry and no network; `pinmatrix promote --dry-run` asks the matrix's registry
(127.0.0.1:5000) two things: which manifest the cell's build tag names, and whether the tested digest is there.
This answers them from the very layout the images were unbundled into: a tag is the layout's
``org.opencontainers.image.ref.name`` (``<registry>/<repository>:<tag>``, the registry part ignored), a digest
any manifest the index lists; blobs by digest. Nothing can be written (every other method is 405). Stopped by its PID.
"""

from __future__ import annotations

import json
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REF_NAME = "org.opencontainers.image.ref.name"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
NAME = re.compile(r"^[a-z0-9]+(?:[._/-][a-z0-9]+)*$")
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")


def _repository_tag(ref: str) -> str:
    """``127.0.0.1:5000/pinmatrix/h200:266cd989c12b`` -> ``pinmatrix/h200:266cd989c12b`` (the host is whatever
    registry the layout was built for; a client may reach this one on another port)."""
    return ref.split("/", 1)[1] if "/" in ref else ref


class Layout:
    def __init__(self, root: Path) -> None:
        self.root = root

    def index(self) -> list[dict]:  # type: ignore[type-arg]
        data = json.loads((self.root / "index.json").read_text(encoding="utf-8"))
        return [m for m in data.get("manifests", []) if isinstance(m, dict) and DIGEST.match(str(m.get("digest")))]

    def manifest(self, name: str, reference: str) -> dict | None:  # type: ignore[type-arg]
        for entry in self.index():
            ref = (entry.get("annotations") or {}).get(REF_NAME, "")
            if entry["digest"] == reference or _repository_tag(ref) == f"{name}:{reference}":
                return entry
        return None

    def tags(self, name: str) -> list[str]:
        prefix = f"{name}:"
        refs = [_repository_tag((e.get("annotations") or {}).get(REF_NAME, "")) for e in self.index()]
        return sorted(r[len(prefix):] for r in refs if r.startswith(prefix))

    def blob(self, digest: str) -> Path | None:
        path = self.root / "blobs" / "sha256" / digest[7:]
        return path if DIGEST.match(digest) and path.is_file() and not path.is_symlink() else None


def handler(layout: Layout) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: object) -> None:
            sys.stderr.write("serve_layout: " + (fmt % args) + "\n")

        def _error(self, code: int, what: str) -> None:
            body = json.dumps({"errors": [{"code": what, "message": what}]}).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _file(self, path: Path, media: str, digest: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", media)
            self.send_header("Content-Length", str(path.stat().st_size))
            self.send_header("Docker-Content-Digest", digest)
            self.end_headers()
            if self.command == "HEAD":
                return
            with open(path, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    self.wfile.write(chunk)

        def do_GET(self) -> None:  # noqa: N802 - the http.server interface
            path = self.path.split("?", 1)[0]
            if path in ("/v2", "/v2/"):
                body = b"{}"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Docker-Distribution-API-Version", "registry/2.0")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                return
            m = re.match(r"^/v2/(.+)/(manifests|blobs)/([^/]+)$", path)
            if m and NAME.match(m.group(1)):
                name, kind, ref = m.groups()
                if kind == "manifests" and (DIGEST.match(ref) or TAG.match(ref)):
                    entry = layout.manifest(name, ref)
                    blob = layout.blob(entry["digest"]) if entry else None
                    if entry and blob:
                        return self._file(blob, str(entry.get("mediaType")), entry["digest"])
                    return self._error(404, "MANIFEST_UNKNOWN")
                if kind == "blobs" and DIGEST.match(ref):
                    blob = layout.blob(ref)
                    if blob:
                        return self._file(blob, "application/octet-stream", ref)
                    return self._error(404, "BLOB_UNKNOWN")
            m = re.match(r"^/v2/(.+)/tags/list$", path)
            if m and NAME.match(m.group(1)):
                body = json.dumps({"name": m.group(1), "tags": layout.tags(m.group(1))}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self._error(404, "NAME_UNKNOWN")

        do_HEAD = do_GET

        def _read_only(self) -> None:
            self._error(405, "UNSUPPORTED")

        do_PUT = do_POST = do_PATCH = do_DELETE = _read_only

    return Handler


def main(argv: list[str]) -> int:
    if len(argv) != 3 or ":" not in argv[2]:
        print("usage: serve_layout.py LAYOUT HOST:PORT", file=sys.stderr)
        return 2
    root, address = Path(argv[1]), argv[2]
    host, _, port = address.rpartition(":")
    if not (root / "index.json").is_file():
        print(f"serve_layout: {root}: not an OCI layout (no index.json)", file=sys.stderr)
        return 2
    server = ThreadingHTTPServer((host, int(port)), handler(Layout(root)))
    print(f"serve_layout: {root} on http://{address} (read-only)", file=sys.stderr, flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
