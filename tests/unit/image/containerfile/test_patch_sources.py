"""Remote patch sources: fetched once from a URL into a content-addressed cache (served here by a real
http.server on 127.0.0.1), checked against the matrix's sha256; a mismatch is refused and nothing cached."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from pinmatrix.cell import CellPatch
from pinmatrix.errors import PatchError
from pinmatrix.image.containerfile.patch_sources import resolve_patch

PATCH = b"--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"


class CountingHandler(http.server.SimpleHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        CountingHandler.hits.append(self.path)
        super().do_GET()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "served"
    root.mkdir()
    (root / "fix.patch").write_bytes(PATCH)
    CountingHandler.hits = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(CountingHandler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def patch(source: str, sha256: str | None) -> CellPatch:
    return CellPatch(id="fix", package="pkg", version="1.0", kind="installed-tree", status="apply",
                     upstream="https://example.invalid/pr/1", sha256=sha256, source=source)


def test_remote_patch_is_fetched_once_into_the_cache(server: str, tmp_path: Path) -> None:
    digest = hashlib.sha256(PATCH).hexdigest()
    p = patch(f"{server}/fix.patch", digest)
    first = resolve_patch(p, tmp_path, tmp_path / "cache")
    assert first.fetched and first.path.read_bytes() == PATCH
    assert first.path == tmp_path / "cache" / "patches" / f"{digest}.patch"
    second = resolve_patch(p, tmp_path, tmp_path / "cache")
    assert not second.fetched and second.path == first.path
    assert CountingHandler.hits == ["/fix.patch"]  # one request for two resolutions


def test_remote_patch_with_another_sha256_is_refused_and_not_cached(server: str, tmp_path: Path) -> None:
    with pytest.raises(PatchError, match=r"patch fix: sha256 of http://127\.0\.0\.1:\d+/fix\.patch is [0-9a-f]{64}, the matrix says 0{64}; refused"):
        resolve_patch(patch(f"{server}/fix.patch", "0" * 64), tmp_path, tmp_path / "cache")
    assert not list((tmp_path / "cache").rglob("*.patch"))


def test_a_corrupted_cache_entry_is_fetched_again(server: str, tmp_path: Path) -> None:
    digest = hashlib.sha256(PATCH).hexdigest()
    cached = tmp_path / "cache" / "patches" / f"{digest}.patch"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"tampered")
    got = resolve_patch(patch(f"{server}/fix.patch", digest), tmp_path, tmp_path / "cache")
    assert got.fetched and cached.read_bytes() == PATCH


def test_missing_remote_patch_and_unreachable_server(server: str, tmp_path: Path) -> None:
    with pytest.raises(PatchError, match="cannot fetch patch .*/nope.patch"):
        resolve_patch(patch(f"{server}/nope.patch", "0" * 64), tmp_path, tmp_path / "cache")
    with pytest.raises(PatchError, match="cannot fetch patch http://127.0.0.1:9/x.patch"):
        resolve_patch(patch("http://127.0.0.1:9/x.patch", "0" * 64), tmp_path, tmp_path / "cache")


def test_repository_patch_is_checked_too(tmp_path: Path) -> None:
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "fix.patch").write_bytes(PATCH)
    good = resolve_patch(patch("patches/fix.patch", hashlib.sha256(PATCH).hexdigest()), tmp_path, tmp_path / "c")
    assert good.path.read_bytes() == PATCH and not good.fetched
    with pytest.raises(PatchError, match="sha256 of patches/fix.patch is .*refused"):
        resolve_patch(patch("patches/fix.patch", "f" * 64), tmp_path, tmp_path / "c")
    with pytest.raises(PatchError, match="patches/gone.patch does not exist"):
        resolve_patch(patch("patches/gone.patch", "f" * 64), tmp_path, tmp_path / "c")
    with pytest.raises(PatchError, match="no sha256"):
        resolve_patch(patch("patches/fix.patch", None), tmp_path, tmp_path / "c")
