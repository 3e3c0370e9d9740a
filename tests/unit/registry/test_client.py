"""pinmatrix.registry.client against an honest registry in memory (tests/support/memregistry.py), with and without the
referrers API and cross-repository mounts: copies by digest (an image and an index, blobs mounted or streamed),
artifacts and their referrers, blobs read bounded and checked, tags and the paginated catalog, labels, and the
one-line errors for what a registry answers wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from memregistry import MemoryRegistry, digest_of, serve_registry
from registry_blobs import download_blob, push_blob_file

from pinmatrix.imageref import ImageRef, RegistryError
from pinmatrix.registry.auth import AuthError, Credentials
from pinmatrix.registry.client import (
    DOCKER_LIST,
    OCI_EMPTY,
    OCI_INDEX,
    OCI_MANIFEST,
    Manifest,
    Registry,
    parse_document,
    referrers_tag,
)

CREDS = Credentials("alice", "pw", Path("/nonexistent/auth.json"), "127.0.0.1")


def _client(reg: MemoryRegistry, **kwargs: object) -> Registry:
    return Registry(reg.address, allowed_token_hosts=(), **kwargs)  # type: ignore[arg-type]


def _answers_without_length(client: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, every answer ``client`` gets lacks its Content-Length header (as a chunked answer would)."""
    real = client._open

    def no_length(*args: object, **kwargs: object) -> object:
        resp = real(*args, **kwargs)  # type: ignore[arg-type]
        del resp.headers["Content-Length"]
        return resp

    monkeypatch.setattr(client, "_open", no_length)


def _image(reg: MemoryRegistry, repo: str = "src/app", tag: str | None = "v1",
           labels: dict[str, str] | None = None) -> tuple[str, bytes]:
    config = json.dumps({"config": {"Labels": labels or {"a": "1"}}}).encode()
    layer = b"layer bytes " * 100
    doc = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": reg.add_blob(repo, config),
                      "size": len(config)},
           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": reg.add_blob(repo, layer),
                       "size": len(layer)}]}
    body = json.dumps(doc).encode()
    return reg.add_manifest(repo, body, OCI_MANIFEST, tag), body


# -- documents ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "line"), [
    (b"not json", "where: the registry's answer is not JSON"),
    (b"[1]", "where: the registry's answer is not a JSON object"),
    (b'{"layers": [{"digest": "sha256:00"}]}', "where: layers.0.digest: String should match pattern"),
    (b'{"config": {"digest": "sha256:' + b"a" * 64 + b'", "size": -1}}', "where: config.size: Input should be"),
    (b'{"manifests": 3}', "where: manifests: Input should be a valid list"),
])
def test_a_document_that_is_not_a_manifest_is_one_line(body: bytes, line: str) -> None:
    with pytest.raises(RegistryError) as err:
        parse_document(body, "where")
    assert str(err.value).startswith(line) and "\n" not in str(err.value)


def test_a_well_formed_document_is_returned_as_it_is() -> None:
    doc = {"schemaVersion": 2, "layers": [], "other": {"kept": True}}
    assert parse_document(json.dumps(doc).encode(), "w") == doc


def test_referrers_tag_schema() -> None:
    assert referrers_tag("sha256:" + "ab" * 32) == "sha256-" + "ab" * 32


def test_the_host_of_a_matrix_registry_setting_and_its_scheme() -> None:
    reg = Registry.from_setting("127.0.0.1:5000/pinmatrix/x", timeout=3.0)
    assert (reg.host, reg.base, reg.timeout) == ("127.0.0.1:5000", "http://127.0.0.1:5000", 3.0)
    assert Registry("registry.example", allowed_token_hosts=()).base == "https://registry.example"
    assert Registry("registry.example", insecure=True, allowed_token_hosts=()).base == "http://registry.example"


# -- manifests ----------------------------------------------------------------------------------------

def test_a_manifest_by_tag_and_by_digest_with_its_media_type() -> None:
    with serve_registry() as reg:
        digest, body = _image(reg)
        client = _client(reg)
        by_tag = client.get_manifest("src/app", "v1")
        assert by_tag == Manifest(body, OCI_MANIFEST, digest)
        assert client.get_manifest("src/app", digest) == by_tag
        assert client.resolve(ImageRef(reg.address, "src/app", "v1")) == digest
        assert client.manifest_digest("src/app", "v1") == digest
        assert client.get_manifest("src/app", "v2") is None
        assert client.resolve(ImageRef(reg.address, "src/app", "v2")) is None
        assert client.manifest_digest("src/app", "nope") is None
        assert client.ping() is True


