"""The build cache's rules, each against an in-memory registry (registry/client.Registry's calls): what is stored
and fetched, every way an entry is refused (one line, the layer built, the cache still asked for other keys), a cache
that is down or refuses (one line for the run, then not asked again), blobs checked against the signed digest and
size before they land, only a layer's own extras kept, documents, and the cross-repository mount."""

from __future__ import annotations

import base64
import dataclasses
import io
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from pinmatrix.hashing import sha256_digest
from pinmatrix.image import build_cache
from pinmatrix.image.build_cache import (
    ARTIFACT_TYPE,
    ENVELOPE_MEDIA_TYPE,
    EXTRA_MEDIA_TYPE,
    MAX_EMBEDDED,
    MAX_ENVELOPE,
    BuildCache,
    CacheReport,
    cache_tag,
)
from pinmatrix.imageref import RegistryError
from pinmatrix.oci.layer import LayerDescriptor
from pinmatrix.oci.layout import OCILayout
from pinmatrix.registry.auth import AuthError
from pinmatrix.registry.blobs import VerifyingReader
from pinmatrix.registry.client import OCI_EMPTY, OCI_MANIFEST, Manifest
from pinmatrix.release.cache_signing import cache_trust
from pinmatrix.release.signing import generate_keypair, load_public_key

HOST = "127.0.0.1:5999"
REPO = "cache"
REF = f"{HOST}/{REPO}"
KEY, OTHER = "k" * 64, "o" * 64
GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"


class MemoryRegistry:
    """Blobs and manifests in memory by repository, as registry/client.Registry answers; ``fail`` is raised by every
    call; ``calls`` counts them; ``serve`` may change the bytes a blob is streamed as, ``length`` its Content-Length;
    ``on_open`` is called as a blob is opened."""

    def __init__(self, host: str = HOST) -> None:
        self.host = host
        self.blobs: dict[tuple[str, str], bytes] = {}
        self.manifests: dict[tuple[str, str], Manifest] = {}
        self.mounted: list[tuple[str, str, str]] = []
        self.fail: Exception | None = None
        self.calls = 0
        self.blob_requests = 0
        self.serve: Callable[[bytes], bytes] = lambda data: data
        self.length: Callable[[bytes], int | None] = len
        self.on_open: Callable[[], None] = lambda: None

    def _call(self) -> None:
        self.calls += 1
        if self.fail is not None:
            raise self.fail

    def get_manifest(self, repository: str, reference: str) -> Manifest | None:
        self._call()
        return self.manifests.get((repository, reference))

    def put_manifest(self, repository: str, reference: str, manifest: Manifest) -> str:
        self._call()
        assert manifest.digest == sha256_digest(manifest.body) and manifest.media_type == OCI_MANIFEST
        self.manifests[(repository, reference)] = manifest
        return manifest.digest

    def has_blob(self, repository: str, digest: str) -> bool:
        self._call()
        return (repository, digest) in self.blobs

    def push_blob(self, repository: str, data: bytes) -> str:
        self._call()
        self.blobs[(repository, sha256_digest(data))] = data
        return sha256_digest(data)

    def push_blob_as(self, repository: str, digest: str, body: Callable[[], tuple[BinaryIO, int]]) -> bool:
        self._call()
        stream, _ = body()
        with stream:
            self.blobs[(repository, digest)] = stream.read()
        return True

    def get_blob(self, repository: str, digest: str, *, max_bytes: int = 64 << 20) -> bytes:
        self._call()
        self.blob_requests += 1
        data = self.blobs[(repository, digest)]
        if len(data) > max_bytes:
            raise RegistryError(f"blob {digest} is larger than {max_bytes} bytes")
        if sha256_digest(data) != digest:
            raise RegistryError(f"blob {digest} does not match its digest")
        return data

    @contextmanager
    def open_blob(self, repository: str, digest: str) -> Iterator[VerifyingReader]:
        self._call()
        self.on_open()
        data = self.serve(self.blobs[(repository, digest)])
        yield VerifyingReader(io.BytesIO(data), digest, f"{self.host}/{repository}", self.length(data))

    def mount_blob(self, repository: str, digest: str, from_repository: str) -> str:
        self._call()
        self.blobs[(repository, digest)] = self.blobs[(from_repository, digest)]
        self.mounted.append((repository, digest, from_repository))
        return "mounted"

    def entry(self, key: str) -> dict[str, Any]:
        manifest = self.manifests[(REPO, cache_tag(key))]
        assert manifest.body == json.dumps(manifest.json, sort_keys=True, separators=(",", ":")).encode()
        return manifest.json


