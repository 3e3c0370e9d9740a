"""pinmatrix.registry.client rule by rule where an honest registry never goes: a scripted one on 127.0.0.1 answers
each request from a list (status, headers, body) and records what it was asked (method, path, headers, body),
and a token service that answers by the scope it is asked for. Retries of 429/5xx (waits recorded, never slept),
error answers in one line, Bearer challenges (service and scopes in the query, one token per repository, an
identity token POSTed as a form), credentials per repository, redirects; and, against the in-memory registry,
the requests the client makes (HEAD for a blob, the Accept list, the upload path), canonical indexes, copies of
documents without optional keys, and the referrers tag with nothing in it."""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from memregistry import MemoryRegistry, digest_of, serve_registry
from pep691 import serve_handler
from registry_blobs import download_blob, push_blob_file
from test_client import _image

from pinmatrix.imageref import ImageRef, RegistryError
from pinmatrix.registry.auth import AuthError, Credentials
from pinmatrix.registry.client import MANIFEST_TYPES, MAX_MANIFEST, OCI_INDEX, OCI_MANIFEST, Manifest, Registry

CREDS = Credentials("alice", "pw", Path("/nonexistent/auth.json"), "127.0.0.1")


@dataclass
class Asked:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Script:
    """Answers given in order (the last one again when they run out); every request recorded."""

    answers: list[tuple[int, dict[str, str], bytes]] = field(default_factory=list)
    asked: list[Asked] = field(default_factory=list)

    def next(self) -> tuple[int, dict[str, str], bytes]:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _any(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            script.asked.append(Asked(self.command, self.path, dict(self.headers.items()), body))
            status, headers, answer = script.next()
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            if "Content-Length" not in headers:
                self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(answer)

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _any  # noqa: N815

    return Handler


@pytest.fixture
def serve() -> Iterator[object]:
    started: list[ThreadingHTTPServer] = []

    def start(script: Script) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
        started.append(server)
        return f"127.0.0.1:{server.server_port}"

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def _client(host: str, **kwargs: object) -> tuple[Registry, list[float]]:
    client = Registry(host, allowed_token_hosts=(), **kwargs)  # type: ignore[arg-type]
    waits: list[float] = []
    client._sleep = waits.append
    return client, waits


OK = (200, {"Content-Type": "application/json"}, b"{}")


# -- retries ------------------------------------------------------------------------------------------

def test_a_429_or_5xx_is_asked_again_after_retry_after_or_the_backoff(serve) -> None:  # noqa: ANN001
    script = Script([(503, {"Retry-After": "3"}, b""), (429, {}, b""), (502, {"Retry-After": " 0 "}, b""),
                     (500, {"Retry-After": "soon"}, b""), OK])
    client, waits = _client(serve(script))
    assert client.retries == 4
    assert client._request("GET", "/v2/")[0] == 200
    assert waits == [3.0, 1.0, 0.0, 4.0]  # Retry-After, else 0.5 s doubled per attempt (attempt 1, 3)
    assert [a.path for a in script.asked] == ["/v2/"] * 5


def test_retries_end_after_four_with_the_last_answer(serve) -> None:  # noqa: ANN001
    script = Script([(503, {}, b'{"errors": [{"code": "UNAVAILABLE", "message": "later"}]}')])
    host = serve(script)
    client, waits = _client(host)
    with pytest.raises(RegistryError) as err:
        client._request("GET", "/v2/x/tags/list")
    assert str(err.value) == f"GET {host}/v2/x/tags/list: HTTP 503 UNAVAILABLE: later"
    assert err.value.status == 503  # type: ignore[attr-defined]
    assert waits == [0.5, 1.0, 2.0, 4.0] and len(script.asked) == 5


def test_an_answer_the_caller_expects_is_not_asked_again(serve) -> None:  # noqa: ANN001
    script = Script([(503, {}, b"down")])
    client, waits = _client(serve(script))
    assert client._request("GET", "/v2/", ok=(503,))[0] == 503
    assert waits == [] and len(script.asked) == 1


def test_a_retry_after_beyond_the_bound_ends_the_request_at_once(serve) -> None:  # noqa: ANN001
    script = Script([(429, {"Retry-After": "31"}, b"")])
    host = serve(script)
    client, waits = _client(host)
    with pytest.raises(RegistryError) as err:
        client._request("GET", "/v2/r/manifests/t")
    assert str(err.value) == (f"GET {host}/v2/r/manifests/t: HTTP 429, and the registry asks to wait more than the "
                              "30 s pinmatrix waits (Retry-After): try again later")
    assert err.value.status == 429 and waits == [] and len(script.asked) == 1  # type: ignore[attr-defined]


# -- error answers ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "detail"), [
    (b'{"errors": [{"code": "A", "message": "one"}, {"code": "B", "message": "two"}]}', " A: one; B: two"),
    (b"", ""),
    (b"x" * 300, " " + "x" * 200),
    (b"\xff\xfe not utf-8", " \ufffd\ufffd not utf-8"),
    (b'{"errors": [{"code": "BIG", "message": "' + b"m" * (70 << 10) + b'"}]}',  # cut at 64 KiB: not JSON any more
     "the first 200 bytes"),
])
def test_an_error_answer_is_one_line_with_what_the_registry_said(serve, body: bytes, detail: str) -> None:  # noqa: ANN001
    host = serve(Script([(400, {}, body)]))
    client, _ = _client(host)
    with pytest.raises(RegistryError) as err:
        client._request("PUT", "/v2/r/manifests/t", data=b"{}")
    if detail == "the first 200 bytes":
        detail = " " + body[:200].decode()
    assert str(err.value) == f"PUT {host}/v2/r/manifests/t: HTTP 400{detail}"
    assert err.value.status == 400  # type: ignore[attr-defined]