def test_a_media_type_the_registry_does_not_name_is_read_from_the_document() -> None:
    with serve_registry() as reg:
        body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_LIST, "manifests": []}).encode()
        reg.add_manifest("r", body, "text/plain; charset=x", "t")
        plain = json.dumps({"schemaVersion": 2}).encode()
        reg.add_manifest("r", plain, "application/octet-stream", "u")
        listed = json.dumps({"schemaVersion": 2}).encode() + b" "
        reg.add_manifest("r", listed, OCI_INDEX + "; charset=utf-8", "w")
        client = _client(reg)
        assert client.get_manifest("r", "t").media_type == DOCKER_LIST  # type: ignore[union-attr]
        assert client.get_manifest("r", "u").media_type == OCI_MANIFEST  # type: ignore[union-attr]
        assert client.get_manifest("r", "w").media_type == OCI_INDEX  # type: ignore[union-attr]


def test_a_malformed_manifest_names_its_reference() -> None:
    with serve_registry() as reg:
        body = b'{"layers": 1}'
        digest = reg.add_manifest("r", body, OCI_MANIFEST, "t")
        client = _client(reg)
        with pytest.raises(RegistryError, match=rf"^{reg.address}/r:t: layers: "):
            client.get_manifest("r", "t")
        with pytest.raises(RegistryError, match=rf"^{reg.address}/r@{digest}: layers: "):
            client.get_manifest("r", digest)


def test_a_manifest_served_for_another_digest_is_refused() -> None:
    with serve_registry() as reg:
        digest, _ = _image(reg)
        other = "sha256:" + "0" * 64
        reg.manifests[other] = reg.manifests[digest]
        reg.linked["src/app"].add(other)
        with pytest.raises(RegistryError, match=rf"^{reg.address}/src/app@{other}: registry served content with "
                                                rf"digest {digest}$"):
            _client(reg).get_manifest("src/app", other)


def test_an_error_answer_is_one_line_with_the_registrys_codes() -> None:
    with serve_registry() as reg:
        client = _client(reg)
        with pytest.raises(RegistryError) as err:
            client._request("GET", "/v2/x/blobs/sha256:" + "1" * 64)
        assert str(err.value) == f"GET {reg.address}/v2/x/blobs/sha256:{'1' * 64}: HTTP 404 BLOB_UNKNOWN: blob_unknown"
        assert err.value.status == 404  # type: ignore[attr-defined]


def test_a_put_manifest_the_registry_stores_under_another_digest_is_refused() -> None:
    with serve_registry() as reg:
        client = _client(reg)
        body = b'{"schemaVersion": 2}'
        stored = client.put_manifest("r", "t", Manifest(body, OCI_MANIFEST, digest_of(body)))
        assert stored == digest_of(body) and reg.tags["r"]["t"] == stored
        assert reg.manifests[stored] == (body, OCI_MANIFEST)
        lie = Manifest(body, OCI_MANIFEST, "sha256:" + "2" * 64)
        with pytest.raises(RegistryError, match=rf"^{reg.address}/r: stored manifest as {digest_of(body)}, "
                                                rf"expected sha256:2222"):
            client.put_manifest("r", "u", lie)


# -- configs and labels -------------------------------------------------------------------------------

def test_labels_through_the_manifest_and_its_config() -> None:
    with serve_registry() as reg:
        digest, body = _image(reg, labels={"io.x": "1", "n": "2"})
        client = _client(reg)
        assert client.labels("src/app", "v1") == {"io.x": "1", "n": "2"}
        assert client.config_labels("src/app", json.loads(body)) == {"io.x": "1", "n": "2"}
        assert client.image_config("src/app", digest)["config"]["Labels"]["n"] == "2"
        with pytest.raises(RegistryError, match=rf"^registry {reg.address}: no image src/app:v9$"):
            client.image_config("src/app", "v9")
        reg.add_manifest("src/app", json.dumps({"schemaVersion": 2, "manifests": []}).encode(), OCI_INDEX, "idx")
        with pytest.raises(RegistryError, match=rf"^registry {reg.address}: src/app:idx is an index, not one image$"):
            client.image_config("src/app", "idx")


