"""pinmatrix.index.wheel_index rule by rule against a PEP 691 index made here: the tags a target accepts (in their
order), which indexes a package may come from, how a page is read and cached, which wheel is chosen, and how a
download is bounded, checked, cached and refused (each refusal one line)."""

from __future__ import annotations

import hashlib
import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from certificates import ca_certificate

from conftest import make_cell
from pinmatrix.cell import IndexSpec
from pinmatrix.index import wheel_index
from pinmatrix.index.wheel_index import (
    DEFAULT_INDEX,
    IndexUnreachable,
    Target,
    WheelError,
    WheelFetcher,
    WheelFile,
    cell_target,
    ssl_context,
)
from pinmatrix.project.lockfile import LockEntry, parse_lock

BODY = b"wheel bytes " * 300
SHA = hashlib.sha256(BODY).hexdigest()
NAME = "tiny-1.0-py3-none-any.whl"


@dataclass
class Index:
    """Paths -> (status, headers, body); ``forever``: paths that stream without end; ``seen``: paths asked."""

    url: str = ""
    pages: dict[str, tuple[int, dict[str, str], bytes]] = field(default_factory=dict)
    forever: set[str] = field(default_factory=set)
    seen: list[str] = field(default_factory=list)
    accept: list[str | None] = field(default_factory=list)  # the Accept header of each request
    stall: set[str] = field(default_factory=set)  # paths whose body never comes

    def page(self, name: str, files: list[dict[str, object]]) -> None:
        self.pages[f"/simple/{name}/"] = (200, {}, json.dumps({"files": files}).encode())


@pytest.fixture
def index() -> Iterator[Index]:
    state = Index()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            state.seen.append(self.path)
            state.accept.append(self.headers.get("Accept"))
            if self.path in state.stall:
                self.send_response(200)
                self.send_header("Content-Length", "10")
                self.end_headers()
                time.sleep(2)
                return
            if self.path in state.forever:
                self.send_response(200)
                self.end_headers()
                try:
                    while True:
                        self.wfile.write(b"x" * 65536)
                except OSError:
                    return
            status, headers, body = state.pages.get(self.path, (404, {}, b""))
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    state.url = f"http://127.0.0.1:{server.server_port}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def _entry(name: str = "tiny", version: str = "1.0", *shas: str) -> LockEntry:
    hashes = " ".join(f"--hash=sha256:{s}" for s in (shas or (SHA,)))
    return parse_lock(f"{name}=={version} {hashes}\n").entries[0]


def _spec(index: Index, **kwargs: object) -> list[IndexSpec]:
    return [IndexSpec(name="test", url=index.url + "/simple", default=True, **kwargs)]  # type: ignore[arg-type]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- targets ------------------------------------------------------------------------------------------

def _platforms(target: Target) -> list[str]:
    interpreter = f"cp{target.python.replace('.', '')}"
    return [t.platform for t in target.tags() if t.interpreter == interpreter and t.abi == interpreter]


def test_the_tags_of_an_x86_64_target_most_preferred_first() -> None:
    target = Target("3.13", "x86_64-manylinux_2_28")
    assert target.arch == "x86_64"
    assert _platforms(target) == [f"manylinux_2_{m}_x86_64" for m in range(28, 16, -1)] + [
        "manylinux2014_x86_64", "manylinux_2_12_x86_64", "manylinux_2_5_x86_64", "manylinux2010_x86_64",
        "manylinux1_x86_64"]
    tags = [str(t) for t in target.tags()]
    assert tags[0] == "cp313-cp313-manylinux_2_28_x86_64"
    assert "py3-none-any" in tags and "cp312-abi3-manylinux_2_28_x86_64" in tags
    assert not [t for t in tags if "aarch64" in t or "manylinux_2_29" in t or "manylinux_2_16" in t]


def test_the_tags_of_an_aarch64_target_have_no_older_x86_64_schemes() -> None:
    target = Target("3.11", "aarch64-manylinux_2_17")
    assert target.arch == "aarch64"
    assert _platforms(target) == ["manylinux_2_17_aarch64", "manylinux2014_aarch64"]


