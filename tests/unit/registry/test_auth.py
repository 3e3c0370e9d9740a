"""Registry access through the ecosystem's auth, without a registry: credentials from containers auth.json /
docker config.json in the tools' order, challenges parsed, one clear line without or with wrong credentials.
Through real registries (htpasswd, token auth): tests/integration/test_auth_registries.py."""

from __future__ import annotations

import hashlib
import io
import json
import stat
from pathlib import Path

import pytest
from auth_registries import (
    no_ambient_credentials,  # noqa: F401 - the autouse fixture
    write_auth_file,
)

from pinmatrix.imageref import RegistryError
from pinmatrix.registry.auth import AuthError, Credentials, engine_auth_env, find_credentials, parse_challenge
from pinmatrix.registry.blobs import VerifyingReader

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


# ------------------------------------------------------------------------------------------ token auth


# ------------------------------------------------------------------------------------------ streaming