class Setup:
    """A writer and a reader of one cache on one in-memory registry, a layout holding a layer, and the lines said."""

    def __init__(self, tmp_path: Path) -> None:
        private, public, _ = generate_keypair(tmp_path / "keys" / "signing")
        self.trust = cache_trust([load_public_key(public)], private)
        self.registry = MemoryRegistry()
        known: dict[str, Any] = {REF: self.registry}
        self.lines: list[str] = []
        self.writer = BuildCache(self.trust, cache_to=REF, registries=known, warn=self.lines.append)
        self.reader = BuildCache(self.trust, cache_from=REF, registries=known, warn=self.lines.append)
        self.layout = OCILayout(tmp_path / "oci").init()
        self.fresh = OCILayout(tmp_path / "fresh").init()  # another machine's
        self.data = b"layer bytes " * 1000
        self.layer = LayerDescriptor(self.layout.put_blob(self.data), len(self.data), "sha256:" + "0" * 64, GZIP)

    def sign(self, payload: dict[str, Any]) -> bytes:
        assert self.trust.sign is not None
        return self.trust.sign(json.dumps(payload).encode())

    def put_entry(self, key: str, envelope: bytes, **manifest: Any) -> None:
        """An entry under ``key``'s tag holding ``envelope`` (as anyone who can push could write it)."""
        self.registry.blobs[(REPO, sha256_digest(envelope))] = envelope
        doc = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": ARTIFACT_TYPE,
               "config": {"mediaType": OCI_EMPTY, "digest": sha256_digest(b"{}"), "size": 2},
               "layers": [{"mediaType": ENVELOPE_MEDIA_TYPE, "digest": sha256_digest(envelope),
                           "size": len(envelope)}], **manifest}
        body = json.dumps(doc).encode()
        self.registry.manifests[(REPO, cache_tag(key))] = Manifest(body, OCI_MANIFEST, sha256_digest(body))

    def entry(self, **changes: Any) -> dict[str, Any]:
        return {"key": KEY, "layer": self.layer.to_json(), "what": "wheel:x", "meta": {}, "extras": {}, **changes}


@pytest.fixture
def s(tmp_path: Path) -> Setup:
    return Setup(tmp_path)


def _envelope(s: Setup, key: str = KEY) -> bytes:
    return s.registry.blobs[(REPO, s.registry.entry(key)["layers"][0]["digest"])]


def _payload(s: Setup, key: str = KEY) -> dict[str, Any]:
    envelope = json.loads(_envelope(s, key))
    payload: dict[str, Any] = json.loads(base64.b64decode(envelope["payload"]))
    assert base64.b64decode(envelope["payload"]) == json.dumps(payload, sort_keys=True).encode()
    return payload


def _expected_manifest(envelope: bytes, what: str, blobs: list[dict[str, Any]]) -> dict[str, Any]:
    """The entry manifest a writer makes for ``envelope`` and ``blobs`` (the layer and its extras, if any)."""
    return {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": OCI_EMPTY, "digest": sha256_digest(b"{}"), "size": 2},
        "layers": [{"mediaType": ENVELOPE_MEDIA_TYPE, "digest": sha256_digest(envelope), "size": len(envelope),
                    "data": base64.b64encode(envelope).decode()}, *blobs],
        "annotations": {"io.pinmatrix.cache.key": KEY, "io.pinmatrix.cache.what": what}}