@pytest.mark.parametrize("platform", ["x86_64-linux", "riscv64-manylinux_2_28", "x86_64-manylinux_2_x"])
def test_a_platform_that_is_not_arch_manylinux_is_refused(platform: str) -> None:
    line = f"platform {platform!r} is not ARCH-manylinux_2_N (x86_64 or aarch64)"
    for read in (lambda t: t.arch, lambda t: t.tags()):
        with pytest.raises(WheelError) as err:
            read(Target("3.13", platform))
        assert str(err.value) == line


def test_a_cells_target() -> None:
    cell = make_cell("tiny", ("tiny==1.0",), python="3.12")
    assert cell_target(cell) == Target("3.12", "x86_64-manylinux_2_28")


# -- indexes and pages --------------------------------------------------------------------------------

def test_which_indexes_a_package_may_come_from() -> None:
    default = IndexSpec("mirror", "https://mirror/simple", default=True)
    extra = IndexSpec("extra", "https://extra/simple")
    explicit = IndexSpec("torch", "https://torch/simple", explicit=True, packages=("Tiny_Pkg",))
    entry = _entry("tiny-pkg")
    assert wheel_index._indexes_for(entry, [default, extra, explicit]) == ["https://torch/simple"]
    assert wheel_index._indexes_for(_entry("other"), [extra, default, explicit]) == ["https://mirror/simple",
                                                                                "https://extra/simple"]
    assert wheel_index._indexes_for(_entry("other"), [extra]) == [DEFAULT_INDEX, "https://extra/simple"]


def test_a_page_is_read_once_and_its_urls_made_absolute(index: Index) -> None:
    index.page("tiny", [{"filename": NAME, "url": "../../files/w.whl", "hashes": {"sha256": SHA}}, "not a file"])
    fetcher = WheelFetcher(Path("/nonexistent"))
    files = fetcher.files(index.url + "/simple/", "tiny")
    assert files == [{"filename": NAME, "url": index.url + "/files/w.whl", "hashes": {"sha256": SHA}}]
    assert fetcher.files(index.url + "/simple/", "tiny") is files
    assert index.seen == ["/simple/tiny/"]
    assert fetcher.files(index.url + "/simple", "absent") == []
    assert fetcher.files(index.url + "/simple", "absent") == []
    assert index.seen == ["/simple/tiny/", "/simple/absent/"]  # a 404 is remembered too


def test_an_index_that_errs_or_is_down_is_unreachable_with_its_url(index: Index) -> None:
    index.pages["/simple/tiny/"] = (503, {}, b"busy")
    with pytest.raises(IndexUnreachable) as err:
        WheelFetcher(Path("/nonexistent")).files(index.url + "/simple", "tiny")
    assert str(err.value) == f"index {index.url}/simple unreachable: HTTP 503 for tiny"
    assert err.value.url == index.url + "/simple"
    down = f"http://127.0.0.1:{_closed_port()}/simple"
    with pytest.raises(IndexUnreachable) as err:
        WheelFetcher(Path("/nonexistent")).files(down, "tiny")
    assert str(err.value).startswith(f"index {down} unreachable: [Errno 111]") and err.value.url == down


def test_a_page_that_is_json_but_no_files_list_has_no_wheel(index: Index) -> None:
    index.pages["/simple/tiny/"] = (200, {}, b'["files"]')
    assert WheelFetcher(Path("/nonexistent")).files(index.url + "/simple", "tiny") == []


# -- choosing -----------------------------------------------------------------------------------------

