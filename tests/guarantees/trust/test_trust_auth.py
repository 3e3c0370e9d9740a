"""The registry credential files and challenges, pinned whole (what `nox -s mutation` found loose in
registry/auth.py): the order and defaults of the files, key normalising, each malformed entry, the longest
match, challenge parameters quoted, unquoted and escaped, and every realm refusal as the exact line."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from pinmatrix.registry.auth import AuthError, Credentials, auth_files, check_realm, find_credentials, parse_challenge


def _auth(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def _file(path: Path, auths: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"auths": auths}))
    return path


def test_credentials_never_show_their_password() -> None:
    creds = Credentials("alice", "s3cret", Path("/x/auth.json"), "reg.example")
    assert repr(creds) == "Credentials(username='alice', source='/x/auth.json', key='reg.example')"


def test_the_files_and_their_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    assert auth_files({"HOME": "/h"}) == [Path("/h/.config/containers/auth.json"), Path("/h/.docker/config.json")]
    assert auth_files({"HOME": "/h", "REGISTRY_AUTH_FILE": "/a.json", "XDG_RUNTIME_DIR": "/run/u",
                       "DOCKER_CONFIG": "/d"}) == [
        Path("/a.json"), Path("/run/u/containers/auth.json"), Path("/h/.config/containers/auth.json"),
        Path("/d/config.json")]
    monkeypatch.setenv("HOME", "/from-env")
    for name in ("REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "DOCKER_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    assert auth_files() == [Path("/from-env/.config/containers/auth.json"), Path("/from-env/.docker/config.json")]
    assert auth_files({})[0] == Path.home() / ".config" / "containers" / "auth.json"


def test_keys_are_matched_by_host_and_namespace(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "REGISTRY_AUTH_FILE": str(tmp_path / "a.json")}
    _file(tmp_path / "a.json", {"https://reg.example/v1/": {"auth": _auth("v1", "p")},
                                "reg.example/team/": {"auth": _auth("team", "p")}})
    assert find_credentials("reg.example", "", env).username == "v1"  # type: ignore[union-attr]
    found = find_credentials("reg.example", "team/app", env)
    assert found is not None and (found.username, found.key) == ("team", "reg.example/team/")
    assert find_credentials("reg.example", "other", env).username == "v1"  # type: ignore[union-attr]
    # the same length twice: the first key wins
    _file(tmp_path / "a.json", {"reg.example": {"auth": _auth("first", "p")},
                                "https://reg.example": {"auth": _auth("second", "p")}})
    assert find_credentials("reg.example", "", env).username == "first"  # type: ignore[union-attr]


def test_files_without_an_entry_are_passed_over(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / ".config" / "containers" / "auth.json"
    env = {"HOME": str(tmp_path), "REGISTRY_AUTH_FILE": str(first)}
    _file(second, {"reg.example": {"auth": _auth("found", "p:w")}})
    for text in ("", "  \n", "[1]", '{"auths": 7}', '{"other": {}}'):
        first.write_text(text)
        found = find_credentials("reg.example", "", env)
        assert found is not None and (found.username, found.password, found.source) == ("found", "p:w", second)


@pytest.mark.parametrize(("entry", "line"), [
    ("x", "auths['reg.example'] is not an object"),
    ({"auth": _auth("u", "p") + "!!"}, "auths['reg.example'].auth is not base64 of user:password"),
    ({"auth": base64.b64encode(b"nocolon").decode()}, "auths['reg.example'].auth is not base64 of user:password"),
    ({"username": "u"}, "auths['reg.example'] has no 'auth' (base64 of user:password) or 'identitytoken'"),
    ({"password": "p"}, "auths['reg.example'] has no 'auth' (base64 of user:password) or 'identitytoken'"),
    ({"identitytoken": "t t"}, "auths['reg.example'].identitytoken is not a token"),
    ({"identitytoken": 7}, "auths['reg.example'].identitytoken is not a token"),
])
def test_each_malformed_entry_is_one_line(tmp_path: Path, entry: object, line: str) -> None:
    path = _file(tmp_path / "a.json", {"reg.example": entry})
    with pytest.raises(AuthError) as err:
        find_credentials("reg.example", "", {"HOME": str(tmp_path), "REGISTRY_AUTH_FILE": str(path)})
    assert str(err.value) == f"{path}: {line}"


def test_username_and_password_fields_and_an_unreadable_file(tmp_path: Path) -> None:
    path = _file(tmp_path / "a.json", {"reg.example": {"username": "u", "password": "a:b"}})
    env = {"HOME": str(tmp_path), "REGISTRY_AUTH_FILE": str(path)}
    found = find_credentials("reg.example", "", env)
    assert found is not None and (found.username, found.password) == ("u", "a:b")
    env["REGISTRY_AUTH_FILE"] = str(tmp_path)  # a folder
    with pytest.raises(AuthError) as err:
        find_credentials("reg.example", "", env)
    assert str(err.value) == f"{tmp_path}: cannot read: Is a directory"


def test_challenge_parameters() -> None:
    c = parse_challenge('Bearer realm=https://a.example/token,service=reg,scope="repository:x:pull push",'
                        'empty="",bare=,quote="say \\"hi\\""')
    assert c is not None and c.scheme == "bearer"
    assert c.params == {"realm": "https://a.example/token", "service": "reg", "scope": "repository:x:pull push",
                        "empty": "", "bare": "", "quote": 'say "hi"'}
    assert c.scopes == ["repository:x:pull", "push"]
    assert parse_challenge("Digest realm=x") is None


LONG = "https://evil.example/" + "t" * 130


@pytest.mark.parametrize(("realm", "end"), [
    ("https://reg.example:x/t", "is not a URL"),
    ("ftp://reg.example/t", "is not an https URL; refused"),
    ("http://reg.example/t", "is plain http on another machine; credentials go only over https"),
    ("https://user@reg.example/t", "carries user info; refused"),
    (LONG, "is on host evil.example, not the registry's; allow it with PINMATRIX_TOKEN_HOSTS=evil.example if it "
           "is the registry's token service"),
    ("ftp://x/" + "y" * 130, "is not an https URL; refused"),
    ("https://reg.example:x/" + "t" * 130, "is not a URL"),
    ("http://reg.example/" + "t" * 130, "is plain http on another machine; credentials go only over https"),
    ("https://user@reg.example/" + "t" * 130, "carries user info; refused"),
])
def test_each_realm_refusal_is_the_exact_line(realm: str, end: str) -> None:
    with pytest.raises(AuthError) as err:
        check_realm(realm, "reg.example:443")
    assert str(err.value) == f"registry reg.example:443: token realm {realm[:120]!r} {end}"


def test_a_repository_is_matched_whole_and_none_means_the_host(tmp_path: Path) -> None:
    path = _file(tmp_path / "a.json", {"reg.example": {"auth": _auth("host", "p")},
                                       "reg.example/team": {"auth": _auth("team", "p")},
                                       "reg.example/BOX": {"auth": _auth("box", "p")},
                                       "reg.example/XXXX": {"auth": _auth("xxxx", "p")}})
    env = {"HOME": str(tmp_path), "REGISTRY_AUTH_FILE": str(path)}
    assert find_credentials("reg.example", env=env).username == "host"  # type: ignore[union-attr]
    assert find_credentials("reg.example", "teamX", env).username == "host"  # type: ignore[union-attr]
    assert find_credentials("reg.example", "BOX/app", env).username == "box"  # type: ignore[union-attr]