def test_a_stored_layer_is_fetched_by_another_machine_with_its_meta(s: Setup) -> None:
    s.writer.store(KEY, s.layer, "wheel:x", s.layout, meta={"python": "3.11"})
    assert s.writer.report.stored == 1 and s.registry.blobs[(REPO, s.layer.digest)] == s.data
    assert s.registry.entry(KEY) == _expected_manifest(_envelope(s), "wheel:x", [s.layer.as_oci()])
    assert s.registry.blobs[(REPO, sha256_digest(b"{}"))] == b"{}"
    assert _payload(s) == {"key": KEY, "layer": s.layer.to_json(), "what": "wheel:x", "meta": {"python": "3.11"},
                           "extras": {}}
    assert s.reader.fetch(KEY, "wheel:x", s.fresh) == (s.layer, {"python": "3.11"})
    assert s.fresh.blob_path(s.layer.digest).read_bytes() == s.data
    assert (s.reader.report.hits, s.reader.report.misses, s.lines) == (1, 0, [])
    assert s.reader.report.describe() == "build cache: 1 layer(s) fetched, 0 missed, 0 stored"
    assert cache_tag(KEY) == "layer-" + KEY
    s.fresh.blob_path(s.layer.digest).write_bytes(b"damaged after it came")
    assert s.fresh.intact_blob(s.layer.digest, s.layer.size)  # it was hashed as it came: not read again


def test_hits_misses_and_stores_are_counted(s: Setup, tmp_path: Path) -> None:
    other = LayerDescriptor(s.layout.put_blob(b"other"), 5, "sha256:" + "0" * 64, GZIP)
    s.writer.store(KEY, s.layer, "wheel:x", s.layout)
    s.writer.store(OTHER, other, "wheel:y", s.layout)
    assert s.reader.fetch(KEY, "wheel:x", s.fresh) and s.reader.fetch(OTHER, "wheel:y", s.fresh)
    assert s.reader.fetch("a" * 64, "a", s.fresh) is None and s.reader.fetch("b" * 64, "b", s.fresh) is None
    assert (s.writer.report.stored, s.reader.report.hits, s.reader.report.misses) == (2, 2, 2)


def test_a_cache_made_from_its_reference_asks_that_host() -> None:
    cache = BuildCache(cache_trust([], None), cache_from=REF)
    assert cache.source is not None and cache.source.registry.host == HOST and cache.source.repository == REPO


def test_a_key_not_in_the_cache_is_a_miss_and_says_nothing(s: Setup) -> None:
    assert s.reader.fetch(KEY, "wheel:x", s.fresh) is None
    assert (s.reader.report.misses, s.reader.report.hits, s.lines) == (1, 0, [])
    assert not s.fresh.blob_path(s.layer.digest).exists()


def test_an_empty_layer_is_a_layer(s: Setup) -> None:
    empty = LayerDescriptor(s.layout.put_blob(b""), 0, "sha256:" + "0" * 64, GZIP)
    s.writer.store(KEY, empty, "empty", s.layout)
    assert s.reader.fetch(KEY, "empty", s.fresh) == (empty, {}) and s.lines == []


def test_a_blob_here_but_damaged_is_fetched_again(s: Setup) -> None:
    s.writer.store(KEY, s.layer, "wheel:x", s.layout)
    s.fresh.blob_path(s.layer.digest).write_bytes(s.data[:-1])
    assert s.reader.fetch(KEY, "wheel:x", s.fresh) == (s.layer, {})
    assert s.fresh.blob_path(s.layer.digest).read_bytes() == s.data


def test_a_blob_is_written_beside_the_others_under_a_hidden_name_until_it_is_whole(s: Setup) -> None:
    s.writer.store(KEY, s.layer, "wheel:x", s.layout)
    seen: list[list[str]] = []

    def look() -> None:
        seen.append(sorted(p.name for p in s.fresh.blobs.iterdir()))

    s.registry.on_open = look
    assert s.reader.fetch(KEY, "wheel:x", s.fresh)
    assert len(seen) == 1 and len(seen[0]) == 1 and seen[0][0].startswith(".fetch-")
    assert sorted(p.name for p in s.fresh.blobs.iterdir()) == [s.layer.digest.split(":")[1]]


def test_a_what_longer_than_200_characters_is_cut_in_the_annotation_only(s: Setup) -> None:
    s.writer.store(KEY, s.layer, "w" * 300, s.layout)
    assert s.registry.entry(KEY)["annotations"]["io.pinmatrix.cache.what"] == "w" * 200
    assert _payload(s)["what"] == "w" * 300


def test_a_verified_entry_is_not_written_again_and_one_that_does_not_verify_is_written_over(s: Setup) -> None:
    s.writer.store(KEY, s.layer, "wheel:x", s.layout)
    before = s.registry.manifests[(REPO, cache_tag(KEY))]
    s.writer.store(KEY, s.layer, "wheel:x", s.layout)
    assert s.writer.report.stored == 1 and s.registry.manifests[(REPO, cache_tag(KEY))] is before
    s.put_entry(KEY, b'{"payload": "", "signatures": []}')
    s.writer.store(KEY, s.layer, "wheel:x", s.layout)
    assert s.writer.report.stored == 2 and s.reader.lookup(KEY, "wheel:x") is not None and s.lines == []