def test_an_unreachable_registry_is_one_line() -> None:
    client, _ = _client("127.0.0.1:9")
    with pytest.raises(RegistryError, match=r"^registry 127\.0\.0\.1:9 unreachable: \[Errno 111\] Connection refused$"):
        client._request("GET", "/v2/")
    assert client.ping() is False


def test_an_answer_of_exactly_the_bound_is_read(serve, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    host = serve(Script([(200, {}, b"x" * 100)]))
    client, _ = _client(host)
    assert client._request("GET", "/v2/", max_bytes=100)[2] == b"x" * 100
    with pytest.raises(RegistryError) as err:
        client._request("GET", "/v2/", max_bytes=99)
    # (the message names the path as the caller gave it: without the registry's host, unlike _open's)
    assert str(err.value).startswith("GET ") and str(err.value).endswith("/v2/: the answer is 100 bytes, more than "
                                                                           "the 99 allowed")
    assert MAX_MANIFEST == 4 << 20


def test_a_head_answer_has_its_status_headers_and_no_body(serve) -> None:  # noqa: ANN001
    big = str(5 << 20)  # a blob's length, beyond what an answer read whole may be
    host = serve(Script([(200, {"Content-Length": big, "Docker-Content-Digest": "sha256:x"}, b"")]))
    client, _ = _client(host)
    status, headers, body = client._request("HEAD", "/v2/r/blobs/sha256:x")
    assert (status, headers["docker-content-digest"], headers["content-length"], body) == (200, "sha256:x", big, b"")
    assert client.has_blob("r", "sha256:x")


# -- redirects ----------------------------------------------------------------------------------------

def test_a_redirect_is_followed_to_https_and_never_to_another_scheme(serve) -> None:  # noqa: ANN001
    ftp = serve(Script([(307, {"Location": "ftp://127.0.0.1/blob"}, b"")]))
    client, _ = _client(ftp)
    with pytest.raises(RegistryError) as err:
        client._request("GET", "/v2/r/blobs/sha256:x")
    assert str(err.value) == f"http://{ftp}/v2/r/blobs/sha256:x: redirected to 'ftp://127.0.0.1/blob', which is not http(s)"
    tls = serve(Script([(307, {"Location": "https://127.0.0.1:9/blob"}, b"")]))
    client, _ = _client(tls)
    with pytest.raises(RegistryError, match=r"unreachable"):  # followed (and nothing listens there)
        client._request("GET", "/v2/r/blobs/sha256:x")


def test_a_redirect_a_put_may_not_follow_is_the_registrys_error(serve) -> None:  # noqa: ANN001
    host = serve(Script([(307, {"Location": "/elsewhere", "Content-Type": "application/json"},
                          b'{"errors": [{"code": "MOVED", "message": "not here"}]}')]))
    client, _ = _client(host)
    with pytest.raises(RegistryError) as err:
        client._request("PUT", "/v2/r/manifests/t", data=b"{}", ok=(201,))
    assert str(err.value) == f"PUT {host}/v2/r/manifests/t: HTTP 307 MOVED: not here"


# -- authentication -----------------------------------------------------------------------------------

def test_a_401_without_a_known_challenge_is_one_line(serve) -> None:  # noqa: ANN001
    long = "Negotiate " + "z" * 100
    for header, shown in ((None, "none"), (long, long[:80])):
        host = serve(Script([(401, {"WWW-Authenticate": header} if header else {}, b"")]))
        client, _ = _client(host, credentials=CREDS)
        with pytest.raises(RegistryError) as err:
            client._request("GET", "/v2/")
        assert str(err.value) == f"registry {host} answered 401 without a challenge pinmatrix knows ({shown})"
        assert err.value.status == 401  # type: ignore[attr-defined]


def test_basic_auth_with_an_identity_token_asks_for_a_password(serve) -> None:  # noqa: ANN001
    host = serve(Script([(401, {"WWW-Authenticate": 'Basic realm="r"'}, b"")]))
    token = Credentials("<token>", "", Path("/x/auth.json"), "h", identity_token="refresh-1", helper="docker-credential-x")
    client, _ = _client(host, credentials=token)
    with pytest.raises(AuthError) as err:
        client._request("GET", "/v2/")
    assert str(err.value) == (f"registry {host} asks for Basic auth, and the credentials from docker-credential-x are "
                              "an identity token, which only a token service takes: log in with a password")


def test_a_bearer_challenge_without_a_realm_is_one_line(serve) -> None:  # noqa: ANN001
    host = serve(Script([(401, {"WWW-Authenticate": 'Bearer service="s"'}, b"")]))
    client, _ = _client(host)
    with pytest.raises(RegistryError) as err:
        client._request("GET", "/v2/")
    assert str(err.value) == f"registry {host}: Bearer challenge without a realm"
    assert err.value.status == 401  # type: ignore[attr-defined]


def _bearer(serve, token_answers: list[tuple[int, dict[str, str], bytes]], *, service: bool = True,  # noqa: ANN001
            realm_query: str = "") -> tuple[str, Script, Script]:
    """A registry that wants ``Bearer token-<repository>``, and a token service answering ``token_answers``."""
    tokens = Script(token_answers)
    realm = f"http://{serve(tokens)}/token{realm_query}"

    class Registry401(Script):
        def next(self) -> tuple[int, dict[str, str], bytes]:
            asked = self.asked[-1]
            repo = asked.path.split("/")[2] if asked.path.count("/") > 3 else ""
            if asked.headers.get("Authorization") == f"Bearer token-{repo}":
                return OK
            params = f'realm="{realm}"' + (',service="reg"' if service else "") + f',scope="repository:{repo}:pull"'
            return 401, {"WWW-Authenticate": f"Bearer {params}"}, b""

    registry = Registry401([OK])
    return serve(registry), registry, tokens


def _token_for(repo: str) -> tuple[int, dict[str, str], bytes]:
    return 200, {}, json.dumps({"token": f"token-{repo}"}).encode()


def test_a_bearer_token_is_fetched_once_per_repository_with_its_service_and_scope(serve) -> None:  # noqa: ANN001
    host, registry, tokens = _bearer(serve, [_token_for("a"), _token_for("b")], realm_query="?tenant=1")
    client, _ = _client(host)
    for repo in ("a", "b", "a", "b"):
        client._request("GET", f"/v2/{repo}/tags/list")
    assert [t.path for t in tokens.asked] == ["/token?tenant=1&service=reg&scope=repository%3Aa%3Apull",
                                              "/token?tenant=1&service=reg&scope=repository%3Ab%3Apull"]
    assert all(t.method == "GET" and "Authorization" not in t.headers for t in tokens.asked)  # no credentials
    assert [r.headers.get("Authorization") for r in registry.asked] == [
        None, "Bearer token-a", None, "Bearer token-b", "Bearer token-a", "Bearer token-b"]


def test_a_challenge_without_a_service_asks_for_the_scope_alone_with_the_credentials(serve) -> None:  # noqa: ANN001
    host, _, tokens = _bearer(serve, [(200, {}, b'{"access_token": "token-a"}')], service=False)
    client, _ = _client(host, credentials=CREDS)
    client._request("GET", "/v2/a/tags/list")
    assert [t.path for t in tokens.asked] == ["/token?scope=repository%3Aa%3Apull"]
    assert tokens.asked[0].headers["Authorization"] == CREDS.basic()


def test_an_identity_token_is_posted_as_a_refresh_token_form(serve) -> None:  # noqa: ANN001
    tokens = Script([_token_for("a")])
    realm = f"http://{serve(tokens)}/token"
    challenge = f'Bearer realm="{realm}",service="reg",scope="repository:a:pull repository:a:push"'
    registry = Script([(401, {"WWW-Authenticate": challenge}, b""), OK])
    refresh = Credentials("<token>", "", Path("/x/auth.json"), "h", identity_token="refresh-1")
    client, _ = _client(serve(registry), credentials=refresh)
    client._request("GET", "/v2/a/tags/list")
    (post,) = tokens.asked
    assert (post.method, post.path, post.headers["Content-Type"]) == ("POST", "/token",
                                                                      "application/x-www-form-urlencoded")
    assert urllib.parse.parse_qsl(post.body.decode()) == [
        ("grant_type", "refresh_token"), ("refresh_token", "refresh-1"), ("client_id", "pinmatrix"),
        ("service", "reg"), ("scope", "repository:a:pull repository:a:push")]
    assert registry.asked[1].headers["Authorization"] == "Bearer token-a"


@pytest.mark.parametrize(("status", "line"), [
    (401, "refused the identity token from /x/auth.json: the token service answered HTTP 401"),
    (403, "refused the identity token from /x/auth.json: the token service answered HTTP 403"),
])
def test_a_token_service_refusing_an_identity_token_names_it(serve, status: int, line: str) -> None:  # noqa: ANN001
    host, _, _ = _bearer(serve, [(status, {}, b"no")])
    refresh = Credentials("<token>", "", Path("/x/auth.json"), "h", identity_token="refresh-1")
    client, _ = _client(host, credentials=refresh)
    with pytest.raises(AuthError) as err:
        client._request("GET", "/v2/a/tags/list")
    assert str(err.value) == f"registry {host} {line}"


def test_a_token_service_error_is_one_line_with_its_status(serve) -> None:  # noqa: ANN001
    host, _, tokens = _bearer(serve, [(404, {}, b"")])
    client, _ = _client(host)
    with pytest.raises(RegistryError) as err:
        client._request("GET", "/v2/a/tags/list")
    realm = f"http://127.0.0.1:{tokens.asked[0].headers['Host'].split(':')[1]}/token"
    assert str(err.value) == f"registry {host}: token service {realm} answered HTTP 404"
    assert err.value.status == 404  # type: ignore[attr-defined]


def test_credentials_are_looked_up_per_repository(serve, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    script = Script([(401, {"WWW-Authenticate": 'Basic realm="r"'}, b""), OK])
    host = serve(script)
    auth = tmp_path / "auth.json"

    def basic(user: str) -> str:
        return base64.b64encode(f"{user}:pw".encode()).decode()

    auth.write_text(json.dumps({"auths": {host: {"auth": basic("anyone")}, f"{host}/team": {"auth": basic("team")}}}))
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(auth))
    client = Registry(host, allowed_token_hosts=())
    client._request("GET", "/v2/team/tags/list")
    client._request("GET", "/v2/other/tags/list")
    sent = [a.headers.get("Authorization") for a in script.asked]
    assert sent == [None, f"Basic {basic('team')}", f"Basic {basic('anyone')}"]
    assert client.credentials("team").username == "team"  # type: ignore[union-attr]
    assert client.credentials().username == "anyone"  # type: ignore[union-attr]


# -- against the in-memory registry -------------------------------------------------------------------

def _mem(reg: MemoryRegistry) -> Registry:
    return Registry(reg.address, allowed_token_hosts=())


def test_a_blob_is_looked_for_with_head_and_a_manifest_asked_for_in_every_type() -> None:
    with serve_registry() as reg:
        digest = reg.add_blob("r", b"data")
        client = _mem(reg)
        assert client.has_blob("r", digest)
        assert reg.requests[-1][:2] == ("HEAD", f"/v2/r/blobs/{digest}")
        seen: list[str | None] = []
        real = client._open

        def record(method: str, url: str, **kwargs: object) -> object:
            seen.append((kwargs.get("headers") or {}).get("Accept"))  # type: ignore[union-attr]
            return real(method, url, **kwargs)  # type: ignore[arg-type]

        client._open = record  # type: ignore[method-assign]
        client.get_manifest("r", "t")
        assert seen == [", ".join(MANIFEST_TYPES)]


def test_a_plain_upload_starts_at_the_uploads_path() -> None:
    with serve_registry() as reg:
        client = _mem(reg)
        client.push_blob("r", b"hello")
        assert [p for m, p, _ in reg.requests if m == "POST"] == ["/v2/r/blobs/uploads/"]


def test_a_blob_is_downloaded_into_folders_that_do_not_exist_yet(tmp_path: Path) -> None:
    with serve_registry() as reg:
        digest = reg.add_blob("r", b"data")
        dest = tmp_path / "a" / "b" / "c" / "blob"
        assert download_blob(_mem(reg), "r", digest, dest) == 4 and dest.read_bytes() == b"data"


def test_a_large_file_is_pushed_whole_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pinmatrix.registry.blobs.CHUNK", 1000)
    path = tmp_path / "f"
    path.write_bytes(bytes(range(256)) * 20)  # 5120 bytes: six chunks
    with serve_registry() as reg:
        name = push_blob_file(_mem(reg), "r", path)
        assert name == digest_of(path.read_bytes()) and reg.blobs[name] == path.read_bytes()


def test_a_streamed_copy_of_a_damaged_blob_names_its_source() -> None:
    with serve_registry(MemoryRegistry(mounts=False)) as reg:
        digest = reg.add_blob("src", b"good")
        reg.blobs[digest] = b"evil"
        with pytest.raises(RegistryError, match=rf"^{reg.address}/src: blob {digest} does not match its digest"):
            _mem(reg).mount_blob("dst", digest, "src")


def test_documents_without_optional_keys_are_copied() -> None:
    with serve_registry() as reg:
        bare = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST}).encode()  # no config, no layers
        one = reg.add_manifest("src", bare, OCI_MANIFEST)
        empty = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX}).encode()  # no manifests
        two = reg.add_manifest("src", empty, OCI_INDEX)
        client = _mem(reg)
        assert client.copy(ImageRef(reg.address, "src", None, one), "dst", ["a"]) == one
        assert client.copy(ImageRef(reg.address, "src", None, two), "dst", ["b"]) == two
        assert reg.tags["dst"] == {"a": one, "b": two}


