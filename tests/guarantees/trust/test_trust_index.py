"""A hostile PEP 691 index on 127.0.0.1: a wheel's file name from the JSON page is never a path (the cache is
keyed by the lock's sha256 and the name must be one plain component), a file URL is not opened, and a page or
a download larger than its bound is refused, each with one line and nothing written outside the cache."""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pep691 import serve_handler

from pinmatrix.cell import IndexSpec
from pinmatrix.index import wheel_index
from pinmatrix.index.wheel_index import Target, WheelError, WheelFetcher, WheelFile
from pinmatrix.project.lockfile import parse_lock

TARGET = Target("3.13", "x86_64-manylinux_2_28")
BODY = b"PK\x05\x06" + b"\0" * 18  # an empty zip: only its sha256 matters here
SHA = hashlib.sha256(BODY).hexdigest()


class _Hostile(http.server.BaseHTTPRequestHandler):
    pages: dict[str, bytes] = {}

    def do_GET(self) -> None:  # noqa: N802
        body = self.pages.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def index() -> Iterator[str]:
    with serve_handler(_Hostile) as base:
        yield f"{base}/simple"


def _serve(filename: str, url: str = "/files/w.whl", **extra: object) -> None:
    _Hostile.pages = {
        "/simple/tiny/": json.dumps({"files": [{"filename": filename, "url": url, "hashes": {"sha256": SHA},
                                                **extra}]}).encode(),
        "/files/w.whl": BODY,
    }


def _choose(index: str, cache: Path) -> tuple[WheelFetcher, WheelFile]:
    entry = parse_lock(f"tiny==1.0 --hash=sha256:{SHA}\n").entries[0]
    fetcher = WheelFetcher(cache)
    return fetcher, fetcher.choose(entry, TARGET, [IndexSpec(name="test", url=index, default=True)])


@pytest.mark.parametrize("filename", [
    "tiny-1.0-1/../../../../evil-py3-none-any.whl",  # packaging takes this build tag
    "tiny-1.0-1..-py3-none-any.whl",
    "../tiny-1.0-py3-none-any.whl",
    "/tmp/tiny-1.0-py3-none-any.whl",
    "tiny-1.0-1\\..\\x-py3-none-any.whl",
    "tiny-1.0-py3-none-any.whl\n",
])
def test_a_file_name_that_is_a_path_is_refused_and_nothing_is_written(index: str, tmp_path: Path,
                                                                       filename: str) -> None:
    _serve(filename)
    cache = tmp_path / "a" / "b" / "c" / "cache"
    with pytest.raises(WheelError, match=r"is not a wheel file name") as err:
        _choose(index, cache)
    assert "\n" not in str(err.value) and str(err.value).startswith(f"index {index}: the file name")
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_an_honest_name_is_cached_under_the_locks_sha256(index: str, tmp_path: Path) -> None:
    _serve("tiny-1.0-py3-none-any.whl", size=len(BODY))
    fetcher, wheel = _choose(index, tmp_path / "cache")
    path = fetcher.fetch(wheel)
    assert path == tmp_path / "cache" / SHA[:2] / SHA / "tiny-1.0-py3-none-any.whl"
    assert path.read_bytes() == BODY


def test_the_cache_path_refuses_a_wheel_that_did_not_come_through_choose(tmp_path: Path) -> None:
    fetcher = WheelFetcher(tmp_path)
    for bad in (WheelFile("tiny", "1.0", "../x-1.0-py3-none-any.whl", "http://x/", SHA),
                WheelFile("tiny", "1.0", "tiny-1.0-py3-none-any.whl", "http://x/", "../" + SHA[3:])):
        with pytest.raises(WheelError, match="not a wheel file name or sha256"):
            fetcher.path(bad)


def test_a_file_url_is_not_opened(index: str, tmp_path: Path) -> None:
    secret = tmp_path / "secret.whl"
    secret.write_bytes(BODY)  # its sha256 is the locked one: only the scheme check stops it
    _serve("tiny-1.0-py3-none-any.whl", url=secret.as_uri())
    fetcher, wheel = _choose(index, tmp_path / "cache")
    with pytest.raises(WheelError, match=r"must be http or https"):
        fetcher.fetch(wheel)
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").rglob("*.whl"))


