"""A registry and a token service on 127.0.0.x that lie: credentials go to a Bearer realm only over https (or
http on loopback) and only on the registry's own host or one the user allowed; every answer is bounded and
parsed into a typed document (one line, exit 2); a referrers list served by the referrers API is read, and
bounded; no Authorization header travels with a redirect or to an upload on another host; a manifest fetched
by digest is re-checked against it."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pinmatrix.imageref import RegistryError
from pinmatrix.registry.auth import AuthError, Credentials, check_realm, token_hosts
from pinmatrix.registry.client import MAX_MANIFEST, OCI_INDEX, OCI_MANIFEST, Registry

CREDS = Credentials("alice", "s3cret-password", Path("/nonexistent/auth.json"), "registry")
BASIC = "Basic " + base64.b64encode(b"alice:s3cret-password").decode()


def _digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


@dataclass
class Seen:
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # (method, path, Authorization)


@dataclass
class Behaviour:
    """What the fake registry answers. ``auth``: None, "basic" or a Bearer realm URL."""

    auth: str | None = None
    manifests: dict[str, bytes] = field(default_factory=dict)  # "repo/ref" -> body
    referrers: dict[str, bytes] | None = None  # "repo/digest" -> OCI index served by the referrers API
    redirect_blobs: str | None = None  # base URL blob GETs are redirected to
    upload_location: str | None = None
    huge_length: bool = False  # a manifest whose Content-Length says 256 MiB
    stream_forever: bool = False  # a manifest without Content-Length that never ends


def _server(host: str, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    return server



def _handler(behaviour: Behaviour, seen: Seen) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            if "Content-Length" not in (headers or {}):
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _authorised(self) -> bool:
            sent = self.headers.get("Authorization")
            if behaviour.auth is None:
                return True
            if behaviour.auth == "basic":
                if sent == BASIC:
                    return True
                self._send(401, headers={"WWW-Authenticate": 'Basic realm="fake"'})
                return False
            if sent == "Bearer good-token":
                return True
            self._send(401, headers={"WWW-Authenticate": f'Bearer realm="{behaviour.auth}",service="fake",'
                                                         'scope="repository:repo:pull"'})
            return False

        def do_GET(self) -> None:  # noqa: N802
            seen.requests.append((self.command, self.path, self.headers.get("Authorization")))
            if not self._authorised():
                return
            parts = self.path.split("/")
            if self.path == "/v2/":
                return self._send(200, b"{}")
            if len(parts) >= 5 and parts[-2] == "manifests":
                repo, ref = "/".join(parts[2:-2]), parts[-1]
                if behaviour.huge_length:
                    return self._send(200, b"", {"Content-Type": OCI_MANIFEST, "Content-Length": str(256 << 20)})
                if behaviour.stream_forever:
                    self.send_response(200)
                    self.send_header("Content-Type", OCI_MANIFEST)
                    self.end_headers()
                    try:
                        self.wfile.write(b'{"a": "')
                        while True:
                            self.wfile.write(b"x" * (1 << 20))
                    except OSError:
                        return
                body = behaviour.manifests.get(f"{repo}/{ref}")
                if body is None:
                    return self._send(404, b'{"errors": [{"code": "MANIFEST_UNKNOWN", "message": "no"}]}')
                return self._send(200, body, {"Content-Type": OCI_MANIFEST})
            if len(parts) >= 5 and parts[-2] == "referrers":
                repo, digest = "/".join(parts[2:-2]), parts[-1].split("?")[0]
                if behaviour.referrers is None:
                    return self._send(404)
                body = behaviour.referrers.get(f"{repo}/{digest}", json.dumps(
                    {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}).encode())
                return self._send(200, body, {"Content-Type": OCI_INDEX})
            if len(parts) >= 5 and parts[-2] == "blobs" and behaviour.redirect_blobs:
                return self._send(307, headers={"Location": behaviour.redirect_blobs + self.path})
            return self._send(404)

        do_HEAD = do_GET  # noqa: N815

        def do_POST(self) -> None:  # noqa: N802
            seen.requests.append((self.command, self.path, self.headers.get("Authorization")))
            if not self._authorised():
                return
            self._send(202, headers={"Location": behaviour.upload_location or "/v2/repo/blobs/uploads/1"})

        def do_PUT(self) -> None:  # noqa: N802
            seen.requests.append((self.command, self.path, self.headers.get("Authorization")))
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._send(201)

    return Handler


def _token_handler(seen: Seen, answer: bytes = b'{"token": "good-token"}', status: int = 200,
                   location: str | None = None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            seen.requests.append((self.command, self.path, self.headers.get("Authorization")))
            self.send_response(status)
            if location:
                self.send_header("Location", location)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    return Handler


@pytest.fixture
def servers() -> Iterator[list[ThreadingHTTPServer]]:
    started: list[ThreadingHTTPServer] = []
    yield started
    for server in started:
        server.shutdown()
        server.server_close()


def _registry(servers: list[ThreadingHTTPServer], behaviour: Behaviour, host: str = "127.0.0.1") -> tuple[str, Seen]:
    seen = Seen()
    server = _server(host, _handler(behaviour, seen))
    servers.append(server)
    return f"{host}:{server.server_port}", seen


def _token(servers: list[ThreadingHTTPServer], host: str, **kwargs: object) -> tuple[str, Seen]:
    seen = Seen()
    server = _server(host, _token_handler(seen, **kwargs))  # type: ignore[arg-type]
    servers.append(server)
    return f"http://{host}:{server.server_port}/token", seen


# -- realms -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("realm", "why"), [
    ("file:///etc/passwd", "is not an https URL"),
    ("ftp://127.0.0.1/token", "is not an https URL"),
    ("http://registry.example/token", "is plain http on another machine"),
    ("https://evil.example/token", "is on host evil.example, not the registry's"),
    ("https://user:pw@registry.example/token", "carries user info"),
    ("https://registry.example:notaport/token", "is not a URL"),
    ("https:///token", "is not an https URL"),
])
def test_a_realm_that_is_not_https_on_an_allowed_host_is_refused(realm: str, why: str) -> None:
    with pytest.raises(AuthError, match=why):
        check_realm(realm, "registry.example:443")


def test_allowed_realms() -> None:
    assert check_realm("https://registry.example/token", "registry.example:5000") == "https://registry.example/token"
    assert check_realm("https://auth.example/t", "registry.example", ("auth.example",)) == "https://auth.example/t"
    assert check_realm("http://127.0.0.1:9/t", "127.0.0.1:5000")
    assert token_hosts({"PINMATRIX_TOKEN_HOSTS": "Auth.Example, other.example"}) == ("auth.example", "other.example")
    assert token_hosts({}) == ()


def test_credentials_never_reach_a_token_service_on_another_host(servers: list[ThreadingHTTPServer]) -> None:
    realm, token_seen = _token(servers, "127.0.0.2")
    host, _ = _registry(servers, Behaviour(auth=realm))
    with pytest.raises(AuthError, match=r"token realm 'http://127\.0\.0\.2:\d+/token' is on host 127\.0\.0\.2, "
                                        r"not the registry's; allow it with PINMATRIX_TOKEN_HOSTS=127\.0\.0\.2"):
        Registry(host, credentials=CREDS, allowed_token_hosts=()).tags("repo")
    assert token_seen.requests == []
    # allowed by the user: the token is fetched with the credentials and used
    assert Registry(host, credentials=CREDS, allowed_token_hosts=("127.0.0.2",)).tags("repo") == []
    assert token_seen.requests and token_seen.requests[0][2] == BASIC


def test_a_file_realm_is_never_opened(servers: list[ThreadingHTTPServer], tmp_path: Path) -> None:
    secret = tmp_path / "token.json"
    secret.write_text('{"token": "good-token"}')
    host, seen = _registry(servers, Behaviour(auth=secret.as_uri()))
    with pytest.raises(AuthError, match=r"is not an https URL; refused"):
        Registry(host, credentials=CREDS).tags("repo")
    assert all(r[2] is None for r in seen.requests)


def test_a_token_service_that_redirects_or_floods_gets_nothing_more(servers: list[ThreadingHTTPServer]) -> None:
    elsewhere, elsewhere_seen = _token(servers, "127.0.0.2")
    realm, _ = _token(servers, "127.0.0.1", status=302, answer=b"", location=elsewhere)
    host, _ = _registry(servers, Behaviour(auth=realm))
    with pytest.raises(RegistryError, match=r"token service .* answered HTTP 302"):
        Registry(host, credentials=CREDS).tags("repo")
    assert elsewhere_seen.requests == []
    flood, _ = _token(servers, "127.0.0.1", answer=b'{"token": "' + b"a" * (2 << 20) + b'"}')
    host, _ = _registry(servers, Behaviour(auth=flood))
    with pytest.raises(RegistryError, match=r"answered more than 1048576 bytes"):
        Registry(host, credentials=CREDS).tags("repo")
    for answer in (b"[1]", b'{"token": "a\\nb"}', b'{"token": 7}', b"\xff"):
        bad, _ = _token(servers, "127.0.0.1", answer=answer)
        host, _ = _registry(servers, Behaviour(auth=bad))
        with pytest.raises(RegistryError, match=r"returned no token"):
            Registry(host, credentials=CREDS).tags("repo")


# -- bounded, typed answers ---------------------------------------------------------------------------

def test_a_manifest_that_says_it_is_256_mib_is_refused_before_it_is_read(servers: list[ThreadingHTTPServer]) -> None:
    host, _ = _registry(servers, Behaviour(huge_length=True))
    with pytest.raises(RegistryError, match=rf"the answer is {256 << 20} bytes, more than the {MAX_MANIFEST} allowed"):
        Registry(host).get_manifest("repo", "latest")


def test_a_manifest_that_never_ends_is_cut_at_its_bound(servers: list[ThreadingHTTPServer]) -> None:
    host, _ = _registry(servers, Behaviour(stream_forever=True))
    tracemalloc.start()
    try:
        with pytest.raises(RegistryError, match=rf"more than the {MAX_MANIFEST} bytes allowed"):
            Registry(host).get_manifest("repo", "latest")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * MAX_MANIFEST, peak


@pytest.mark.parametrize(("body", "line"), [
    (b"not json", "is not JSON"),
    (b"[1, 2]", "is not a JSON object"),
    (b"[" * 100_000, "is not JSON"),
    (b'{"layers": [{"digest": "sha256:../../etc"}]}', "layers.0.digest: String should match pattern"),
    (b'{"config": {"digest": "sha256:' + b"0" * 64 + b'", "size": -1}}', "config.size: Input should be greater"),
    (b'{"manifests": 7}', "manifests: Input should be a valid list"),
])
def test_a_malformed_manifest_is_one_line(servers: list[ThreadingHTTPServer], body: bytes, line: str) -> None:
    host, _ = _registry(servers, Behaviour(manifests={"repo/latest": body}))
    with pytest.raises(RegistryError, match=line) as err:
        Registry(host).get_manifest("repo", "latest")
    assert str(err.value).startswith(f"{host}/repo:latest: ") and "\n" not in str(err.value)


def test_a_malformed_manifest_through_the_cli_is_one_line_and_exit_2(servers: list[ThreadingHTTPServer],
                                                                     tmp_path: Path) -> None:
    host, _ = _registry(servers, Behaviour(huge_length=True))
    key = tmp_path / "k.pub"
    subprocess.run([sys.executable, "-m", "pinmatrix", "keygen", "--out", str(tmp_path / "k")], check=True,
                   capture_output=True, env={**os.environ, "PINMATRIX_KEY_PASSWORD": ""})
    proc = subprocess.run([sys.executable, "-m", "pinmatrix", "verify", f"{host}/repo@sha256:{'a' * 64}",
                           "--key", str(key)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "more than the 4194304 allowed" in lines[0] and "Traceback" not in proc.stderr


def test_an_index_naming_too_many_manifests_is_refused(servers: list[ThreadingHTTPServer]) -> None:
    entry = {"mediaType": OCI_MANIFEST, "digest": "sha256:" + "1" * 64, "size": 1}
    body = json.dumps({"mediaType": OCI_INDEX, "manifests": [entry] * 1001}).encode()
    host, _ = _registry(servers, Behaviour(manifests={"repo/latest": body}))
    with pytest.raises(RegistryError, match=r"manifests: List should have at most 1000 items"):
        Registry(host).get_manifest("repo", "latest")


def test_a_manifest_by_digest_is_checked_against_it(servers: list[ThreadingHTTPServer]) -> None:
    honest = json.dumps({"mediaType": OCI_MANIFEST, "layers": []}).encode()
    other = json.dumps({"mediaType": OCI_MANIFEST, "layers": [], "x": 1}).encode()
    host, _ = _registry(servers, Behaviour(manifests={f"repo/{_digest(honest)}": other,
                                                      f"repo/{_digest(other)}": other}))
    with pytest.raises(RegistryError, match=rf"registry served content with digest {_digest(other)}"):
        Registry(host).get_manifest("repo", _digest(honest))
    got = Registry(host).get_manifest("repo", _digest(other))
    assert got is not None and got.digest == _digest(other)


# -- the referrers API --------------------------------------------------------------------------------

def _referrer(n: int, artifact_type: str) -> dict[str, object]:
    return {"mediaType": OCI_MANIFEST, "digest": "sha256:" + f"{n:064x}", "size": 10, "artifactType": artifact_type}


def test_the_referrers_api_is_read_when_the_registry_serves_it(servers: list[ThreadingHTTPServer]) -> None:
    subject = "sha256:" + "ab" * 32
    listing = {"schemaVersion": 2, "mediaType": OCI_INDEX,
               "manifests": [_referrer(1, "application/vnd.dsse.envelope.v1+json"), _referrer(2, "other")]}
    host, seen = _registry(servers, Behaviour(referrers={f"repo/{subject}": json.dumps(listing).encode()}))
    reg = Registry(host)
    assert reg.supports_referrers_api("repo", subject)
    found = reg.referrers("repo", subject, "application/vnd.dsse.envelope.v1+json")
    assert [d["digest"] for d in found] == ["sha256:" + f"{1:064x}"]
    assert len(reg.referrers("repo", subject)) == 2
    assert any(path == f"/v2/repo/referrers/{subject}" for _, path, _ in seen.requests)
    # the fallback tag is not asked for when the API answers
    assert not any("/manifests/sha256-" in path for _, path, _ in seen.requests)


@pytest.mark.parametrize(("listing", "line"), [
    ({"manifests": [_referrer(i, "t") for i in range(5000)]}, "manifests: List should have at most 1000 items"),
    ({"manifests": [{"digest": "sha256:zz", "size": 1}]}, "manifests.0.digest: String should match pattern"),
    ({"manifests": [{"digest": "sha256:" + "0" * 64, "annotations": {"a": 1}}]}, "manifests.0.annotations.a"),
])
def test_a_hostile_referrers_list_is_refused(servers: list[ThreadingHTTPServer], listing: dict[str, object],
                                             line: str) -> None:
    subject = "sha256:" + "cd" * 32
    host, _ = _registry(servers, Behaviour(referrers={f"repo/{subject}": json.dumps(listing).encode()}))
    with pytest.raises(RegistryError, match=line) as err:
        Registry(host).referrers("repo", subject)
    assert f"referrers of {subject}" in str(err.value)


# -- redirects and uploads ----------------------------------------------------------------------------

def test_no_authorization_travels_with_a_redirect_to_another_host(servers: list[ThreadingHTTPServer]) -> None:
    other, other_seen = _registry(servers, Behaviour(), host="127.0.0.2")
    host, seen = _registry(servers, Behaviour(auth="basic", redirect_blobs=f"http://{other}"))
    reg = Registry(host, credentials=CREDS)
    with pytest.raises(RegistryError):
        reg.get_blob("repo", "sha256:" + "0" * 64)  # the other host has no such blob
    assert any(auth == BASIC for _, _, auth in seen.requests)  # the registry itself got them
    assert other_seen.requests and all(auth is None for _, _, auth in other_seen.requests)


def test_a_redirect_to_a_non_http_scheme_is_refused(servers: list[ThreadingHTTPServer]) -> None:
    host, _ = _registry(servers, Behaviour(redirect_blobs="ftp://127.0.0.1"))
    with pytest.raises(RegistryError, match=r"redirected to 'ftp://127\.0\.0\.1/v2/repo/blobs/.*', which is not http"):
        Registry(host).get_blob("repo", "sha256:" + "0" * 64)


def test_an_upload_location_on_another_host_gets_no_credentials(servers: list[ThreadingHTTPServer]) -> None:
    other, other_seen = _registry(servers, Behaviour(), host="127.0.0.2")
    host, seen = _registry(servers, Behaviour(auth="basic", upload_location=f"http://{other}/upload/1"))
    Registry(host, credentials=CREDS).push_blob("repo", b"data")
    assert [m for m, _, _ in other_seen.requests] == ["PUT"]
    assert all(auth is None for _, _, auth in other_seen.requests)
    assert any(m == "POST" and auth == BASIC for m, _, auth in seen.requests)


def test_an_upload_location_that_is_not_http_is_refused(servers: list[ThreadingHTTPServer]) -> None:
    host, _ = _registry(servers, Behaviour(upload_location="file:///tmp/pinmatrix-upload"))
    with pytest.raises(RegistryError, match=r"'file:///tmp/pinmatrix-upload\?digest=.*' is not an http\(s\) URL"):
        Registry(host).push_blob("repo", b"data")


class _Tags(BaseHTTPRequestHandler):
    body = b""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)


@pytest.mark.parametrize("body", [b'{"tags": 5}', b'{"tags": [1, 2]}', b'{"tags": {"a": 1}}', b'{"repositories": 5}'])
def test_a_tag_or_catalog_list_that_is_not_names_is_one_line(servers: list[ThreadingHTTPServer], body: bytes) -> None:
    handler = type("Handler", (_Tags,), {"body": body})
    server = _server("127.0.0.1", handler)
    servers.append(server)
    reg = Registry(f"127.0.0.1:{server.server_port}")
    with pytest.raises(RegistryError, match=r"(tags|repositories) is not a list of names"):
        reg.repositories() if b"repositories" in body else reg.tags("repo")
