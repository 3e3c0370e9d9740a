"""A fake package index on 127.0.0.1 for the upgrade tests: PEP 691 pages with upload times and PEP 700
versions, wheels served with byte ranges (counted, to show a METADATA read never fetches a whole wheel), PEP 658
``.metadata`` files, and hostile answers (a lie about the metadata's hash, a slow answer, a huge one)."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import re
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from pep691 import serve_handler


def wheel_bytes(name: str, version: str, requires: list[str], padding: int = 0,
                members: dict[str, bytes] | None = None) -> bytes:
    """A wheel whose METADATA requires ``requires``; ``padding`` bytes of an incompressible member before it;
    ``members``: more files (path -> bytes)."""
    buf = io.BytesIO()
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        if padding:
            zf.writestr("blob.bin", hashlib.sha256(b"x").digest() * (padding // 32), zipfile.ZIP_STORED)
        for path, data in (members or {}).items():
            zf.writestr(path, data)
        meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
            f"Requires-Dist: {r}\n" for r in requires) + "\nA description.\n"
        zf.writestr(f"{dist}/METADATA", meta)
        zf.writestr(f"{dist}/RECORD", "")
    return buf.getvalue()


@dataclass
class FakeIndex:
    """Projects: name -> version -> (upload time, requires, tag). ``pep658``: serve .metadata files."""

    projects: dict[str, dict[str, tuple[str, list[str]]]]
    pep658: bool = False
    lie: bool = False  # the page declares a .metadata sha256 its body does not have
    padding: int = 0
    delay: float = 0.0
    served_bytes: int = 0
    files: dict[str, bytes] = field(default_factory=dict)
    members: dict[str, dict[str, bytes]] = field(default_factory=dict)  # "name==version" -> more wheel files

    def filename(self, name: str, version: str) -> str:
        return f"{name.replace('-', '_')}-{version}-py3-none-manylinux_2_28_x86_64.whl"

    def page(self, name: str) -> bytes:
        entries = []
        for version, (uploaded, requires) in self.projects[name].items():
            fname = self.filename(name, version)
            body = wheel_bytes(name, version, requires, self.padding, self.members.get(f"{name}=={version}"))
            self.files[fname] = body
            meta = zipfile.ZipFile(io.BytesIO(body)).read(
                f"{name.replace('-', '_')}-{version}.dist-info/METADATA")
            self.files[fname + ".metadata"] = meta
            entry: dict[str, object] = {"filename": fname, "url": f"/files/{fname}", "size": len(body),
                                        "hashes": {"sha256": hashlib.sha256(body).hexdigest()},
                                        "upload-time": uploaded}
            if self.pep658:
                digest = hashlib.sha256(b"not it" if self.lie else meta).hexdigest()
                entry["core-metadata"] = {"sha256": digest}
            entries.append(entry)
        return json.dumps({"meta": {"api-version": "1.1"}, "name": name, "files": entries,
                           "versions": list(self.projects[name])}).encode()


@contextmanager
def serve_index(index: FakeIndex) -> Iterator[str]:
    """Yields the index URL (``http://127.0.0.1:PORT/simple``)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            time.sleep(index.delay)
            m = re.fullmatch(r"/simple/([a-z0-9-]+)/", self.path)
            if m and m.group(1) in index.projects:
                return self._send(200, index.page(m.group(1)))
            body = index.files.get(self.path.removeprefix("/files/"))
            if body is None:
                return self._send(404, b"")
            rng = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
            if rng is None:
                return self._send(200, body)
            start, end = rng.groups()
            first = len(body) - int(end) if not start else int(start)
            last = len(body) - 1 if not start or not end else min(int(end), len(body) - 1)
            first = max(0, first)
            return self._send(206, body[first:last + 1], f"bytes {first}-{last}/{len(body)}")

        def _send(self, code: int, body: bytes, content_range: str | None = None) -> None:
            index.served_bytes += len(body)
            self.send_response(code)
            if content_range:
                self.send_header("Content-Range", content_range)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:
                pass

        def log_message(self, *args: object) -> None:
            pass

    with serve_handler(Handler) as base:
        yield f"{base}/simple"