def test_a_tag_that_names_something_else_after_the_copy_is_refused() -> None:
    class Moving(MemoryRegistry):
        def add_manifest(self, repo: str, body: bytes, media_type: str, tag: str | None = None) -> str:
            digest = super().add_manifest(repo, body, media_type, None)
            if tag is not None:
                self.tags.setdefault(repo, {})[tag] = other
            return digest

    with serve_registry(Moving()) as reg:
        other = reg.add_manifest("dst", json.dumps({"schemaVersion": 2, "n": 1}).encode(), OCI_MANIFEST)
        digest, _ = _image(reg, tag=None)
        with pytest.raises(RegistryError) as err:
            _mem(reg).copy(ImageRef(reg.address, "src/app", None, digest), "dst", ["t"])
        assert str(err.value) == f"{reg.address}/dst:t does not name {digest} after the copy"


def _canonical(body: bytes) -> None:
    assert body == json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()


@pytest.mark.parametrize("api", [True, False])
def test_artifacts_and_the_referrers_tag_are_canonical_json_asked_about_the_subject(api: bool) -> None:
    with serve_registry(MemoryRegistry(referrers_api=api, deletes=True)) as reg:
        digest, body = _image(reg)
        client = _mem(reg)
        subject = Manifest(body, OCI_MANIFEST, digest)
        first = client.push_artifact("src/app", subject, artifact_type="application/x-a", payload=b"a",
                                     payload_media_type="application/x-pa", annotations={"z": "1", "a": "2"})
        second = client.push_artifact("src/app", subject, artifact_type="application/x-b", payload=b"b",
                                      payload_media_type="application/x-pb")
        _canonical(reg.manifests[first][0])
        asked = [p for m, p, _ in reg.requests if "/referrers/" in p]
        assert asked and set(asked) == {f"/v2/src/app/referrers/{digest}"}
        posts = [p for m, p, _ in reg.requests if m == "POST"]
        assert all(p.startswith("/v2/src/app/blobs/uploads/") for p in posts)
        tag = f"sha256-{digest.split(':')[1]}"
        if not api:
            index = reg.manifests[reg.tags["src/app"][tag]][0]
            _canonical(index)
            assert json.loads(index)["schemaVersion"] == 2
        assert client.remove_referrers("src/app", digest, {first}) == set()
        if not api:
            index = reg.manifests[reg.tags["src/app"][tag]][0]
            _canonical(index)
            doc = json.loads(index)
            assert (doc["schemaVersion"], doc["mediaType"]) == (2, OCI_INDEX)
            assert [m["digest"] for m in doc["manifests"]] == [second]
        assert [d["digest"] for d in client.referrers("src/app", digest)] == [second]
        assert {p for m, p, _ in reg.requests if "/referrers/" in p} == {f"/v2/src/app/referrers/{digest}"}