@pytest.mark.parametrize(("config", "labels"), [
    ({"config": {"Labels": {"a": 1}}}, {"a": "1"}),
    ({"config": {"Labels": None}}, {}),
    ({"config": "x"}, {}),
    ({}, {}),
])
def test_labels_of_any_config(config: dict, labels: dict) -> None:
    with serve_registry() as reg:
        body = json.dumps(config).encode()
        manifest = {"config": {"digest": reg.add_blob("r", body)}}
        assert _client(reg).config_labels("r", manifest) == labels


def test_a_config_that_is_not_an_object_is_one_line() -> None:
    with serve_registry() as reg:
        manifest = {"config": {"digest": reg.add_blob("r", b"[]")}}
        with pytest.raises(RegistryError, match=rf"^{reg.address}/r config: the registry's answer is not a JSON object"):
            _client(reg).config_labels("r", manifest)


# -- tags and catalog ---------------------------------------------------------------------------------

def test_tags_sorted_and_none_for_an_unknown_repository() -> None:
    with serve_registry() as reg:
        for tag in ("b", "a", "c"):
            _image(reg, tag=tag)
        client = _client(reg)
        assert client.tags("src/app") == ["a", "b", "c"]
        assert client.tags("nothing/here") == []


def test_the_catalog_is_followed_page_by_page() -> None:
    with serve_registry(MemoryRegistry(catalog_page=2)) as reg:
        names = [f"repo{i}" for i in range(5)]
        for name in names:
            reg.add_blob(name, name.encode())
        assert _client(reg).repositories() == names
        pages = [p for m, p, _ in reg.requests if p.startswith("/v2/_catalog")]
        assert pages == ["/v2/_catalog?n=1000", "/v2/_catalog?n=1000&last=repo1", "/v2/_catalog?n=1000&last=repo3"]


def test_an_empty_catalog() -> None:
    with serve_registry() as reg:
        assert _client(reg).repositories() == []


# -- blobs --------------------------------------------------------------------------------------------

def test_blobs_are_read_checked_and_bounded(tmp_path: Path) -> None:
    with serve_registry() as reg:
        data = b"x" * 3000
        digest = reg.add_blob("r", data)
        client = _client(reg)
        assert client.has_blob("r", digest) and not client.has_blob("r", "sha256:" + "3" * 64)
        assert client.get_blob("r", digest) == data
        assert client.get_blob("r", digest, max_bytes=3000) == data
        with pytest.raises(RegistryError, match=rf"^{reg.address}/r: blob {digest} is 3000 bytes, more than the 2999 "
                                                "expected here$"):
            client.get_blob("r", digest, max_bytes=2999)
        dest = tmp_path / "d" / "blob"
        assert download_blob(client, "r", digest, dest) == 3000
        assert dest.read_bytes() == data and [p.name for p in dest.parent.iterdir()] == ["blob"]
        reg.blobs[digest] = b"y" * 3000  # damaged in the registry
        with pytest.raises(RegistryError, match="does not match its digest"):
            download_blob(client, "r", digest, tmp_path / "d" / "other")
        assert [p.name for p in dest.parent.iterdir()] == ["blob"]  # no partial file


def test_a_blob_without_a_length_is_bounded_as_it_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    with serve_registry() as reg:
        data = b"z" * 5000
        digest = reg.add_blob("r", data)
        client = _client(reg)
        _answers_without_length(client, monkeypatch)
        monkeypatch.setattr("pinmatrix.registry.blobs.CHUNK", 1000)
        with pytest.raises(RegistryError, match=rf"^{reg.address}/r: blob {digest} is larger than 4999 bytes$"):
            client.get_blob("r", digest, max_bytes=4999)
        assert client.get_blob("r", digest, max_bytes=5000) == data


