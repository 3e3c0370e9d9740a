"""Registry access through the ecosystem's auth: credentials from containers auth.json / docker config.json,
Basic auth (docker-registry with htpasswd) and Bearer token auth (docker-registry with token auth, tokens from
a token service run here), a signed promote -> verify -> podman pull through each, one clear line without or
with wrong credentials, and blobs streamed (upload, download, copy that is not mounted) without holding a
layer in memory."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import subprocess
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from auth_registries import (
    TokenIssuer,
    htpasswd_auth_yaml,
    start_docker_registry,
    token_auth_yaml,
    token_service,
    write_auth_file,
    write_htpasswd,
)
from evidence import promote_signed
from helpers import skopeo_copy
from registry_blobs import download_blob, push_blob_file

from conftest import require_binaries
from pinmatrix.cli import main
from pinmatrix.imageref import RegistryError
from pinmatrix.registry.auth import AuthError, Credentials, engine_auth_env, find_credentials, parse_challenge
from pinmatrix.registry.blobs import VerifyingReader
from pinmatrix.registry.client import Registry

USERS = {"alice": "correct horse battery staple"}


@pytest.fixture(autouse=True)
def no_ambient_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the credentials a test writes: a private HOME, no auth file variables."""
    for name in ("REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "DOCKER_CONFIG", "PINMATRIX_TRUSTED_KEYS",
                 "PINMATRIX_SIGNING_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture(scope="module")
def htpasswd_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_binaries("docker-registry", "skopeo")
    directory = tmp_path_factory.mktemp("htpasswd-registry")
    write_htpasswd(directory / "htpasswd", USERS)
    service = start_docker_registry(directory, htpasswd_auth_yaml(directory / "htpasswd"))
    yield service.address
    service.stop()


@pytest.fixture(scope="module")
def token_registry(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    require_binaries("docker-registry", "skopeo")
    directory = tmp_path_factory.mktemp("token-registry")
    issuer = TokenIssuer.create()
    (directory / "ca.pem").write_bytes(issuer.ca_pem)
    with token_service(issuer, USERS) as tokens:
        service = start_docker_registry(directory, token_auth_yaml(tokens.url, directory / "ca.pem"))
        yield service.address, tokens
        service.stop()


# ------------------------------------------------------------------------------------------ credentials


def test_credentials_come_from_the_tools_files_in_their_order(tmp_path: Path) -> None:
    home, runtime, docker = tmp_path / "home", tmp_path / "run", tmp_path / "dockercfg"
    env = {"HOME": str(home), "XDG_RUNTIME_DIR": str(runtime), "DOCKER_CONFIG": str(docker)}
    assert find_credentials("reg.example:5000", "team/app", env) is None
    # docker's config.json, with a https://host/v1/ style key
    write_auth_file(docker / "config.json", "", "dock", "pw1", key="https://reg.example:5000/v1/")
    found = find_credentials("reg.example:5000", "team/app", env)
    assert found is not None
    assert (found.username, found.password, found.source) == ("dock", "pw1", docker / "config.json")
    # containers' auth.json in ~/.config wins over docker's, and a namespaced key wins for its repositories
    conf = home / ".config" / "containers" / "auth.json"
    conf.parent.mkdir(parents=True)
    conf.write_text(json.dumps({"auths": {
        "reg.example:5000": {"auth": "aG9zdDpwdzI="},  # host:pw2
        "reg.example:5000/team": {"username": "teamuser", "password": "pw3"},
    }}))
    assert find_credentials("reg.example:5000", "team/app", env).username == "teamuser"
    assert find_credentials("reg.example:5000", "teamwork/app", env).username == "host"
    assert find_credentials("reg.example:5000", "other/app", env).password == "pw2"
    assert find_credentials("other.example", "x", env) is None
    # ${XDG_RUNTIME_DIR}/containers/auth.json before that, $REGISTRY_AUTH_FILE first of all
    write_auth_file(runtime / "containers" / "auth.json", "reg.example:5000", "runtime", "pw4")
    assert find_credentials("reg.example:5000", "team/app", env).username == "runtime"
    explicit = write_auth_file(tmp_path / "explicit.json", "reg.example:5000", "explicit", "pw5")
    found = find_credentials("reg.example:5000", "team/app", {**env, "REGISTRY_AUTH_FILE": str(explicit)})
    assert (found.username, found.source) == ("explicit", explicit)
    assert found.basic() == "Basic ZXhwbGljaXQ6cHc1"
    assert "pw5" not in repr(found)


@pytest.mark.parametrize(("entry", "message"), [
    ({"auth": "!!!"}, "auths['h:1'].auth is not base64 of user:password"),
    ({"auth": "bm9jb2xvbg=="}, "auths['h:1'].auth is not base64 of user:password"),  # "nocolon"
    ({"identitytoken": "a\nb"}, "auths['h:1'].identitytoken is not a token"),
    ({}, "auths['h:1'] has no 'auth'"),
])
def test_malformed_credentials_are_named(tmp_path: Path, entry: dict, message: str) -> None:
    path = tmp_path / "auth.json"
    path.write_text(json.dumps({"auths": {"h:1": entry}}))
    with pytest.raises(AuthError) as err:
        find_credentials("h:1", "", {"HOME": str(tmp_path), "REGISTRY_AUTH_FILE": str(path)})
    assert str(err.value).startswith(f"{path}: {message}")
    path.write_text("{not json")
    with pytest.raises(AuthError, match=rf"^{path}: not valid JSON"):
        find_credentials("h:1", "", {"HOME": str(tmp_path), "REGISTRY_AUTH_FILE": str(path)})


def test_challenges() -> None:
    bearer = parse_challenge('Bearer realm="http://127.0.0.1:9/token",service="reg",'
                             'scope="repository:a/b:pull,push repository:c:pull"')
    assert bearer is not None and bearer.scheme == "bearer"
    assert bearer.params["realm"] == "http://127.0.0.1:9/token" and bearer.params["service"] == "reg"
    assert bearer.scopes == ["repository:a/b:pull,push", "repository:c:pull"]
    basic = parse_challenge('Basic realm="pinmatrix-test"')
    assert basic is not None and basic.scheme == "basic" and basic.scopes == []
    assert parse_challenge("Negotiate abc") is None and parse_challenge("") is None


def test_engines_get_credentials_through_their_auth_file(tmp_path: Path) -> None:
    auth_json = write_auth_file(tmp_path / "auth.json", "reg:1", "u", "p")
    creds = Credentials("u", "p", auth_json, "reg:1")
    with engine_auth_env("podman", creds) as env:
        assert env == {"REGISTRY_AUTH_FILE": str(auth_json)}
    with engine_auth_env("docker", creds) as env:
        config = Path(env["DOCKER_CONFIG"]) / "config.json"
        assert stat.S_IMODE(config.stat().st_mode) == 0o600
        assert json.loads(config.read_text()) == {"auths": {"reg:1": {"auth": "dTpw"}}}
    assert not config.exists()
    docker_cfg = write_auth_file(tmp_path / "d" / "config.json", "reg:1", "u", "p")
    with engine_auth_env("docker", Credentials("u", "p", docker_cfg, "reg:1")) as env:
        assert env == {"DOCKER_CONFIG": str(docker_cfg.parent)}
    with engine_auth_env("podman", None) as env:
        assert env == {}


def test_a_blob_that_does_not_match_its_digest_is_refused() -> None:
    data = b"layer bytes"
    good = VerifyingReader(io.BytesIO(data), "sha256:" + hashlib.sha256(data).hexdigest(), "r/x", len(data))
    assert b"".join(iter(good.read, b"")) == data
    bad = VerifyingReader(io.BytesIO(b"other bytes"), "sha256:" + hashlib.sha256(data).hexdigest(), "r/x", None)
    with pytest.raises(RegistryError, match="does not match its digest"):
        b"".join(iter(bad.read, b""))


# ------------------------------------------------------------------------------------------ htpasswd


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("pinmatrix: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_htpasswd_registry_promote_verify_pull(htpasswd_registry: str, podman_env, tmp_path: Path, capsys,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    host = htpasswd_registry
    good = write_auth_file(tmp_path / "auth.json", host, "alice", USERS["alice"])
    wrong = write_auth_file(tmp_path / "wrong.json", host, "alice", "not the password")

    # the client alone, without credentials: one clear line
    with pytest.raises(AuthError, match=rf"^registry {host} requires authentication and no credentials for it "
                                        r"were found \(looked in .*\): log in with `podman login"):
        Registry(host).tags("anything")

    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(good))
    p = promote_signed(host, tmp_path, capsys, "authbasic", authfile=good)
    ref = f"{p.target.name}:known-good"
    assert main(p.verify(ref)) == 0
    assert capsys.readouterr().out.startswith(f"verified {p.target.name}@{p.digest}")

    for key, value in podman_env.env.items():
        monkeypatch.setenv(key, value)
    rc = main(p.pull("--engine", "podman"))
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert out.strip() == f"{p.target.name}@{p.digest}"
    listed = subprocess.run(["podman", "images", "--digests", "--format", "{{.Digest}}"], capture_output=True,
                            text=True, check=True).stdout.split()
    assert p.digest in listed

    # skopeo gets the same credentials through --authfile
    copied = skopeo_copy(Registry(host), f"{p.target.name}@{p.digest}", f"{p.target.name}:copied-by-skopeo")
    assert copied == p.digest

    # wrong credentials and none: refused with one line, exit 2, for verify and pull alike
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(wrong))
    rc = main(p.verify(ref))
    line = _one_line(capsys.readouterr().err)
    assert rc == 2 and f"registry {host} refused the credentials of 'alice' from {wrong}" in line
    monkeypatch.delenv("REGISTRY_AUTH_FILE")
    rc = main(p.pull("--print"))
    line = _one_line(capsys.readouterr().err)
    assert rc == 2 and f"registry {host} requires authentication and no credentials for it were found" in line


# ------------------------------------------------------------------------------------------ token auth


def test_token_registry_promote_verify_pull(token_registry, podman_env, tmp_path: Path, capsys,  # noqa: ANN001
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    host, tokens = token_registry
    good = write_auth_file(tmp_path / "auth.json", host, "alice", USERS["alice"])
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(good))
    p = promote_signed(host, tmp_path, capsys, "authtoken", authfile=good)
    assert main(p.verify(f"{p.target.name}:known-good")) == 0
    capsys.readouterr()
    def scopes(request: dict) -> set[str]:  # the registry lists actions in no fixed order
        return {f"{kind_name}:{','.join(sorted(actions.split(',')))}"
                for kind_name, _, actions in (x.rpartition(":") for x in request["scopes"])}

    asked = set().union(*(scopes(r) for r in tokens.requests if r["user"] == "alice"))
    assert f"repository:{p.target.repository}:pull,push" in asked
    # the cross-repository mount asked for pull on the source repository in the same token
    assert any({f"repository:{p.prefix.split('/', 1)[1]}/demo:pull", f"repository:{p.target.repository}:pull,push"}
               <= scopes(r) for r in tokens.requests)

    for key, value in podman_env.env.items():
        monkeypatch.setenv(key, value)
    rc = main(p.pull("--engine", "podman"))
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert out.strip() == f"{p.target.name}@{p.digest}"

    wrong = write_auth_file(tmp_path / "wrong.json", host, "alice", "nope")
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(wrong))
    rc = main(p.verify(f"{p.target.name}:known-good"))
    line = _one_line(capsys.readouterr().err)
    assert rc == 2 and f"refused the credentials of 'alice' from {wrong}: the token service answered HTTP 401" in line
    monkeypatch.delenv("REGISTRY_AUTH_FILE")
    rc = main(p.verify(f"{p.target.name}:known-good"))  # an anonymous token grants nothing
    line = _one_line(capsys.readouterr().err)
    assert rc == 2 and f"registry {host} requires authentication and no credentials for it were found" in line