def test_a_cache_to_write_needs_a_signing_key(s: Setup) -> None:
    with pytest.raises(ValueError) as err:
        BuildCache(cache_trust([], None), cache_to=REF, registries={REF: s.registry})  # type: ignore[dict-item]
    assert str(err.value) == "a cache to write needs a signing key"
    reading = BuildCache(cache_trust([], None), cache_from=REF, registries={REF: s.registry})  # type: ignore[dict-item]
    reading.store(KEY, s.layer, "wheel:x", s.layout)  # no cache to write: nothing asked
    assert s.registry.calls == 0 and reading.target is None


def _unsigned(s: Setup) -> bytes:
    return json.dumps({**json.loads(s.sign(s.entry())), "signatures": []}).encode()


@pytest.mark.parametrize(("forge", "said"), [
    (lambda s: s.put_entry(KEY, s.sign(s.entry()), artifactType="application/other"),
     "not a pinmatrix build cache entry"),
    (lambda s: s.put_entry(KEY, s.sign(s.entry()), layers=[]), "not a pinmatrix build cache entry"),
    (lambda s: s.put_entry(KEY, s.sign(s.entry()), layers=[{"mediaType": GZIP, "digest": s.layer.digest,
                                                             "size": s.layer.size}]),
     "not a pinmatrix build cache entry"),
    (lambda s: s.put_entry(KEY, _unsigned(s)), "the envelope carries no signature"),
    (lambda s: s.put_entry(KEY, s.sign(s.entry(key=OTHER))), f"the signed entry is for key {OTHER[:12]}, not this one"),
    (lambda s: s.put_entry(KEY, s.sign(s.entry(key=None))), "the signed entry is for key None, not this one"),
    (lambda s: s.put_entry(KEY, s.trust.sign(b"not json")), "the signed entry is not readable: Expecting value"),  # type: ignore[misc]
    (lambda s: s.put_entry(KEY, s.trust.sign(b"[1]")), "the signed entry is not readable: no layer"),  # type: ignore[misc]
    (lambda s: s.put_entry(KEY, s.sign(s.entry(layer="sha256:" + "0" * 64))), "the signed entry is not readable: no layer"),
    (lambda s: s.put_entry(KEY, s.sign(s.entry(meta={"n": 1}))),
     "the signed entry is not readable: meta is not a table of strings"),
    (lambda s: s.put_entry(KEY, s.sign(s.entry(meta=["x"]))),
     "the signed entry is not readable: meta is not a table of strings"),
    (lambda s: s.put_entry(KEY, s.sign(s.entry(extras={"../../x.json": "sha256:" + "1" * 64}))),
     "the signed entry is not readable: extras are not files named for a layer, by digest"),
    (lambda s: s.put_entry(KEY, s.sign(s.entry(extras={"a" * 64 + "-scan-v1.json": "md5:1"}))),
     "the signed entry is not readable: extras are not files named for a layer, by digest"),
    (lambda s: s.put_entry(KEY, s.sign(s.entry(extras={"a" * 64 + "-scan-v1.json": 1}))),
     "the signed entry is not readable: extras are not files named for a layer, by digest"),
    (lambda s: s.put_entry(KEY, s.sign(s.entry(extras=["a" * 64 + "-scan-v1.json"]))),
     "the signed entry is not readable: extras are not files named for a layer, by digest"),
    (lambda s: s.put_entry(KEY, s.sign(s.entry(layer={**s.layer.to_json(), "digest": "sha512:" + "0" * 128}))),
     "the signed entry names no sha256 layer"),
    (lambda s: s.put_entry(KEY, s.sign(s.entry(layer={**s.layer.to_json(), "size": -1}))),
     "the signed entry names no sha256 layer"),
])
def test_an_entry_that_is_not_what_was_asked_for_is_refused_in_one_line_and_the_cache_still_asked(
        s: Setup, forge: Callable[[Setup], None], said: str) -> None:
    s.writer.store(OTHER, s.layer, "wheel:y", s.layout)  # a good entry under another key
    forge(s)
    assert s.reader.fetch(KEY, "wheel:x", s.fresh) is None
    prefix = f"build cache {REF}: the entry for wheel:x (key {KEY[:12]}) refused, built here instead: "
    assert len(s.lines) == 1 and s.lines[0].startswith(prefix + said), s.lines
    assert (len(s.reader.report.refused), s.reader.report.misses, s.reader.report.down) == (1, 0, [])
    assert s.reader.report.refused[0].startswith(f"wheel:x: {said}")
    assert s.reader.lookup(OTHER, "wheel:y") is not None  # a refused entry is not a cache that is down
    assert s.reader.report.describe() == "build cache: 0 layer(s) fetched, 0 missed, 0 stored, 1 refused"