def test_the_most_preferred_wheel_with_a_locked_hash_is_chosen(index: Index) -> None:
    other = "cd" * 32
    index.page("tiny", [
        {"filename": "tiny-1.0-py3-none-any.whl", "url": "/f/any.whl", "hashes": {"sha256": SHA}, "size": 10},
        {"filename": "tiny-1.0-cp313-cp313-manylinux_2_17_x86_64.whl", "url": "/f/17.whl",
         "hashes": {"sha256": other}, "size": 11},
        {"filename": "tiny-1.0-cp313-cp313-manylinux_2_28_x86_64.whl", "url": "/f/28.whl",
         "hashes": {"sha256": "ef" * 32}},  # not in the lock
        {"filename": "tiny-1.0.tar.gz", "url": "/f/sdist", "hashes": {"sha256": other}},
        {"filename": "tiny-1.1-cp313-cp313-manylinux_2_28_x86_64.whl", "url": "/f/11.whl",
         "hashes": {"sha256": other}},
    ])
    fetcher = WheelFetcher(Path("/nonexistent"))
    chosen = fetcher.choose(_entry("tiny", "1.0", SHA, other), Target("3.13", "x86_64-manylinux_2_28"), _spec(index))
    assert chosen == WheelFile("tiny", "1.0", "tiny-1.0-cp313-cp313-manylinux_2_17_x86_64.whl", index.url + "/f/17.whl",
                               other, 11)
    only_any = fetcher.choose(_entry("tiny", "1.0", SHA), Target("3.13", "x86_64-manylinux_2_28"), _spec(index))
    assert (only_any.filename, only_any.size) == ("tiny-1.0-py3-none-any.whl", 10)


@pytest.mark.parametrize(("size", "kept"), [(0, 0), (-1, None), (True, None), ("12", None)])
def test_only_a_non_negative_integer_is_a_size(index: Index, size: object, kept: int | None) -> None:
    index.page("tiny", [{"filename": NAME, "url": "/w", "hashes": {"sha256": SHA}, "size": size}])
    chosen = WheelFetcher(Path("/nonexistent")).choose(_entry(), Target("3.13", "x86_64-manylinux_2_28"), _spec(index))
    assert chosen.size == kept


def test_a_local_version_label_matches_its_public_version(index: Index) -> None:
    index.page("tiny", [{"filename": "tiny-1.0+cpu-py3-none-any.whl", "url": "/w", "hashes": {"sha256": SHA}}])
    target = Target("3.13", "x86_64-manylinux_2_28")
    assert WheelFetcher(Path("/x")).choose(_entry("tiny", "1.0+cpu"), target, _spec(index)).version == "1.0+cpu"
    assert WheelFetcher(Path("/x")).choose(_entry("tiny", "1.0"), target, _spec(index)).version == "1.0"


def test_locked_wheels_for_other_platforms_are_named_as_such(index: Index) -> None:
    index.page("tiny", [{"filename": "tiny-1.0-cp313-cp313-manylinux_2_28_aarch64.whl", "url": "/w",
                         "hashes": {"sha256": SHA}},
                        {"filename": "tiny-1.0-cp313-cp313-manylinux_2_34_x86_64.whl", "url": "/w",
                         "hashes": {"sha256": SHA}}])
    with pytest.raises(WheelError) as err:
        WheelFetcher(Path("/x")).choose(_entry(), Target("3.13", "x86_64-manylinux_2_28"), _spec(index))
    assert str(err.value) == ("tiny==1.0: no wheel for cp313 x86_64-manylinux_2_28: its locked wheels are for other "
                              "platforms or Pythons")


def test_an_sdist_only_is_named_as_such(index: Index) -> None:
    index.page("tiny", [{"filename": "tiny-1.0.tar.gz", "url": "/s", "hashes": {"sha256": SHA}},
                        {"filename": "tiny-1.0-x.whl", "url": "/s", "hashes": {"sha256": SHA}}])
    with pytest.raises(WheelError) as err:
        WheelFetcher(Path("/x")).choose(_entry(), Target("3.12", "x86_64-manylinux_2_28"), _spec(index))
    assert str(err.value) == ("tiny==1.0: no wheel for cp312 x86_64-manylinux_2_28: no wheel with a locked hash on the "
                              "index (an sdist only cannot be installed without building it)")