def test_blobs_are_pushed_once(tmp_path: Path) -> None:
    with serve_registry() as reg:
        client = _client(reg)
        digest = client.push_blob("r", b"hello")
        assert digest == digest_of(b"hello") and reg.blobs[digest] == b"hello"
        client.push_blob("r", b"hello")
        path = tmp_path / "f"
        path.write_bytes(b"file body" * 1000)
        name = push_blob_file(client, "r", path)
        assert name == digest_of(path.read_bytes()) and reg.blobs[name] == path.read_bytes()
        push_blob_file(client, "r", path)
        posts = [p for m, p, _ in reg.requests if m == "POST"]
        assert len(posts) == 2  # each blob uploaded once
        puts = [p for m, p, _ in reg.requests if m == "PUT"]
        assert puts[0].endswith(f"?state=s1&digest={digest.replace(':', '%3A')}")


# -- copies -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mounts", [True, False])
def test_an_image_is_copied_by_digest_with_its_tags(mounts: bool) -> None:
    with serve_registry(MemoryRegistry(mounts=mounts)) as reg:
        digest, body = _image(reg)
        client = _client(reg)
        src = ImageRef(reg.address, "src/app", "v1", digest)
        assert client.copy(src, "dst/app", ["t1", "t2"]) == digest
        assert reg.tags["dst/app"] == {"t1": digest, "t2": digest}
        doc = json.loads(body)
        for d in (doc["config"]["digest"], doc["layers"][0]["digest"], digest):
            assert d in reg.linked["dst/app"]
        posts = [p for m, p, _ in reg.requests if m == "POST"]
        assert all("mount=sha256%3A" in p and "from=src/app" in p for p in posts) and len(posts) == 2
        streamed = [p for m, p, _ in reg.requests if m == "GET" and p.startswith("/v2/src/app/blobs/")]
        assert len(streamed) == (0 if mounts else 2)
        assert client.copy(src, "dst/app", []) == digest  # again: every blob is there, nothing is uploaded
        assert len([p for m, p, _ in reg.requests if m == "POST"]) == 2


def test_a_copy_needs_a_digest_and_an_existing_manifest() -> None:
    with serve_registry() as reg:
        client = _client(reg)
        with pytest.raises(RegistryError, match="copying needs a digest, not a tag"):
            client.copy(ImageRef(reg.address, "src/app", "v1"), "dst", [])
        missing = "sha256:" + "4" * 64
        with pytest.raises(RegistryError, match=rf"@{missing}: no such manifest$"):
            client.copy(ImageRef(reg.address, "src/app", None, missing), "dst", [])


def test_an_index_is_copied_with_every_image_it_names() -> None:
    with serve_registry() as reg:
        one, _ = _image(reg, tag=None)
        two, _ = _image(reg, tag=None, labels={"b": "2"})
        index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
            {"mediaType": OCI_MANIFEST, "digest": one, "size": 1},
            {"mediaType": OCI_MANIFEST, "digest": two, "size": 1}]}).encode()
        digest = reg.add_manifest("src/app", index, OCI_INDEX, "multi")
        client = _client(reg)
        client.copy(ImageRef(reg.address, "src/app", "multi", digest), "dst/app", ["multi"])
        assert {one, two, digest} <= reg.linked["dst/app"]
        assert client.labels("dst/app", two) == {"b": "2"}
        missing = "sha256:" + "5" * 64
        broken = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
            {"mediaType": OCI_MANIFEST, "digest": missing, "size": 1}]}).encode()
        bad = reg.add_manifest("src/app", broken, OCI_INDEX)
        with pytest.raises(RegistryError, match=rf"^{reg.address}/src/app: index names missing manifest {missing}$"):
            client.copy(ImageRef(reg.address, "src/app", None, bad), "dst/app", [])


def test_a_streamed_copy_needs_the_blobs_length(monkeypatch: pytest.MonkeyPatch) -> None:
    with serve_registry(MemoryRegistry(mounts=False)) as reg:
        digest = reg.add_blob("src", b"data")
        client = _client(reg)
        source = client._blob_source("src", digest)
        stream, length = source()
        assert length == 4 and stream.read() == b"data"
        stream.close()  # type: ignore[attr-defined]
        _answers_without_length(client, monkeypatch)
        with pytest.raises(RegistryError, match=rf"^{reg.address}/src: blob {digest} served without a length$"):
            client.mount_blob("dst", digest, "src")


# -- artifacts and referrers --------------------------------------------------------------------------