@pytest.mark.parametrize("trouble", [RegistryError("registry 127.0.0.1:5999 unreachable: refused"),
                                     AuthError("registry 127.0.0.1:5999 requires authentication"),
                                     OSError("no route to host")])
def test_a_cache_that_is_down_or_refuses_is_one_line_then_not_asked_again(s: Setup, trouble: Exception) -> None:
    s.writer.store(KEY, s.layer, "wheel:x", s.layout)
    s.registry.fail, s.registry.calls = trouble, 0
    assert s.reader.fetch(KEY, "wheel:x", s.fresh) is None
    assert s.reader.fetch(OTHER, "wheel:y", s.fresh) is None and s.reader.fetch_document(KEY, "doc") is None
    assert s.registry.calls == 1
    assert s.lines == [f"build cache {REF} not used for the rest of this run: {trouble}"]
    assert s.reader.report.down == [f"{REF}: {trouble}"] and s.reader.report.misses == 0
    assert s.reader.report.describe() == f"build cache: 0 layer(s) fetched, 0 missed, 0 stored; not used: {REF}: {trouble}"
    s.writer.store(OTHER, s.layer, "wheel:y", s.layout)
    s.writer.store(KEY, s.layer, "wheel:x", s.layout)
    s.writer.store_document(KEY, "doc", {"a": 1})
    assert s.registry.calls == 2 and s.writer.report.stored == 1 and len(s.lines) == 2
    assert s.lines[1] == f"build cache {REF} not used for the rest of this run: {trouble}"


def test_documents_on_a_cache_that_is_down_are_one_line_each_side(s: Setup) -> None:
    s.registry.fail = RegistryError("gone")
    assert s.reader.fetch_document(KEY, "choices") is None
    s.writer.store_document(KEY, "choices", {"a": 1})
    assert s.lines == [f"build cache {REF} not used for the rest of this run: gone"] * 2
    assert s.reader.report.down == [f"{REF}: gone"] and s.writer.report.down == [f"{REF}: gone"]


def test_a_cache_that_goes_down_while_a_blob_comes_is_a_miss_and_not_asked_again(s: Setup) -> None:
    s.writer.store(KEY, s.layer, "wheel:x", s.layout)
    found = s.reader.lookup(KEY, "wheel:x")
    assert found is not None
    s.registry.fail = RegistryError("connection reset")
    assert not s.reader.complete(found, "wheel:x", s.fresh)
    assert s.reader.report.down == [f"{REF}: connection reset"] and s.reader.report.hits == 0
    s.registry.fail, s.registry.calls = None, 0
    assert not s.reader.complete(found, "wheel:x", s.fresh) and s.reader.lookup(KEY, "wheel:x") is None
    assert s.registry.calls == 0 and not s.fresh.blob_path(s.layer.digest).exists()