# ------------------------------------------------------------------------------------------ streaming


def test_blobs_stream_through_an_authenticated_registry(htpasswd_registry: str, tmp_path: Path) -> None:
    """48 MiB up, down, and copied between repositories without a mount: Python never holds more than a few
    MiB (tracemalloc's peak), and each blob is checked against its digest."""
    host = htpasswd_registry
    creds = Credentials("alice", USERS["alice"], tmp_path / "unused.json", host)
    reg = Registry(host, credentials=creds)
    blob = tmp_path / "layer.bin"
    with open(blob, "wb") as handle:
        for i in range(48):
            handle.write(hashlib.sha256(str(i).encode()).digest() * (1 << 15))  # 1 MiB, not all alike
    size = blob.stat().st_size
    tracemalloc.start()
    try:
        digest = push_blob_file(reg, "stream/src", blob)
        assert reg.has_blob("stream/src", digest)
        assert download_blob(reg, "stream/src", digest, tmp_path / "down.bin") == size
        # a copy the registry does not mount (the fallback of mount_blob), streamed from GET into PUT
        reg._upload("stream/copy", digest, reg._blob_source("stream/src", digest))
        reg.mount_blob("stream/mounted", digest, "stream/src")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert digest == "sha256:" + hashlib.sha256(blob.read_bytes()).hexdigest()
    assert (tmp_path / "down.bin").read_bytes() == blob.read_bytes()
    assert reg.has_blob("stream/copy", digest) and reg.has_blob("stream/mounted", digest)
    assert peak < 8 * (1 << 20), f"peak {peak / (1 << 20):.1f} MiB for a {size >> 20} MiB blob"
    os.remove(blob)
