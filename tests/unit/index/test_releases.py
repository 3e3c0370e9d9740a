"""A project's releases from a fake PEP 691 index on 127.0.0.1: typed, with upload dates; a slow answer and a
huge one are refused within their bounds; the cache keeps the page with its date, and offline reads it."""

from __future__ import annotations

import http.server
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fake_index import FakeIndex, serve_index
from packaging.version import Version
from pep691 import serve_handler

from pinmatrix.index.answers import BoundedHttp, IndexAnswerError
from pinmatrix.index.releases import ReleaseSource

NOW = datetime(2026, 12, 4, tzinfo=UTC)
TORCH = {"torch": {"2.14.0": ("2026-09-02T10:00:00Z", []), "2.15.0": ("2026-10-28T10:00:00Z", [])}}


def test_releases_carry_their_upload_dates_and_are_cached_with_the_read_date(tmp_path: Path) -> None:
    with serve_index(FakeIndex(TORCH)) as url:
        page = ReleaseSource(tmp_path, BoundedHttp(timeout=5)).releases(url, "torch", NOW)
    assert page.release_versions() == [Version("2.14.0"), Version("2.15.0")]
    assert page.uploaded(Version("2.15.0")) == datetime(2026, 10, 28, 10, tzinfo=UTC)
    offline = ReleaseSource(tmp_path, BoundedHttp(timeout=5), offline=True).releases(url, "torch")
    assert offline.fetched_at == NOW and offline.release_versions() == page.release_versions()


def test_offline_without_a_cached_page_says_so(tmp_path: Path) -> None:
    with pytest.raises(IndexAnswerError, match="offline: no cached page of torch"):
        ReleaseSource(tmp_path, BoundedHttp(), offline=True).releases("http://127.0.0.1:9/simple", "torch")


def test_a_slow_index_is_refused_after_the_timeout(tmp_path: Path) -> None:
    index = FakeIndex(TORCH, delay=2.0)
    with serve_index(index) as url:
        start = time.monotonic()
        with pytest.raises(IndexAnswerError, match="no answer within 0.3 s"):
            ReleaseSource(tmp_path, BoundedHttp(timeout=0.3)).releases(url, "torch")
    assert time.monotonic() - start < 1.9


def test_a_huge_page_is_refused_at_its_bound(tmp_path: Path) -> None:
    class Huge(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()
            try:
                for _ in range(64):
                    self.wfile.write(b" " * 65536)
            except OSError:
                pass

        def log_message(self, *args: object) -> None:
            pass

    with serve_handler(Huge) as base:
        with pytest.raises(IndexAnswerError, match="larger than 100000 bytes"):
            ReleaseSource(tmp_path, BoundedHttp(timeout=5), max_page=100_000).releases(base, "torch")
    assert not list(tmp_path.rglob("*.json"))  # nothing cached


def test_a_page_that_is_not_pep691_is_one_line(tmp_path: Path) -> None:
    class Html(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<html>simple</html>")

        def log_message(self, *args: object) -> None:
            pass

    with serve_handler(Html) as base:
        with pytest.raises(IndexAnswerError, match="not a PEP 691 project page"):
            ReleaseSource(tmp_path, BoundedHttp(timeout=5)).releases(base, "torch")