@pytest.mark.parametrize(("serve", "length", "said"), [
    (lambda data: b"x" + data[1:], len, "does not match its digest"),
    (lambda data: data[:-1], len, f"is {12 * 1000 - 1} bytes, the entry says {12 * 1000}"),
    (lambda data: data[:-1], lambda data: None, "does not match its digest"),
    (lambda data: data + b"x", len, f"is {12 * 1000 + 1} bytes, the entry says {12 * 1000}"),
    (lambda data: data + b"x" * (4 << 20), lambda data: None, f"is more than the {12 * 1000} bytes the entry says"),
    (lambda data: data, lambda data: len(data) + 1, f"is {12 * 1000 + 1} bytes, the entry says {12 * 1000}"),
])
def test_a_blob_that_is_not_the_signed_digest_or_size_is_refused_and_never_kept(
        s: Setup, serve: Callable[[bytes], bytes], length: Callable[[bytes], int | None], said: str) -> None:
    s.writer.store(KEY, s.layer, "wheel:x", s.layout)
    s.registry.serve, s.registry.length = serve, length
    assert s.reader.fetch(KEY, "wheel:x", s.fresh) is None
    prefix = f"build cache {REF}: the entry for wheel:x (key {KEY[:12]}) refused, built here instead: "
    assert len(s.lines) == 1 and said in s.lines[0] and s.lines[0].startswith(prefix), s.lines
    assert s.reader.report.refused and not s.reader.report.down and s.reader.report.hits == 0
    assert not s.fresh.blob_path(s.layer.digest).exists()
    assert [p.name for p in s.fresh.blobs.iterdir()] == []  # no partial file left either


def test_a_blob_whose_read_ends_short_without_a_length_is_refused_by_its_size(s: Setup) -> None:
    """A stream that stops short but whose bytes hash right (the registry's reader checks the digest at the end):
    the size the entry signed is checked too."""
    s.writer.store(KEY, s.layer, "wheel:x", s.layout)
    found = s.reader.lookup(KEY, "wheel:x")
    assert found is not None
    longer = LayerDescriptor(found.layer.digest, found.layer.size + 1, found.layer.diff_id, GZIP)
    s.registry.length = lambda data: None  # no Content-Length: the stream alone says how long it is
    assert not s.reader.complete(dataclasses.replace(found, layer=longer), "wheel:x", s.fresh)
    assert s.lines[-1].endswith(f"instead: blob {s.layer.digest} is {12 * 1000} bytes, the entry says {12 * 1000 + 1}")


def test_a_blob_already_intact_here_is_not_fetched(s: Setup) -> None:
    s.writer.store(KEY, s.layer, "wheel:x", s.layout)
    s.registry.serve = lambda data: b"not these bytes"
    assert s.reader.fetch(KEY, "wheel:x", s.layout) == (s.layer, {})  # the writer's own layout has the blob
    assert s.reader.report.hits == 1 and s.lines == []


def test_only_a_layers_own_extras_are_kept_and_only_where_asked(s: Setup, tmp_path: Path) -> None:
    own = s.layer.digest.split(":")[1] + "-scan-v1.json"
    foreign = "f" * 64 + "-scan-v1.json"
    files = tmp_path / "made"
    files.mkdir()
    for name in (own, foreign, "unnamed.json"):
        (files / name).write_bytes(name.encode())
    s.writer.store(KEY, s.layer, "wheel:x", s.layout, extras=sorted(files.iterdir()))
    entry = s.registry.entry(KEY)
    assert entry["layers"][2:] == [{"mediaType": EXTRA_MEDIA_TYPE, "digest": sha256_digest(n.encode()),
                                    "size": len(n)} for n in sorted((own, foreign))]
    assert _payload(s)["extras"] == {n: sha256_digest(n.encode()) for n in (own, foreign)}
    s.registry.calls = 0
    s.reader.fetch(KEY, "wheel:x", s.fresh)  # no folder for extras: none asked
    assert s.registry.calls == 2  # the entry, the layer
    out = tmp_path / "extras"
    out.mkdir()
    found = s.reader.lookup(KEY, "wheel:x")
    assert found is not None and set(found.extras) == {own, foreign}
    assert s.reader.complete(found, "wheel:x", s.fresh, out)
    assert [p.name for p in out.iterdir()] == [own] and (out / own).read_bytes() == own.encode()


def test_an_extra_that_is_not_its_digest_is_a_miss(s: Setup, tmp_path: Path) -> None:
    own = s.layer.digest.split(":")[1] + "-scan-v1.json"
    (tmp_path / own).write_bytes(b"scan")
    s.writer.store(KEY, s.layer, "wheel:x", s.layout, extras=[tmp_path / own])
    s.registry.blobs[(REPO, sha256_digest(b"scan"))] = b"other"
    out = tmp_path / "extras"
    out.mkdir()
    assert s.reader.fetch(KEY, "wheel:x", s.fresh, out) is None and list(out.iterdir()) == []


