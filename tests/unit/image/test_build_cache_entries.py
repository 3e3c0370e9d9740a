"""A build cache entry's signed envelope travels in its manifest too (the descriptor's ``data``), so a fresh machine
asks one request per layer's entry, not two (issue 46's warm cache: the entries of a 61-layer cell cost the
registry more than their blobs' first megabytes). The embedded envelope is used only when it is its descriptor's
digest, else the envelope's blob is fetched as before; an entry written without it is still read; a document's
envelope past ``MAX_EMBEDDED`` is not embedded. The registry is an in-memory stand-in of registry/client.Registry."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from pinmatrix.hashing import sha256_digest
from pinmatrix.image.build_cache import MAX_EMBEDDED, MAX_ENVELOPE, BuildCache, cache_tag
from pinmatrix.imageref import RegistryError
from pinmatrix.oci.layer import LayerDescriptor
from pinmatrix.oci.layout import OCILayout
from pinmatrix.registry.client import Manifest
from pinmatrix.release.cache_signing import cache_trust
from pinmatrix.release.signing import generate_keypair, load_public_key

REF = "127.0.0.1:5999/cache"
REPO = "cache"
KEY = "k" * 64


class MemoryRegistry:
    """Blobs and manifests in memory; counts the blob requests a reader makes."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[str, Manifest] = {}
        self.blob_requests = 0

    def get_manifest(self, repository: str, reference: str) -> Manifest | None:
        return self.manifests.get(reference)

    def put_manifest(self, repository: str, reference: str, manifest: Manifest) -> str:
        self.manifests[reference] = manifest
        return manifest.digest

    def has_blob(self, repository: str, digest: str) -> bool:
        return digest in self.blobs

    def push_blob(self, repository: str, data: bytes) -> str:
        self.blobs[sha256_digest(data)] = data
        return sha256_digest(data)

    def push_blob_as(self, repository: str, digest: str, body: Callable[[], tuple[BinaryIO, int]]) -> bool:
        stream, _ = body()
        with stream:
            self.blobs[digest] = stream.read()
        return True

    def get_blob(self, repository: str, digest: str, *, max_bytes: int = 64 << 20) -> bytes:
        self.blob_requests += 1
        if len(self.blobs[digest]) > max_bytes:
            raise RegistryError(f"blob {digest} is larger than {max_bytes} bytes")
        return self.blobs[digest]

    @contextmanager
    def open_blob(self, repository: str, digest: str) -> Iterator[Any]:
        raise AssertionError("no layer blob is fetched by a lookup")
        yield


@pytest.fixture
def setup(tmp_path: Path) -> tuple[BuildCache, BuildCache, MemoryRegistry, OCILayout]:
    """A writer and a reader of one cache, and a layout holding a layer's blob."""
    private, public, _ = generate_keypair(tmp_path / "keys" / "signing")
    trust = cache_trust([load_public_key(public)], private)
    registry = MemoryRegistry()
    known: dict[str, Any] = {REF: registry}
    writer = BuildCache(trust, cache_to=REF, registries=known)
    reader = BuildCache(trust, cache_from=REF, registries=known, warn=lambda line: None)
    layout = OCILayout(tmp_path / "oci").init()
    return writer, reader, registry, layout


def _layer(layout: OCILayout, data: bytes) -> LayerDescriptor:
    return LayerDescriptor(layout.put_blob(data), len(data), "sha256:" + "0" * 64,
                           "application/vnd.oci.image.layer.v1.tar+gzip")


def _envelope_descriptor(registry: MemoryRegistry, key: str = KEY) -> dict[str, Any]:
    descriptor: dict[str, Any] = registry.manifests[cache_tag(key)].json["layers"][0]
    return descriptor


def _rewrite(registry: MemoryRegistry, key: str, change: Callable[[dict[str, Any]], None]) -> None:
    """The entry's manifest under ``key``'s tag with its envelope's descriptor changed (as anyone who can push could)."""
    doc = registry.manifests[cache_tag(key)].json
    change(doc["layers"][0])
    body = json.dumps(doc).encode()
    registry.manifests[cache_tag(key)] = Manifest(body, "application/vnd.oci.image.manifest.v1+json",
                                                  sha256_digest(body))