@pytest.mark.parametrize("api", [True, False])
def test_an_artifact_is_pushed_and_found_as_a_referrer(api: bool) -> None:
    with serve_registry(MemoryRegistry(referrers_api=api)) as reg:
        digest, body = _image(reg)
        client = _client(reg)
        subject = Manifest(body, OCI_MANIFEST, digest)
        assert client.supports_referrers_api("src/app", digest) is api
        first = client.push_artifact("src/app", subject, artifact_type="application/x-a", payload=b"payload-a",
                                     payload_media_type="application/x-pa", annotations={"k": "v"})
        second = client.push_artifact("src/app", subject, artifact_type="application/x-b", payload=b"payload-b",
                                      payload_media_type="application/x-pb")
        doc = json.loads(reg.manifests[first][0])
        assert doc == {
            "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": "application/x-a",
            "config": {"mediaType": OCI_EMPTY, "digest": digest_of(b"{}"), "size": 2},
            "layers": [{"mediaType": "application/x-pa", "digest": digest_of(b"payload-a"), "size": 9}],
            "subject": {"mediaType": OCI_MANIFEST, "digest": digest, "size": len(body)},
            "annotations": {"k": "v"}}
        assert reg.manifests[first][1] == OCI_MANIFEST
        assert "annotations" not in json.loads(reg.manifests[second][0])
        assert reg.blobs[digest_of(b"{}")] == b"{}"
        found = client.referrers("src/app", digest)
        assert sorted(d["digest"] for d in found) == sorted([first, second])
        assert [d["digest"] for d in client.referrers("src/app", digest, "application/x-b")] == [second]
        by_digest = {d["digest"]: d for d in found}
        assert by_digest[first]["artifactType"] == "application/x-a"
        assert by_digest[first]["annotations"] == {"k": "v"} and "annotations" not in by_digest[second]
        assert by_digest[first]["mediaType"] == OCI_MANIFEST
        assert by_digest[first]["size"] == len(reg.manifests[first][0])
        tag = referrers_tag(digest)
        assert (tag in reg.tags.get("src/app", {})) is not api  # the tag schema only without the API
        if not api:
            index_body, media_type = reg.manifests[reg.tags["src/app"][tag]]
            assert media_type == OCI_INDEX and json.loads(index_body)["mediaType"] == OCI_INDEX
            client._add_to_referrers_tag("src/app", digest, by_digest[first])  # listed once only
            assert len(json.loads(reg.manifests[reg.tags["src/app"][tag]][0])["manifests"]) == 2
        assert client.referrers("src/app", "sha256:" + "6" * 64) == []


def test_a_referrers_api_that_answers_an_error_is_no_api() -> None:
    with serve_registry() as reg:
        assert _client(reg).supports_referrers_api("r", "sha256:" + "7" * 64) is False


# -- authentication -----------------------------------------------------------------------------------

def test_basic_auth_is_answered_once_and_then_sent_with_every_request() -> None:
    with serve_registry(MemoryRegistry(basic=("alice", "pw"))) as reg:
        digest, _ = _image(reg)
        client = _client(reg, credentials=CREDS)
        assert client.credentials("any") is CREDS
        assert client.manifest_digest("src/app", "v1") == digest
        assert client.tags("src/app") == ["v1"]
        sent = [a for _, _, a in reg.requests]
        assert sent[0] is None and all(a == CREDS.basic() for a in sent[1:]) and len(sent) == 3


def test_basic_auth_with_wrong_or_no_credentials_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "DOCKER_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    with serve_registry(MemoryRegistry(basic=("alice", "other"))) as reg:
        wrong = _client(reg, credentials=CREDS)
        with pytest.raises(AuthError) as err:
            wrong.tags("r")
        refused = f"registry {reg.address} refused the credentials of 'alice' from /nonexistent/auth.json"
        assert str(err.value) == f"{refused}: HTTP 401 on GET /v2/r/tags/list"
        with pytest.raises(AuthError) as err:
            wrong.tags("r")  # sent with Basic from the start now, and refused again: no second round
        assert str(err.value) == refused
        with pytest.raises(AuthError) as err:
            _client(reg).tags("r")
        assert str(err.value).startswith(f"registry {reg.address} requires authentication and no credentials for it "
                                         f"were found (looked in {tmp_path}/.config/containers/auth.json, ")
        assert str(err.value).endswith(f": log in with `podman login {reg.address}` or `docker login {reg.address}`")