def test_a_document_round_trips_and_is_refused_when_it_is_not_one(s: Setup) -> None:
    s.writer.store_document(KEY, "choices", {"lines": ["a"], "b": 1})
    assert s.registry.entry(KEY) == _expected_manifest(_envelope(s), "choices", [])
    assert s.registry.blobs[(REPO, sha256_digest(b"{}"))] == b"{}"
    assert _payload(s) == {"key": KEY, "what": "choices", "doc": {"lines": ["a"], "b": 1}}
    s.writer.store_document(KEY, "choices", {"lines": ["changed"]})  # verified there already: kept
    assert s.reader.fetch_document(KEY, "choices") == {"lines": ["a"], "b": 1}
    assert s.reader.fetch_document(OTHER, "choices") is None and s.lines == []
    prefix = f"build cache {REF}: the entry for choices (key {KEY[:12]}) refused, built here instead: "
    for payload, said in [({"key": OTHER, "doc": {}}, f"the signed entry is for key {OTHER[:12]}, not this one"),
                          ({"key": KEY, "doc": ["x"]}, "the signed entry holds no document"),
                          ([KEY], "the signed entry holds no document")]:
        s.put_entry(KEY, s.sign(payload))  # type: ignore[arg-type]
        assert s.reader.fetch_document(KEY, "choices") is None and s.lines[-1] == prefix + said, s.lines
    s.put_entry(KEY, s.trust.sign(b"{"))  # type: ignore[misc]
    assert s.reader.fetch_document(KEY, "choices") is None and s.lines[-1].startswith(
        prefix + "the signed entry is not readable: ")
    assert len(s.reader.report.refused) == 4 and not s.reader.report.down
    assert s.reader.report.refused[0] == f"choices: the signed entry is for key {OTHER[:12]}, not this one"
    s.writer.store_document(KEY, "choices", {"lines": ["b"]})  # one that is not this key's document: written over
    assert s.reader.fetch_document(KEY, "choices") == {"lines": ["b"]}
    s.put_entry(KEY, s.sign({"key": OTHER, "doc": {"lines": ["moved"]}}))  # signed, but another key's
    s.writer.store_document(KEY, "choices", {"lines": ["c"]})
    assert s.reader.fetch_document(KEY, "choices") == {"lines": ["c"]}


def test_a_document_past_its_bound_is_a_cache_that_refuses(s: Setup) -> None:
    s.writer.store_document(KEY, "choices", {"lines": ["x" * MAX_ENVELOPE]})
    assert "data" not in s.registry.entry(KEY)["layers"][0]  # past MAX_EMBEDDED: a blob only
    assert s.reader.fetch_document(KEY, "choices") == {"lines": ["x" * MAX_ENVELOPE]}
    assert s.reader.lookup(KEY, "as a layer") is None  # a layer's entry is read under MAX_ENVELOPE: too large
    assert s.reader.report.down and "larger than" in s.lines[-1]
    assert MAX_EMBEDDED == MAX_ENVELOPE


def test_documents_are_neither_read_nor_written_without_their_side(s: Setup) -> None:
    s.reader.store_document(KEY, "choices", {"a": 1})
    assert s.writer.fetch_document(KEY, "choices") is None and s.registry.calls == 0


def _padded_to(s: Setup, size: int) -> bytes:
    """The entry's own signed envelope, padded with JSON whitespace to ``size`` bytes."""
    envelope = s.sign(s.entry())
    return envelope + b" " * (size - len(envelope))


@pytest.mark.parametrize("size", [MAX_ENVELOPE, MAX_ENVELOPE - 1, MAX_ENVELOPE - 2])
def test_an_envelope_up_to_its_bound_is_read_from_the_manifest(s: Setup, size: int) -> None:
    envelope = _padded_to(s, size)
    s.put_entry(KEY, envelope, layers=[{"mediaType": ENVELOPE_MEDIA_TYPE, "digest": sha256_digest(envelope),
                                        "size": size, "data": base64.b64encode(envelope).decode()}])
    s.registry.blobs[(REPO, s.layer.digest)] = s.data
    assert s.reader.fetch(KEY, "wheel:x", s.fresh) == (s.layer, {}) and s.registry.blob_requests == 0


