"""Registries as users have them, against small registries on 127.0.0.1 started here: docker credential helpers
(``credHelpers`` before ``credsStore`` before ``auths``; ``docker-credential-NAME get`` with the host on stdin,
its answer bounded and typed, ``<token>`` meaning an identity token), OAuth2 identity tokens exchanged at the
token realm (refresh_token grant; never sent as Basic; a realm on another host still refused), and retries on
429/5xx with backoff, honouring Retry-After and refusing one beyond the bound."""

from __future__ import annotations

import base64
import http.server
import json
import os
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from pathlib import Path

import pytest

from pinmatrix.imageref import RegistryError
from pinmatrix.registry import client as client_module
from pinmatrix.registry.auth import AuthError, find_credentials
from pinmatrix.registry.client import Registry, retry_delay

USER, PASSWORD, IDENTITY, ACCESS = "alice", "s3cret pw", "refresh-abc.123", "access-xyz"


@dataclass
class Behaviour:
    """What the little registry does: its auth scheme and a queue of statuses to answer before serving."""

    scheme: str = "none"  # none | basic | bearer
    realm: str = ""  # bearer: the token realm it names (default: its own /token)
    failures: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    seen: list[dict[str, str]] = field(default_factory=list)  # method, path, authorization, body


class _Handler(http.server.BaseHTTPRequestHandler):
    behaviour: Behaviour
    origin: str

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, status: int, body: bytes = b"{}", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def _serve(self) -> None:
        b = self.behaviour
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        b.seen.append({"method": self.command, "path": self.path, "authorization": self.headers.get("Authorization", ""),
                       "body": body})
        if self.path.startswith("/token"):
            form = urllib.parse.parse_qs(body)
            if form.get("grant_type") == ["refresh_token"] and form.get("refresh_token") == [IDENTITY]:
                return self._answer(200, json.dumps({"access_token": ACCESS}).encode())
            return self._answer(401)
        if b.failures:
            status, headers = b.failures.pop(0)
            return self._answer(status, b'{"errors": [{"code": "UNAVAILABLE", "message": "try later"}]}', headers)
        auth = self.headers.get("Authorization", "")
        if b.scheme == "basic" and auth != "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode():
            return self._answer(401, headers={"WWW-Authenticate": 'Basic realm="test"'})
        if b.scheme == "bearer" and auth != f"Bearer {ACCESS}":
            realm = b.realm or f"{self.origin}/token"
            return self._answer(401, headers={"WWW-Authenticate": f'Bearer realm="{realm}",service="test",'
                                                                  'scope="repository:app:pull"'})
        if self.command == "HEAD":
            return self._answer(200, b"")
        return self._answer(200 if self.command == "GET" else 201)

    do_GET = do_HEAD = do_PUT = do_POST = _serve


@dataclass
class Server:
    address: str
    behaviour: Behaviour


@pytest.fixture()
def server() -> Iterator[Server]:
    yield from _start("127.0.0.1")