def test_removing_referrers_where_there_is_no_referrers_tag_writes_nothing() -> None:
    with serve_registry() as reg:
        digest, _ = _image(reg)
        before = len(reg.requests)
        assert _mem(reg).remove_referrers("src/app", digest, {"sha256:" + "1" * 64}) == set()
        assert [m for m, _, _ in reg.requests[before:]] == ["GET", "GET"]  # the API, the tag: no PUT
        assert _mem(reg).remove_referrers("src/app", digest, set()) == set()


def test_a_delete_answered_200_removes_the_referrer(serve) -> None:  # noqa: ANN001
    index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}).encode()
    script = Script([(200, {"Content-Type": OCI_INDEX}, index), (200, {}, b""), (405, {}, b"")])
    client, _ = _client(serve(script))
    one, two = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    assert client.remove_referrers("r", "sha256:" + "0" * 64, {one, two}) == {two}
    assert [(a.method, a.path) for a in script.asked] == [("GET", "/v2/r/referrers/sha256:" + "0" * 64),
                                                         ("DELETE", f"/v2/r/manifests/{one}"),
                                                         ("DELETE", f"/v2/r/manifests/{two}")]


def test_a_catalog_page_of_three_continues_after_its_last_name() -> None:
    with serve_registry(MemoryRegistry(catalog_page=3)) as reg:
        names = [f"repo{i}" for i in range(7)]
        for name in names:
            reg.add_blob(name, name.encode())
        assert _mem(reg).repositories() == names
        pages = [p for m, p, _ in reg.requests if p.startswith("/v2/_catalog")]
        assert pages == ["/v2/_catalog?n=1000", "/v2/_catalog?n=1000&last=repo2", "/v2/_catalog?n=1000&last=repo5"]