def test_an_embedded_envelope_with_characters_outside_base64_is_not_used(s: Setup) -> None:
    envelope = s.sign(s.entry())
    data = base64.b64encode(envelope).decode()
    s.put_entry(KEY, envelope, layers=[{"mediaType": ENVELOPE_MEDIA_TYPE, "digest": sha256_digest(envelope),
                                        "size": len(envelope), "data": data[:8] + "!" + data[8:]}])
    s.registry.blobs[(REPO, s.layer.digest)] = s.data
    assert s.reader.fetch(KEY, "wheel:x", s.fresh) == (s.layer, {}) and s.registry.blob_requests == 1


def test_an_envelope_is_embedded_only_up_to_its_bound(s: Setup) -> None:
    s.writer.store(KEY, s.layer, "wheel:x", s.layout)
    descriptor = s.registry.entry(KEY)["layers"][0]
    assert base64.b64decode(descriptor["data"]) == _envelope(s)
    for pad, embedded in [(0, True), (1, False)]:
        assert trust_sized(s, MAX_EMBEDDED + pad) == embedded


def trust_sized(s: Setup, size: int) -> bool:
    """Whether a document whose envelope is ``size`` bytes is embedded in its entry."""
    signer = s.trust.sign
    assert signer is not None

    def padded(payload: bytes) -> bytes:
        envelope = signer(payload)
        return envelope + b" " * (size - len(envelope))

    s.writer.trust = dataclasses.replace(s.trust, sign=padded)
    key = f"{size:064d}"
    s.writer.store_document(key, "sized", {"a": 1})
    descriptor = s.registry.entry(key)["layers"][0]
    assert descriptor["size"] == size
    return "data" in descriptor


def test_a_push_to_the_caches_registry_mounts_what_the_cache_holds(s: Setup) -> None:
    other = LayerDescriptor(s.layout.put_blob(b"other"), 5, "sha256:" + "0" * 64, GZIP)
    s.writer.store(KEY, s.layer, "wheel:x", s.layout)
    s.writer.store(OTHER, other, "wheel:y", s.layout)
    absent = LayerDescriptor("sha256:" + "a" * 64, 3, "sha256:" + "0" * 64, GZIP)
    assert s.reader.mount_into(s.registry, "pushed/cell", [absent, s.layer, other]) == 2  # type: ignore[arg-type]
    assert s.registry.mounted == [("pushed/cell", s.layer.digest, REPO), ("pushed/cell", other.digest, REPO)]
    elsewhere = MemoryRegistry("elsewhere:5000")
    elsewhere.blobs = dict(s.registry.blobs)
    assert s.reader.mount_into(elsewhere, "p", [s.layer]) == 0 and elsewhere.mounted == []  # type: ignore[arg-type]
    assert s.writer.mount_into(s.registry, "p", [s.layer]) == 0  # type: ignore[arg-type]  # no cache to read
    s.registry.fail = AuthError("registry asks for credentials")
    assert s.reader.mount_into(s.registry, "p", [s.layer]) == 0  # type: ignore[arg-type]  # the push uploads
    assert s.lines == []


def test_a_report_says_what_the_cache_did() -> None:
    report = CacheReport(hits=2, misses=1, stored=3, refused=["a: x"], down=["r: gone", "t: gone"])
    assert report.describe() == ("build cache: 2 layer(s) fetched, 1 missed, 3 stored, 1 refused; "
                                 "not used: r: gone; t: gone")


def test_a_blob_here_that_is_not_the_signed_size_is_not_taken_for_the_layer(s: Setup) -> None:
    """An entry signed for the right digest but another size: the blob already here is not enough."""
    s.put_entry(KEY, s.sign(s.entry(layer={**s.layer.to_json(), "size": s.layer.size + 1})))
    s.registry.blobs[(REPO, s.layer.digest)] = s.data
    s.fresh.put_blob(s.data)
    assert s.reader.fetch(KEY, "wheel:x", s.fresh) is None
    assert s.lines[-1].endswith(f"the entry says {s.layer.size + 1}") and s.reader.report.hits == 0


def test_a_fetch_says_its_progress_to_whoever_listens(s: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    class Due(build_cache.TransferMeter):
        def due(self) -> bool:
            return True

    monkeypatch.setattr(build_cache, "TransferMeter", Due)
    s.writer.store(KEY, s.layer, "wheel:x", s.layout)
    lines: list[str] = []
    assert s.reader.fetch(KEY, "wheel:x", s.fresh, progress=lines.append)
    assert lines and all(line.startswith("fetch wheel:x from the build cache: ") for line in lines)