def _start(host: str) -> Iterator[Server]:
    behaviour = Behaviour()
    httpd = http.server.ThreadingHTTPServer((host, 0), _Handler)
    address = f"{host}:{httpd.server_address[1]}"
    handler = type("H", (_Handler,), {"behaviour": behaviour, "origin": f"http://{address}"})
    httpd.RequestHandlerClass = handler
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield Server(address, behaviour)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture(autouse=True)
def private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "DOCKER_CONFIG", "PINMATRIX_TOKEN_HOSTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _helper(bin_dir: Path, name: str, script: str) -> Path:
    """``docker-credential-NAME`` on PATH: a shell script that logs its arguments and stdin, then ``script``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / f"docker-credential-{name}"
    path.write_text(f'#!/bin/sh\nread -r host\necho "$* $host" >> "{bin_dir}/{name}.log"\n{script}\n')
    path.chmod(0o755)
    return path


def _answer(user: str, secret: str) -> str:
    return f"printf '%s' '{json.dumps({'ServerURL': 'x', 'Username': user, 'Secret': secret})}'"


def _docker_config(home: Path, doc: dict) -> Path:  # type: ignore[type-arg]
    path = home / ".docker" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    path.chmod(0o600)
    return path


# ------------------------------------------------------------------------------------------ credential helpers


def test_a_credential_helper_gives_the_credentials(server: Server, tmp_path: Path, private_home: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    _helper(bin_dir, "pmtest", f'[ "$host" = "{server.address}" ] && {_answer(USER, PASSWORD)} && exit 0\n'
                               'echo "credentials not found in native keychain"; exit 1')
    config = _docker_config(private_home, {"credHelpers": {server.address: "pmtest"}})
    server.behaviour.scheme = "basic"
    reg = Registry(server.address)
    assert reg.ping()
    assert (bin_dir / "pmtest.log").read_text() == f"get {server.address}\n"  # `get`, the host on stdin
    creds = reg.credentials()
    assert creds is not None and (creds.username, creds.source, creds.key) == (USER, config, server.address)
    assert PASSWORD not in repr(creds) and "docker-credential-pmtest (credHelpers" in repr(creds)
    # another host: the helper has none, so nothing
    assert find_credentials("127.0.0.9:1") is None


def test_cred_helpers_before_creds_store_before_auths(tmp_path: Path, private_home: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    _helper(bin_dir, "one", _answer("from-one", "p1"))
    _helper(bin_dir, "store", '[ "$host" = "b.example" ] && ' + _answer("from-store", "p2") + ' && exit 0\n'
                              'echo "credentials not found in native keychain" >&2; exit 1')
    plain = base64.b64encode(b"from-auths:p3").decode()
    _docker_config(private_home, {"credHelpers": {"https://a.example/v1/": "one"}, "credsStore": "store",
                                  "auths": {"a.example": {"auth": plain}, "c.example": {"auth": plain}}})
    assert find_credentials("a.example").username == "from-one"  # type: ignore[union-attr]
    assert find_credentials("b.example").username == "from-store"  # type: ignore[union-attr]
    assert find_credentials("c.example").username == "from-auths"  # type: ignore[union-attr]  # the store has none
    assert (bin_dir / "store.log").read_text().splitlines() == ["get b.example", "get c.example"]


@pytest.mark.parametrize(("script", "message"), [
    ("echo 'not json'", "docker-credential-bad get h.example ({config}): (top): Invalid JSON"),
    (_answer("u", ""), "docker-credential-bad get h.example ({config}): Secret: String should have at least 1 character"),
    ("printf '%s' '{\"Username\": \"u\"}'", "docker-credential-bad get h.example ({config}): Secret: Field required"),
    (_answer("", "p"), "docker-credential-bad get h.example ({config}): Username: empty"),
    ("head -c 70000 /dev/zero | tr '\\0' a", "docker-credential-bad get h.example ({config}): more than 65536 bytes"),
    ("printf 'denied \\033[31m by policy\\n' >&2; exit 3",
     "docker-credential-bad get h.example ({config}) failed (exit 3): denied ?[31m by policy"),
])
def test_a_misbehaving_helper_is_one_line(tmp_path: Path, private_home: Path, monkeypatch: pytest.MonkeyPatch,
                                          script: str, message: str) -> None:
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    _helper(bin_dir, "bad", script)
    config = _docker_config(private_home, {"credsStore": "bad"})
    with pytest.raises(AuthError) as err:
        find_credentials("h.example")
    assert str(err.value).startswith(message.format(config=config)), str(err.value)
    assert "\n" not in str(err.value)


def test_a_helper_that_does_not_answer_is_stopped(tmp_path: Path, private_home: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from pinmatrix.registry import auth

    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(auth, "HELPER_TIMEOUT", 1.0)
    _helper(bin_dir, "slow", "exec sleep 60")
    config = _docker_config(private_home, {"credsStore": "slow"})
    started = time.monotonic()
    with pytest.raises(AuthError) as err:
        find_credentials("h.example")
    assert str(err.value) == f"docker-credential-slow get h.example ({config}): no answer in 1 s"
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(("doc", "message"), [
    ({"credsStore": "../../bin/sh"}, "credsStore names the credential helper '../../bin/sh', which is not a plain name"),
    ({"credsStore": "absent-helper"}, "credsStore names the credential helper docker-credential-absent-helper, "
                                      "which is not on PATH"),
    ({"credHelpers": {"h.example": 3}}, "credHelpers is not an object of helper names"),
    ({"credsStore": ["x"]}, "credsStore is not a helper name"),
])
def test_a_helper_is_a_plain_name_on_path(private_home: Path, doc: dict, message: str) -> None:  # type: ignore[type-arg]
    config = _docker_config(private_home, doc)
    with pytest.raises(AuthError) as err:
        find_credentials("h.example")
    assert str(err.value) == f"{config}: {message}"


# ------------------------------------------------------------------------------------------ identity tokens


def test_an_identity_token_is_exchanged_at_the_token_realm(server: Server, tmp_path: Path, private_home: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _docker_config(private_home, {"auths": {server.address: {"auth": "", "identitytoken": IDENTITY}}})
    server.behaviour.scheme = "bearer"
    reg = Registry(server.address)
    assert reg.get_manifest("app", "latest") is not None
    token = [s for s in server.behaviour.seen if s["path"].startswith("/token")]
    assert len(token) == 1 and token[0]["method"] == "POST" and token[0]["authorization"] == ""
    form = urllib.parse.parse_qs(token[0]["body"])
    assert form == {"grant_type": ["refresh_token"], "refresh_token": [IDENTITY], "client_id": ["pinmatrix"],
                    "service": ["test"], "scope": ["repository:app:pull"]}
    assert not [s for s in server.behaviour.seen if s["authorization"].startswith("Basic")]  # never as Basic
    assert server.behaviour.seen[-1]["authorization"] == f"Bearer {ACCESS}"


def test_an_identity_token_from_a_helper(server: Server, tmp_path: Path, private_home: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    _helper(bin_dir, "tok", _answer("<token>", IDENTITY))
    _docker_config(private_home, {"credsStore": "tok"})
    server.behaviour.scheme = "bearer"
    assert Registry(server.address).get_manifest("app", "latest") is not None
    assert server.behaviour.seen[-1]["authorization"] == f"Bearer {ACCESS}"
    # a registry asking for Basic gets no identity token
    server.behaviour.scheme = "basic"
    with pytest.raises(AuthError, match="asks for Basic auth, and the credentials from docker-credential-tok "
                                        r"\(credsStore\) are an identity token"):
        Registry(server.address).get_manifest("app", "latest")


def test_an_identity_token_goes_to_no_other_host(server: Server, private_home: Path) -> None:
    for other in _start("127.0.0.2"):
        server.behaviour.scheme = "bearer"
        server.behaviour.realm = f"http://{other.address}/token"
        _docker_config(private_home, {"auths": {server.address: {"identitytoken": IDENTITY}}})
        with pytest.raises(AuthError, match="is on host 127.0.0.2, not the registry's"):
            Registry(server.address).get_manifest("app", "latest")
        assert other.behaviour.seen == []  # nothing was sent there


# ------------------------------------------------------------------------------------------ retries


def test_429_and_5xx_are_asked_again_after_retry_after_or_backoff(server: Server) -> None:
    server.behaviour.failures = [(503, {"Retry-After": "1"}), (429, {}), (502, {"Retry-After": "0"})]
    reg = Registry(server.address)
    started = time.monotonic()
    assert reg.get_manifest("app", "latest") is not None
    took = time.monotonic() - started
    assert len(server.behaviour.seen) == 4
    assert 1.5 <= took < 10  # 1 s (Retry-After), then 0.5 s (the backoff of a second try), then 0 s


def test_the_waits_and_the_bound(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    reg = Registry(server.address)
    waits: list[float] = []
    reg._sleep = waits.append
    server.behaviour.failures = [(500, {})] * 10
    with pytest.raises(RegistryError, match=r"HTTP 500 UNAVAILABLE: try later$"):
        reg.get_manifest("app", "latest")
    assert waits == [0.5, 1.0, 2.0, 4.0] and len(server.behaviour.seen) == 5  # asked again RETRIES times
    # a Retry-After beyond the bound ends the request at once, with one line
    server.behaviour.seen.clear()
    server.behaviour.failures = [(429, {"Retry-After": "3600"})]
    with pytest.raises(RegistryError, match="HTTP 429, and the registry asks to wait more than the 30 s pinmatrix "
                                            "waits"):
        reg.get_manifest("app", "latest")
    assert len(server.behaviour.seen) == 1
    # not worth asking again: 404, 501
    for status in (404, 501):
        server.behaviour.seen.clear()
        server.behaviour.failures = [(status, {})]
        waits.clear()
        with pytest.raises(RegistryError):
            reg.get_blob("app", "sha256:" + "0" * 64)
        assert waits == [] and len(server.behaviour.seen) == 1
    # a body is sent again whole (bytes or a stream opened afresh)
    server.behaviour.seen.clear()
    server.behaviour.failures = [(503, {})]
    reg._request("PUT", "/v2/app/manifests/x", data=b"payload", ok=(201,))
    assert [s["body"] for s in server.behaviour.seen] == ["payload", "payload"]


def test_retry_after_forms() -> None:
    assert retry_delay(None, 0) == 0.5 and retry_delay("", 3) == 4.0
    assert retry_delay("7", 0) == 7.0 and retry_delay("31", 0) is None
    soon = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=10), usegmt=True)
    assert 8 <= (retry_delay(soon, 0) or 0) <= 10
    past = format_datetime(datetime.now(timezone.utc) - timedelta(hours=1), usegmt=True)
    assert retry_delay(past, 0) == 0.0
    assert retry_delay("soon, please", 1) == 1.0  # unreadable: the backoff
    assert retry_delay(format_datetime(datetime.now(timezone.utc) + timedelta(hours=2), usegmt=True), 0) is None
    assert client_module.MAX_RETRY_WAIT == 30.0


# ------------------------------------------------------------------------------------------ edges of the helper rules


def test_what_a_helper_and_an_auths_entry_give_for_an_identity_token(tmp_path: Path, private_home: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    _helper(bin_dir, "tok", _answer("<token>", IDENTITY))
    config = _docker_config(private_home, {"credHelpers": {"h.example": "tok"}, "auths": {
        "named.example": {"username": "bob", "identitytoken": IDENTITY},
        "bare.example": {"identitytoken": IDENTITY},
        "odd.example": {"username": 5, "identitytoken": IDENTITY},
        "empty.example": {"username": "", "identitytoken": IDENTITY}}})
    found = find_credentials("h.example")
    assert found is not None
    assert (found.username, found.password, found.source, found.key, found.identity_token, found.helper) == \
        ("<token>", "", config, "h.example", IDENTITY, "docker-credential-tok (credHelpers['h.example'])")
    for host, user in (("named.example", "bob"), ("bare.example", "<token>"), ("odd.example", "<token>"),
                       ("empty.example", "<token>")):
        got = find_credentials(host)
        assert got is not None and (got.username, got.password, got.identity_token) == (user, "", IDENTITY), host


@pytest.mark.parametrize(("script", "message"), [
    # bytes that are not UTF-8, shown as '?', and no crash on them
    ("printf 'bad \\377\\376 byte' >&2; exit 3", "failed (exit 3): bad ?? byte"),
    ("printf 'x\\377 credentials not found' >&2; exit 1", None),  # still read as 'not found'
    ("exit 3", "failed (exit 3): no output"),
    ("printf '%0300d' 0 >&2; exit 4", "failed (exit 4): " + "0" * 200),  # the message is cut at 200
    # stderr is read up to the bound only: a 'not found' past it is not seen
    ("head -c 70000 /dev/zero | tr '\\0' a >&2; echo 'credentials not found' >&2; exit 1",
     "failed (exit 1): " + "a" * 200),
])
def test_what_a_failing_helper_says_is_bounded_and_shown_safely(tmp_path: Path, private_home: Path,
                                                                monkeypatch: pytest.MonkeyPatch, script: str,
                                                                message: str | None) -> None:
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    _helper(bin_dir, "bad", script)
    config = _docker_config(private_home, {"credsStore": "bad"})
    if message is None:
        assert find_credentials("h.example") is None
        return
    with pytest.raises(AuthError) as err:
        find_credentials("h.example")
    assert str(err.value) == f"docker-credential-bad get h.example ({config}) {message}"


def test_an_answer_of_exactly_the_bound_is_read_and_an_endless_one_is_cut(tmp_path: Path, private_home: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from pinmatrix.registry import auth

    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    doc = json.dumps({"Username": "u", "Secret": "p"})
    padded = doc + " " * (auth.MAX_HELPER_OUTPUT - len(doc))  # JSON with trailing blanks, 65536 bytes in all
    (tmp_path / "answer.json").write_text(padded)
    _helper(bin_dir, "exact", f"cat {tmp_path / 'answer.json'}")
    _docker_config(private_home, {"credsStore": "exact"})
    assert find_credentials("h.example").username == "u"  # type: ignore[union-attr]
    # an answer that never ends is cut at the bound, long before the timeout
    monkeypatch.setattr(auth, "HELPER_TIMEOUT", 20.0)
    _helper(bin_dir, "endless", "exec yes aaaaaaaaaaaaaaaa")
    config = _docker_config(private_home, {"credsStore": "endless"})
    started = time.monotonic()
    with pytest.raises(AuthError) as err:
        find_credentials("h.example")
    assert str(err.value) == f"docker-credential-endless get h.example ({config}): more than 65536 bytes of answer"
    assert time.monotonic() - started < 10


def test_a_helper_that_cannot_start_and_a_long_bad_name(tmp_path: Path, private_home: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    helper = _helper(bin_dir, "broken", "")
    helper.write_text("#!/nonexistent/interpreter\n")
    config = _docker_config(private_home, {"credsStore": "broken"})
    with pytest.raises(AuthError) as err:
        find_credentials("h.example")
    assert str(err.value) == (f"{config}: credsStore names the credential helper docker-credential-broken, "
                              "which cannot run: No such file or directory")
    name = "a/" * 60
    config = _docker_config(private_home, {"credsStore": name})
    with pytest.raises(AuthError) as err:
        find_credentials("h.example")
    assert str(err.value) == f"{config}: credsStore names the credential helper {name[:80]!r}, which is not a plain name"