@pytest.mark.parametrize(("path", "where"), [("/v2/_catalog?n=1000", "/v2/_catalog"), ("/v2/r/tags/list", "r tags")])
def test_a_catalog_or_tag_list_that_is_not_json_names_where(serve, path: str, where: str) -> None:  # noqa: ANN001
    host = serve(Script([(200, {}, b"not json")]))
    client, _ = _client(host)
    with pytest.raises(RegistryError) as err:
        client.repositories() if "catalog" in path else client.tags("r")
    sep = "" if where.startswith("/") else "/"
    assert str(err.value) == f"{host}{sep}{where}: the registry's answer is not JSON"
    host = serve(Script([(200, {}, b'{"repositories": 5, "tags": 5}')]))
    client, _ = _client(host)
    with pytest.raises(RegistryError) as err:
        client.repositories() if "catalog" in path else client.tags("r")
    key = "repositories" if "catalog" in path else "tags"
    assert str(err.value) == f"{host}{sep}{where}: {key} is not a list of names"


def test_an_image_config_that_is_not_json_names_the_image(serve) -> None:  # noqa: ANN001
    with serve_registry() as reg:
        manifest = {"schemaVersion": 2, "config": {"digest": reg.add_blob("r", b"not json")}, "layers": []}
        reg.add_manifest("r", json.dumps(manifest).encode(), OCI_MANIFEST, "t")
        with pytest.raises(RegistryError, match=rf"^{reg.address}/r:t config: the registry's answer is not JSON$"):
            _mem(reg).image_config("r", "t")