def test_an_unpinned_or_unhashed_entry_is_refused_before_any_index_is_asked(index: Index) -> None:
    for text in ("tiny >=1.0 --hash=sha256:" + SHA, "tiny==1.0"):
        entry = parse_lock(text + "\n").entries[0]
        with pytest.raises(WheelError) as err:
            WheelFetcher(Path("/x")).choose(entry, Target("3.13", "x86_64-manylinux_2_28"), _spec(index))
        assert str(err.value) == f"tiny: the lock line is not pinned with hashes: {text[:80]!r}"
    assert index.seen == []


def test_the_first_index_with_the_wheel_wins(index: Index) -> None:
    index.page("tiny", [{"filename": NAME, "url": "/first", "hashes": {"sha256": SHA}}])
    second = IndexSpec("second", index.url + "/other")
    chosen = WheelFetcher(Path("/x")).choose(_entry(), Target("3.13", "x86_64-manylinux_2_28"),
                                             [IndexSpec("first", index.url + "/simple", default=True), second])
    assert chosen.url == index.url + "/first" and index.seen == ["/simple/tiny/"]
    index.seen.clear()
    index.pages["/other/tiny/"] = index.pages.pop("/simple/tiny/")
    chosen = WheelFetcher(Path("/x")).choose(_entry(), Target("3.13", "x86_64-manylinux_2_28"),
                                             [IndexSpec("first", index.url + "/simple", default=True), second])
    assert chosen.url == index.url + "/first" and index.seen == ["/simple/tiny/", "/other/tiny/"]


# -- the cache path and downloads ---------------------------------------------------------------------

@pytest.mark.parametrize("filename", ["tiny.whl", "tiny-1.0..-py3-none-any.whl"])
def test_the_cache_path_refuses_a_name_that_is_no_wheel_name(tmp_path: Path, filename: str) -> None:
    with pytest.raises(WheelError, match="not a wheel file name or sha256"):
        WheelFetcher(tmp_path).path(WheelFile("tiny", "1.0", filename, "http://x/", SHA))


def test_the_cache_paths_refusal_quotes_a_bounded_name_and_sha(tmp_path: Path) -> None:
    name, sha = "x" * 200 + ".whl", "f" * 100
    with pytest.raises(WheelError) as err:
        WheelFetcher(tmp_path).path(WheelFile("tiny", "1.0", name, "http://x/", sha))
    assert str(err.value) == f"{name[:120]!r}: not a wheel file name or sha256 {sha[:80]!r}"


def _wheel(index: Index, url: str = "/w.whl", size: int | None = None) -> WheelFile:
    return WheelFile("tiny", "1.0", NAME, index.url + url, SHA, size)