def test_an_entry_embeds_its_envelope_and_a_reader_asks_no_blob_for_it(setup) -> None:  # noqa: ANN001
    writer, reader, registry, layout = setup
    layer = _layer(layout, b"layer bytes")
    writer.store(KEY, layer, "wheel:x", layout)
    descriptor = _envelope_descriptor(registry)
    assert base64.b64decode(descriptor["data"]) == registry.blobs[descriptor["digest"]]  # the blob is kept too
    found = reader.lookup(KEY, "wheel:x")
    assert found is not None and found.layer == layer
    assert registry.blob_requests == 0


def test_an_embedded_envelope_that_is_not_its_digest_is_not_used(setup) -> None:  # noqa: ANN001
    """Another envelope, genuinely signed for the same key (another layer's), embedded under the digest of the
    stored one: the blob that is the digest is fetched and used, never the embedded bytes."""
    writer, reader, registry, layout = setup
    layer = _layer(layout, b"layer bytes")
    writer.store(KEY, layer, "wheel:x", layout)
    other = _layer(layout, b"other layer bytes")
    writer.store("o" * 64, other, "wheel:x", layout)
    swapped = json.loads(base64.b64decode(_envelope_descriptor(registry, "o" * 64)["data"]))
    payload = json.loads(base64.b64decode(swapped["payload"]))
    assert payload["layer"]["digest"] == other.digest
    payload["key"] = KEY
    forged = writer.trust.sign(json.dumps(payload, sort_keys=True).encode())  # type: ignore[misc]
    _rewrite(registry, KEY, lambda d: d.update(data=base64.b64encode(forged).decode()))
    found = reader.lookup(KEY, "wheel:x")
    assert found is not None and found.layer == layer, "the embedded bytes were used without their digest checked"
    assert registry.blob_requests == 1


def test_an_entry_written_without_an_embedded_envelope_is_read_from_its_blob(setup) -> None:  # noqa: ANN001
    writer, reader, registry, layout = setup
    layer = _layer(layout, b"layer bytes")
    writer.store(KEY, layer, "wheel:x", layout)
    _rewrite(registry, KEY, lambda d: d.pop("data"))
    found = reader.lookup(KEY, "wheel:x")
    assert found is not None and found.layer == layer
    assert registry.blob_requests == 1


def test_an_embedded_envelope_that_is_not_base64_is_not_used(setup) -> None:  # noqa: ANN001
    writer, reader, registry, layout = setup
    layer = _layer(layout, b"layer bytes")
    writer.store(KEY, layer, "wheel:x", layout)
    _rewrite(registry, KEY, lambda d: d.update(data="not base64!"))
    found = reader.lookup(KEY, "wheel:x")
    assert found is not None and found.layer == layer
    assert registry.blob_requests == 1


def test_a_document_past_the_embedded_bound_is_only_a_blob_and_still_read(setup) -> None:  # noqa: ANN001
    """A manifest is read whole (bounded at 4 MiB): a long lock's choices stay out of it."""
    writer, reader, registry, _ = setup
    small, large = {"lines": ["a" * 100]}, {"lines": ["b" * 100] * (MAX_EMBEDDED // 100)}
    writer.store_document("s" * 64, "choices", small)
    writer.store_document("l" * 64, "choices", large)
    assert "data" in _envelope_descriptor(registry, "s" * 64)
    assert "data" not in _envelope_descriptor(registry, "l" * 64)
    assert reader.fetch_document("s" * 64, "choices") == small and registry.blob_requests == 0
    assert reader.fetch_document("l" * 64, "choices") == large and registry.blob_requests == 1


def test_an_embedded_envelope_past_the_envelopes_bound_is_not_used(setup) -> None:  # noqa: ANN001
    """The bound a blob is read under holds for the embedded bytes too: past it, the blob is asked (and refused)."""
    writer, reader, registry, layout = setup
    writer.store(KEY, _layer(layout, b"layer bytes"), "wheel:x", layout)
    padded = json.dumps({"payload": "", "pad": "x" * MAX_ENVELOPE}).encode()
    registry.push_blob(REPO, padded)
    _rewrite(registry, KEY, lambda d: d.update(data=base64.b64encode(padded).decode(), digest=sha256_digest(padded),
                                               size=len(padded)))
    assert reader.lookup(KEY, "wheel:x") is None
    assert registry.blob_requests == 1 and reader.report.down and not reader.report.refused