def test_a_refused_identity_token_is_named_as_one(serve) -> None:  # noqa: ANN001
    host = serve(Script([(401, {"WWW-Authenticate": 'Basic realm="r"'}, b"")]))
    token = Credentials("<token>", "", Path("/x/auth.json"), "h", identity_token="t")
    client, _ = _client(host, credentials=token)
    assert str(client._refused(token, "why")) == f"registry {host} refused the identity token from /x/auth.json: why"


def test_retry_after_dates_without_a_zone_are_utc_and_the_bound_itself_is_waited() -> None:
    from datetime import datetime, timedelta, timezone

    from pinmatrix.registry.client import retry_delay

    soon = (datetime.now(timezone.utc) + timedelta(seconds=10)).strftime("%a, %d %b %Y %H:%M:%S -0000")
    assert 8 <= (retry_delay(soon, 0) or 0) <= 10  # -0000: no zone given, read as UTC
    assert retry_delay("30", 0) == 30.0 and retry_delay("31", 0) is None


def test_retry_after_seconds_of_any_length_keep_their_value_and_other_digits_are_unreadable() -> None:
    from pinmatrix.registry.client import retry_delay

    assert retry_delay("0", 2) == 0.0 and retry_delay("000000000000031", 0) is None  # zeros first: still 31 s
    assert retry_delay("0000000000000000000000029", 0) == 29.0
    assert retry_delay("1" + "0" * 5000, 0) is None  # past int()'s 4300 digits: still only "too long a wait"
    # str.isdigit takes these for digits, int() refuses "²": read as a date, unreadable, so the backoff
    assert retry_delay("\xb2", 1) == 1.0 and retry_delay("\u0663", 0) == 0.5


def test_a_retry_after_date_is_read_by_its_first_64_characters() -> None:
    from datetime import datetime, timedelta, timezone

    from pinmatrix.registry.client import retry_delay

    # a date without a zone (read as UTC) 20 s ahead, padded to 64 characters; a 65th character "1" would be
    # read as the zone +00:01, which puts the moment 40 s in the past
    soon = (datetime.now(timezone.utc) + timedelta(seconds=20)).strftime("%a, %d %b %Y %H:%M:%S")
    assert 17 <= (retry_delay(soon.ljust(64) + "1", 0) or 0) <= 20