def test_an_intact_cached_wheel_is_used_without_a_download_and_hashed_once(index: Index, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    fetcher = WheelFetcher(tmp_path)
    wheel = _wheel(index)
    path = fetcher.path(wheel)
    path.parent.mkdir(parents=True)
    path.write_bytes(BODY)
    hashed: list[Path] = []
    real = wheel_index.sha256_file
    monkeypatch.setattr(wheel_index, "sha256_file", lambda p: hashed.append(p) or real(p))
    assert fetcher.fetch(wheel) == path and fetcher.fetch(wheel) == path
    assert index.seen == [] and hashed == [path]


def test_a_download_is_kept_and_not_hashed_again(index: Index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index.pages["/w.whl"] = (200, {}, BODY)
    fetcher = WheelFetcher(tmp_path)
    path = fetcher.fetch(_wheel(index, size=len(BODY)))
    assert path.read_bytes() == BODY and [p.name for p in path.parent.iterdir()] == [NAME]
    monkeypatch.setattr(wheel_index, "sha256_file", lambda p: pytest.fail("re-hashed"))
    assert fetcher.fetch(_wheel(index)) == path and index.seen == ["/w.whl"]


def test_a_download_is_bounded_across_chunks(index: Index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wheel_index, "CHUNK", 1000)
    index.pages["/w.whl"] = (200, {}, BODY)
    with pytest.raises(WheelError) as err:
        WheelFetcher(tmp_path).fetch(_wheel(index, size=len(BODY) - 1))
    assert str(err.value) == f"{NAME}: the download is larger than the {len(BODY) - 1} bytes the index declared"
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_a_download_that_never_ends_is_cut_at_its_bound(index: Index, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wheel_index, "MAX_WHEEL", 1 << 20)
    index.forever.add("/w.whl")
    with pytest.raises(WheelError) as err:
        WheelFetcher(tmp_path).fetch(_wheel(index))
    assert str(err.value) == f"{NAME}: the download is larger than 0 GiB"
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_the_bound_of_a_download_without_a_size_is_named_in_gib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real bound (8 GiB), without sending 8 GiB: the answer's one chunk says it is one byte longer."""

    class Past:  # only its length is read before the bound refuses it
        def __len__(self) -> int:
            return wheel_index.MAX_WHEEL + 1

    class Answer:
        def __enter__(self) -> Answer:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def read(self, _n: int) -> object:
            return Past()

    assert wheel_index.MAX_WHEEL == 8 << 30
    fetcher = WheelFetcher(tmp_path)
    monkeypatch.setattr(fetcher, "_open", lambda url, accept=None: Answer())
    wheel = WheelFile("tiny", "1.0", NAME, "http://127.0.0.1:9/w.whl", SHA)
    with pytest.raises(WheelError) as err:
        fetcher.fetch(wheel)
    assert str(err.value) == f"{NAME}: the download is larger than 8 GiB"
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_a_download_that_fails_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    wheel = WheelFile("tiny", "1.0", NAME, f"http://127.0.0.1:{_closed_port()}/w.whl", SHA)
    with pytest.raises(WheelError) as err:
        WheelFetcher(tmp_path).fetch(wheel)
    assert str(err.value) == f"{NAME}: download failed: [Errno 111] Connection refused"
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_a_download_with_other_bytes_is_refused(index: Index, tmp_path: Path) -> None:
    index.pages["/w.whl"] = (200, {}, b"other bytes")
    with pytest.raises(WheelError) as err:
        WheelFetcher(tmp_path).fetch(_wheel(index))
    other = hashlib.sha256(b"other bytes").hexdigest()
    assert str(err.value) == f"{NAME}: sha256 {other} does not match the lock's {SHA}"
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_an_http_redirect_is_followed(index: Index, tmp_path: Path) -> None:
    index.pages["/old.whl"] = (302, {"Location": "/w.whl"}, b"")
    index.pages["/w.whl"] = (200, {}, BODY)
    assert WheelFetcher(tmp_path).fetch(_wheel(index, "/old.whl")).read_bytes() == BODY
    assert index.seen == ["/old.whl", "/w.whl"]


def test_an_https_redirect_is_followed(index: Index, tmp_path: Path) -> None:
    index.pages["/old.whl"] = (302, {"Location": f"https://127.0.0.1:{_closed_port()}/w.whl"}, b"")
    with pytest.raises(WheelError) as err:
        WheelFetcher(tmp_path).fetch(_wheel(index, "/old.whl"))
    assert str(err.value) == f"{NAME}: download failed: [Errno 111] Connection refused"


def test_a_long_redirect_to_another_scheme_is_quoted_bounded(index: Index, tmp_path: Path) -> None:
    target = "ftp://127.0.0.1/" + "a" * 200
    index.pages["/old.whl"] = (302, {"Location": target}, b"")
    with pytest.raises(WheelError) as err:
        WheelFetcher(tmp_path).fetch(_wheel(index, "/old.whl"))
    assert str(err.value) == f"{index.url}/old.whl: redirected to {target[:120]!r}, which is not http(s)"


# -- CA certificates ----------------------------------------------------------------------------------

def _https_index(tmp_path: Path) -> tuple[Path, http.server.ThreadingHTTPServer]:
    """An index over https on 127.0.0.1 whose certificate a CA made here signed; returns (the CA file, server)."""
    import datetime as dt
    import ipaddress
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pinmatrix test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "index")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False).sign(ca_key, hashes.SHA256()))
    ca_file, cert_file, key_file = tmp_path / "ca.crt", tmp_path / "server.pem", tmp_path / "server.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    page = json.dumps({"files": [{"filename": NAME, "url": "/w.whl", "hashes": {"sha256": SHA}}]}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = {"/simple/tiny/": page, "/w.whl": BODY}.get(self.path, b"")
            self.send_response(200 if body else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    return ca_file, server


def test_an_https_index_is_trusted_through_the_matrixs_ca_only(tmp_path: Path) -> None:
    ca_file, server = _https_index(tmp_path)
    try:
        url = f"https://127.0.0.1:{server.server_port}/simple"
        fetcher = WheelFetcher(tmp_path / "cache", context=ssl_context([ca_file]))
        wheel = fetcher.choose(_entry(), Target("3.13", "x86_64-manylinux_2_28"), [IndexSpec("tls", url, default=True)])
        assert fetcher.fetch(wheel).read_bytes() == BODY
        with pytest.raises(IndexUnreachable, match=r"CERTIFICATE_VERIFY_FAILED"):
            WheelFetcher(tmp_path / "other").files(url, "tiny")  # the system's trust store alone
    finally:
        server.shutdown()
        server.server_close()


def test_an_index_that_stalls_is_unreachable_in_one_line(index: Index) -> None:
    index.stall.add("/simple/tiny/")
    with pytest.raises(IndexUnreachable) as err:
        WheelFetcher(Path("/x"), timeout=0.3).files(index.url + "/simple", "tiny")
    assert str(err.value) == f"index {index.url}/simple unreachable: timed out"


def test_a_file_without_a_url_points_at_its_page(index: Index) -> None:
    index.page("tiny", [{"filename": NAME, "hashes": {"sha256": SHA}}])
    assert WheelFetcher(Path("/x")).files(index.url + "/simple", "tiny")[0]["url"] == index.url + "/simple/tiny/"


def test_extra_ca_files_and_folders_are_read_and_a_bad_one_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "cas"
    folder.mkdir()
    (folder / "a.crt").write_text(ca_certificate())
    (folder / "ignored.pem").write_text("not a certificate")
    single = tmp_path / "one.pem"
    single.write_text(ca_certificate())
    before = ssl_context().cert_store_stats()["x509_ca"]
    assert ssl_context([folder]).cert_store_stats()["x509_ca"] == before + 1
    assert ssl_context([folder, single]).cert_store_stats()["x509_ca"] == before + 2
    bad = folder / "b.crt"
    bad.write_text("not a certificate")
    with pytest.raises(WheelError) as err:
        ssl_context([folder])
    assert str(err.value).startswith(f"matrix.ca_certificates: {bad}: ")
    with pytest.raises(WheelError, match=r"^matrix\.ca_certificates: /nonexistent\.crt: "):
        ssl_context([Path("/nonexistent.crt")])


def test_a_page_is_asked_for_as_json_and_a_download_plainly(index: Index, tmp_path: Path) -> None:
    index.page("tiny", [{"filename": NAME, "url": "/w.whl", "hashes": {"sha256": SHA}}])
    index.pages["/w.whl"] = (200, {}, BODY)
    fetcher = WheelFetcher(tmp_path)
    fetcher.fetch(fetcher.choose(_entry(), Target("3.13", "x86_64-manylinux_2_28"), _spec(index)))
    assert index.accept == [wheel_index.SIMPLE_JSON, None]


def test_an_index_path_is_kept_as_it_is_but_its_trailing_slash(index: Index) -> None:
    index.pages["/SIMPLEX/tiny/"] = (200, {}, json.dumps({"files": [{"filename": NAME, "url": "/w"}]}).encode())
    assert len(WheelFetcher(Path("/x")).files(index.url + "/SIMPLEX//", "tiny")) == 1


def test_a_page_at_its_bound_is_read_and_one_byte_more_refused(index: Index, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wheel_index, "MAX_PAGE", 1 << 20)
    body = json.dumps({"files": []}).encode()
    index.pages["/simple/tiny/"] = (200, {}, body + b" " * ((1 << 20) - len(body)))
    assert WheelFetcher(Path("/x")).files(index.url + "/simple", "tiny") == []
    index.pages["/simple/tiny/"] = (200, {}, body + b" " * ((1 << 20) - len(body) + 1))
    with pytest.raises(WheelError) as err:
        WheelFetcher(Path("/x")).files(index.url + "/simple", "tiny")
    assert str(err.value) == f"index {index.url}/simple: the page of tiny is larger than 1 MiB"


def test_a_page_that_never_ends_is_cut_at_its_bound(index: Index, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wheel_index, "MAX_PAGE", 1 << 20)
    index.forever.add("/simple/tiny/")
    with pytest.raises(WheelError, match=r"the page of tiny is larger than 1 MiB$"):
        WheelFetcher(Path("/x")).files(index.url + "/simple", "tiny")


def test_skipped_files_before_the_wheel_do_not_hide_it(index: Index) -> None:
    """Files that are not the locked wheel for the target are skipped, whatever comes after them; of two equally
    preferred wheels the first listed wins."""
    other = "cd" * 32
    index.page("tiny", [
        {"filename": "tiny-1.0-cp313-cp313-manylinux_2_28_x86_64.whl", "url": "/f/unlocked", "hashes": {"sha256": "ef" * 32}},
        {"filename": "tiny-1.0-cp313-cp313-manylinux_2_28_x86_64.whl", "url": "/f/nohash", "hashes": ["sha256"]},
        {"filename": "tiny-1.0.tar.gz", "url": "/f/sdist", "hashes": {"sha256": SHA}},
        {"filename": "tiny-1.0-b-py3-none-any.whl", "url": "/f/badbuild", "hashes": {"sha256": SHA}},
        {"filename": "tiny-1.1-py3-none-any.whl", "url": "/f/newer", "hashes": {"sha256": SHA}},
        {"filename": "tiny-1.0-cp313-cp313-manylinux_2_28_aarch64.whl", "url": "/f/arm", "hashes": {"sha256": SHA}},
        {"filename": "Tiny-1.0-py3-none-any.whl", "url": "/f/first", "hashes": {"sha256": SHA}},
        {"filename": "tiny-1.0-py3-none-any.whl", "url": "/f/second", "hashes": {"sha256": other}},
    ])
    chosen = WheelFetcher(Path("/x")).choose(_entry("tiny", "1.0", SHA, other), Target("3.13", "x86_64-manylinux_2_28"),
                                             _spec(index))
    assert (chosen.url, chosen.filename) == (index.url + "/f/first", "Tiny-1.0-py3-none-any.whl")


@pytest.mark.parametrize("filename", ["", "x" * 130 + "/tiny-1.0-py3-none-any.whl"])
def test_a_locked_file_without_a_plain_name_is_refused_quoted_bounded(index: Index, filename: str) -> None:
    index.page("tiny", [{"url": "/w", "hashes": {"sha256": SHA}, **({"filename": filename} if filename else {})}])
    with pytest.raises(WheelError) as err:
        WheelFetcher(Path("/x")).choose(_entry(), Target("3.13", "x86_64-manylinux_2_28"), _spec(index))
    assert str(err.value) == (f"index {index.url}/simple: the file name {filename[:120]!r} of tiny is not a wheel file "
                              "name (a path or an unsafe character)")


def test_the_compatible_tags_are_the_targets_python_not_this_one() -> None:
    tags = {str(t) for t in Target("3.9", "x86_64-manylinux_2_28").tags()}
    assert {"cp39-none-any", "py39-none-any", "py3-none-any", "cp39-abi3-manylinux_2_28_x86_64"} <= tags
    assert not {t for t in tags if "310" in t or "311" in t or "312" in t}
    assert Target("3.9.7", "x86_64-manylinux_2_28").tags() == Target("3.9", "x86_64-manylinux_2_28").tags()


def test_a_download_that_stalls_is_one_line(index: Index, tmp_path: Path) -> None:
    index.stall.add("/w.whl")
    with pytest.raises(WheelError) as err:
        WheelFetcher(tmp_path, timeout=0.3).fetch(_wheel(index))
    assert str(err.value) == f"{NAME}: download failed: timed out"
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
