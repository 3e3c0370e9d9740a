"""Registries that ask for credentials (docker-registry with htpasswd, and with a token service): promote, verify and
pull through each, and blobs streamed through an authenticated registry in bounded memory."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from auth_registries import (
    TokenIssuer,
    htpasswd_auth_yaml,
    no_ambient_credentials,  # noqa: F401 - the autouse fixture
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
from pinmatrix.registry.auth import AuthError, Credentials
from pinmatrix.registry.client import Registry

USERS = {"alice": "correct horse battery staple"}


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