def test_a_token_service_that_cannot_be_reached_or_refuses_anonymous_access_is_one_line(serve) -> None:  # noqa: ANN001
    realm = "http://127.0.0.1:9/token"
    host = serve(Script([(401, {"WWW-Authenticate": f'Bearer realm="{realm}",scope="repository:a:pull"'}, b"")]))
    client, _ = _client(host)
    with pytest.raises(RegistryError) as err:
        client._request("GET", "/v2/a/tags/list")
    assert str(err.value) == f"registry {host}: token service {realm} unreachable: [Errno 111] Connection refused"
    host, _, _ = _bearer(serve, [(401, {}, b"")])
    client, _ = _client(host)
    with pytest.raises(AuthError, match=rf"^registry {host} requires authentication and no credentials for it were "):
        client._request("GET", "/v2/a/tags/list")


@contextlib.contextmanager
def _token_service(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A token service on 127.0.0.1 answering with ``handler``; yields its realm URL."""
    with serve_handler(handler) as base:
        yield f"{base}/token"


def test_a_huge_token_answer_is_refused_after_the_bound_without_reading_the_rest(serve) -> None:  # noqa: ANN001
    """A hostile token service sends 64 MiB: the client reads MAX_TOKEN + 1 bytes, refuses in one line and hangs
    up, so the service's writes fail long before the end (the socket buffers hold a few MiB at most)."""
    from pinmatrix.registry.client import MAX_TOKEN

    huge, chunk = 64 << 20, b" " * (1 << 16)
    sent: list[int] = []
    hung_up, done = threading.Event(), threading.Event()

    class Huge(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()
            total = 0
            try:
                while total < huge:
                    self.wfile.write(chunk)
                    total += len(chunk)
            except OSError:
                hung_up.set()
            sent.append(total)
            done.set()

    with _token_service(Huge) as realm:
        host = serve(Script([(401, {"WWW-Authenticate": f'Bearer realm="{realm}",scope="x"'}, b"")]))
        client, _ = _client(host, timeout=5)
        with pytest.raises(RegistryError) as err:
            client._request("GET", "/v2/a/tags/list")
        assert str(err.value) == f"registry {host}: token service {realm} answered more than {MAX_TOKEN} bytes"
        assert done.wait(10)
        assert hung_up.is_set() and sent[0] < 32 << 20, f"the client read the whole answer ({sent[0]} bytes)"


def test_token_answers_of_the_bound_pass_and_endless_or_silent_ones_are_cut(serve) -> None:  # noqa: ANN001
    from pinmatrix.registry.client import MAX_TOKEN

    body = b'{"token": "token-a"' + b" " * (MAX_TOKEN - 20) + b"}"
    assert len(body) == MAX_TOKEN
    host, _, _ = _bearer(serve, [(200, {}, body)])
    client, _ = _client(host)
    client._request("GET", "/v2/a/tags/list")  # read, and the token taken
    stop = threading.Event()

    class Endless(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()
            try:
                while not stop.is_set():
                    self.wfile.write(b" " * (1 << 16))
            except OSError:
                return

    class Silent(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            stop.wait(10)

    for handler, line in ((Endless, f"answered more than {MAX_TOKEN} bytes"), (Silent, "unreachable: timed out")):
        with _token_service(handler) as realm:
            try:
                host = serve(Script([(401, {"WWW-Authenticate": f'Bearer realm="{realm}",scope="x"'}, b"")]))
                client, _ = _client(host, timeout=0.5)
                with pytest.raises(RegistryError) as err:
                    client._request("GET", "/v2/a/tags/list")
                assert str(err.value) == f"registry {host}: token service {realm} {line}"
            finally:
                stop.set()  # before the server shuts down: the silent handler waits on it
        stop.clear()


def test_answers_without_a_content_type(serve) -> None:  # noqa: ANN001
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}).encode()
    host = serve(Script([(200, {}, body)]))
    client, _ = _client(host)
    assert client.get_manifest("r", "t").media_type == OCI_INDEX  # type: ignore[union-attr]
    assert client.supports_referrers_api("r", "sha256:" + "1" * 64) is False


@pytest.mark.parametrize("call", ["manifest", "catalog", "referrers"])
def test_an_error_names_the_method_it_answered(serve, call: str) -> None:  # noqa: ANN001
    index = (200, {"Content-Type": OCI_INDEX}, json.dumps({"schemaVersion": 2, "manifests": []}).encode())
    script = Script(([index] if call == "referrers" else []) + [(400, {}, b"")])
    host = serve(script)
    client, _ = _client(host)
    with pytest.raises(RegistryError) as err:
        {"manifest": lambda: client.get_manifest("r", "t"), "catalog": client.repositories,
         "referrers": lambda: client.referrers("r", "sha256:" + "1" * 64)}[call]()
    assert str(err.value).startswith(f"GET {host}/v2/") and str(err.value).endswith(": HTTP 400")


def test_a_streamed_copy_of_a_missing_blob_names_its_get() -> None:
    with serve_registry(MemoryRegistry(mounts=False)) as reg:
        missing = "sha256:" + "3" * 64
        with pytest.raises(RegistryError) as err:
            _mem(reg).mount_blob("dst", missing, "src")
        assert str(err.value) == f"GET {reg.address}/v2/src/blobs/{missing}: HTTP 404 BLOB_UNKNOWN: blob_unknown"


def test_an_upload_is_octet_stream_at_a_location_relative_to_the_registry(serve) -> None:  # noqa: ANN001
    script = Script([(202, {"Location": "v2/r/blobs/uploads/7?s=1"}, b""), (201, {}, b"")])
    client, _ = _client(serve(script))
    client._upload("r", "sha256:" + "4" * 64, b"data")
    put = script.asked[1]
    assert (put.method, put.path) == ("PUT", "/v2/r/blobs/uploads/7?s=1&digest=sha256%3A" + "4" * 64)
    assert put.headers["Content-Type"] == "application/octet-stream" and put.body == b"data"


def test_a_redirect_to_a_long_url_shows_its_first_120_characters(serve) -> None:  # noqa: ANN001
    far = "ftp://127.0.0.1/" + "p" * 200
    host = serve(Script([(307, {"Location": far}, b"")]))
    client, _ = _client(host)
    with pytest.raises(RegistryError) as err:
        client._request("GET", "/v2/r/blobs/sha256:x")
    assert f"redirected to {far[:120]!r}, which" in str(err.value)


def test_a_request_waits_60_s_by_default_and_a_silent_registry_ends_at_its_timeout() -> None:
    assert Registry("h", allowed_token_hosts=()).timeout == 60.0 and Registry.from_setting("h/x").timeout == 60.0
    stop = threading.Event()

    class Silent(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            stop.wait(10)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Silent)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    try:
        host = f"127.0.0.1:{server.server_port}"
        client, _ = _client(host, timeout=0.5)
        with pytest.raises(RegistryError) as err:
            client._request("GET", "/v2/")
        assert str(err.value) == f"registry {host} unreachable: timed out"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def test_only_http_and_https_urls_are_asked_and_a_bad_one_is_shown_cut(serve) -> None:  # noqa: ANN001
    client, _ = _client(serve(Script([OK])))
    with pytest.raises(RegistryError, match=r"unreachable"):  # https is asked (nothing listens there)
        client._request("GET", "https://127.0.0.1:9/v2/")
    far = "ftp://127.0.0.1/" + "p" * 200
    with pytest.raises(RegistryError) as err:
        client._request("GET", far)
    assert str(err.value) == f"registry {client.host}: {far[:120]!r} is not an http(s) URL"


def test_a_refusal_names_the_repositorys_credentials_and_a_repository_without_any(
        serve, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    def basic(user: str) -> str:
        return base64.b64encode(f"{user}:pw".encode()).decode()

    refusing = serve(Script([(401, {"WWW-Authenticate": 'Basic realm="r"'}, b"")]))
    auth = tmp_path / "auth.json"
    auth.write_text(json.dumps({"auths": {refusing: {"auth": basic("anyone")},
                                          f"{refusing}/team": {"auth": basic("team")}}}))
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(auth))
    with pytest.raises(AuthError) as err:
        Registry(refusing, allowed_token_hosts=())._request("GET", "/v2/team/tags/list")
    assert str(err.value) == (f"registry {refusing} refused the credentials of 'team' from {auth}: HTTP 401 on GET "
                              "/v2/team/tags/list")
    script = Script([(401, {"WWW-Authenticate": 'Basic realm="r"'}, b""), OK,
                     (401, {"WWW-Authenticate": 'Basic realm="r"'}, b"")])
    host = serve(script)
    auth.write_text(json.dumps({"auths": {f"{host}/team": {"auth": basic("team")}}}))  # none for the host itself
    client = Registry(host, allowed_token_hosts=())
    client._request("GET", "/v2/team/tags/list")
    with pytest.raises(AuthError, match=rf"^registry {host} requires authentication and no credentials for it "):
        client._request("GET", "/v2/other/tags/list")
    assert script.asked[-1].headers.get("Authorization") is None