def test_a_download_longer_than_its_declared_size_is_refused_and_not_kept(index: str, tmp_path: Path) -> None:
    _serve("tiny-1.0-py3-none-any.whl", size=len(BODY) - 1)
    fetcher, wheel = _choose(index, tmp_path / "cache")
    with pytest.raises(WheelError, match=rf"larger than the {len(BODY) - 1} bytes the index declared"):
        fetcher.fetch(wheel)
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_a_wheel_shorter_than_its_declared_size_is_refused_cached_or_not(index: str, tmp_path: Path) -> None:
    _serve("tiny-1.0-py3-none-any.whl", size=len(BODY) + 1)  # the lock's bytes, but the index says one more
    fetcher, wheel = _choose(index, tmp_path / "cache")
    with pytest.raises(WheelError, match=rf"is {len(BODY)} bytes, not the {len(BODY) + 1} the index declared"):
        fetcher.fetch(wheel)
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    _serve("tiny-1.0-py3-none-any.whl", size=len(BODY))
    honest_fetcher, honest = _choose(index, tmp_path / "cache")
    kept = honest_fetcher.fetch(honest)
    assert kept.read_bytes() == BODY
    with pytest.raises(WheelError, match=rf"is {len(BODY)} bytes, not the {len(BODY) + 1} the index declared"):
        WheelFetcher(tmp_path / "cache").fetch(dataclasses.replace(honest, size=len(BODY) + 1))  # cached, misstated


def test_a_download_without_a_size_is_bounded(index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wheel_index, "MAX_WHEEL", len(BODY) - 1)
    _serve("tiny-1.0-py3-none-any.whl", size=True)  # not a size: ignored, the default bound applies
    fetcher, wheel = _choose(index, tmp_path / "cache")
    assert wheel.size is None
    with pytest.raises(WheelError, match=r"the download is larger than 0 GiB"):
        fetcher.fetch(wheel)


def test_a_page_larger_than_its_bound_is_refused(index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wheel_index, "MAX_PAGE", 100)
    _serve("tiny-1.0-py3-none-any.whl")
    _Hostile.pages["/simple/tiny/"] += b" " * 100
    with pytest.raises(WheelError, match=r"the page of tiny is larger than 0 MiB"):
        _choose(index, tmp_path / "cache")


@pytest.mark.parametrize("page", [b"\xff\xfe", b"[" * 100_000, b'{"files": 7}', b'{"files": [7, "x"]}'])
def test_a_page_that_is_not_a_json_files_list_is_one_line(index: str, tmp_path: Path, page: bytes) -> None:
    _Hostile.pages = {"/simple/tiny/": page}
    with pytest.raises(WheelError, match=r"does not speak the JSON simple API|no wheel with a locked hash"):
        _choose(index, tmp_path / "cache")


def test_a_damaged_cached_wheel_is_fetched_again(index: str, tmp_path: Path) -> None:
    _serve("tiny-1.0-py3-none-any.whl", size=len(BODY))
    fetcher, wheel = _choose(index, tmp_path / "cache")
    path = fetcher.fetch(wheel)
    path.write_bytes(b"damaged")
    assert WheelFetcher(tmp_path / "cache").fetch(wheel).read_bytes() == BODY  # re-hashed, so re-downloaded
    dead = tmp_path / "cache" / SHA[:2] / SHA / ".tiny-1.0-py3-none-any.whl.999999999.part"
    dead.write_bytes(b"left by a killed build")
    path.unlink()
    WheelFetcher(tmp_path / "cache").fetch(wheel)
    assert not dead.exists()


class _Redirect(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.send_response(302)
        self.send_header("Location", "ftp://127.0.0.1/tiny.whl")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_redirect_to_another_scheme_is_refused(index: str, tmp_path: Path) -> None:
    with serve_handler(_Redirect) as base:
        _serve("tiny-1.0-py3-none-any.whl", url=f"{base}/tiny.whl")
        fetcher, wheel = _choose(index, tmp_path / "cache")
        with pytest.raises(WheelError, match=r"redirected to 'ftp://127\.0\.0\.1/tiny\.whl', which is not http\(s\)"):
            fetcher.fetch(wheel)
        assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
