"""A build cache in an OCI registry (``build --cache-from REF --cache-to REF``): a layer the assembler would build
is fetched instead when another machine built it under the same key.

One entry per layer key, under the tag ``layer-<key>`` of the cache repository: an OCI artifact manifest whose
layers are the signed entry (a DSSE envelope, ``ENTRY_TYPE``, of ``{"key", "layer": descriptor, "what"}``) and the
layer blob itself, so the registry keeps the blob as long as the entry. The envelope is also embedded in the
manifest (its descriptor's ``data``, up to ``MAX_EMBEDDED``): a reader asks one request per entry, not two. One tag per key, not one index per cell or
per cache: a machine asks exactly the keys of its plan, one request each; writers of different cells never write
the same document, so no read-merge-write race (as the referrers tag schema has) can drop an entry; cells that share
a layer share its entry.

Nothing from the cache is used unless the entry's envelope verifies with a trusted key and names the very key asked
for (an entry copied under another tag is refused), and the blob re-hashes to the signed digest as it streams in: a
registry anyone can push to cannot poison a build. A refused entry is a miss (the layer is built) and one line on
stderr. A cache that is down or refuses a request is one line on stderr for the run, then not asked again: the
build goes on as if there were no cache, never failing a cell for it.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pinmatrix.atomic import atomic_write_bytes
from pinmatrix.hashing import sha256_digest
from pinmatrix.imageref import ImageRef, RegistryError
from pinmatrix.oci.layer import LayerDescriptor
from pinmatrix.oci.layout import OCILayout
from pinmatrix.oci.manifest import layer_descriptors
from pinmatrix.registry.auth import AuthError
from pinmatrix.registry.client import OCI_EMPTY, OCI_MANIFEST, Manifest, Registry
from pinmatrix.transfer import TransferMeter

ARTIFACT_TYPE = "application/vnd.pinmatrix.build-cache.v1"
ENTRY_TYPE = "application/vnd.pinmatrix.build-cache-entry.v1+json"  # the DSSE payload type
ENVELOPE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
EXTRA_MEDIA_TYPE = "application/vnd.pinmatrix.layer-extra.v1+json"
TAG_PREFIX = "layer-"
MAX_ENVELOPE = 64 << 10
MAX_EXTRA = 64 << 20
MAX_DOCUMENT = 4 << 20  # a document entry's envelope (a lock's wheel choices: about 0.3 kB a line)
# An envelope a layer entry may have (MAX_ENVELOPE) is also embedded in the entry's manifest (its descriptor's
# ``data``), so a reader needs one request for it, not two; a larger one (a document's: a long lock's choices) only
# as its blob, which is kept either way (a registry wants every blob a manifest names).
MAX_EMBEDDED = MAX_ENVELOPE
# A file made from a layer and kept beside it (the runnable check's scan, loadcheck.layer_scan): named for the
# layer's digest, so a fetched one can only land under a name of its own layer.
EXTRA_NAME = re.compile(r"^(?P<hex>[0-9a-f]{64})-[A-Za-z0-9]{1,16}-v[0-9]{1,6}\.json$")
# What a cache that is down or refuses raises: unreachable, an error status, or credentials asked for and not here.
CACHE_TROUBLE = (RegistryError, AuthError, OSError)


@dataclass(frozen=True)
class Found:
    """A verified entry: the layer it names (its blob maybe not here yet), its meta and its extras (name -> digest)."""

    key: str
    layer: LayerDescriptor
    meta: dict[str, str]
    extras: dict[str, str]


class CacheRefused(Exception):
    """An entry that is not used: the reason, in words."""


@dataclass(frozen=True)
class CacheTrust:
    """How entries are signed and checked (release/cache_signing.py makes it from the project's keys):
    ``sign`` turns a payload into envelope bytes (None: this run writes no cache); ``verify`` returns an
    envelope's payload of type ENTRY_TYPE, or raises CacheRefused."""

    verify: Callable[[bytes], bytes]
    sign: Callable[[bytes], bytes] | None = None


@dataclass
class CacheReport:
    """What the cache did in this run."""

    hits: int = 0
    misses: int = 0
    stored: int = 0
    refused: list[str] = field(default_factory=list)
    down: list[str] = field(default_factory=list)

    def describe(self) -> str:
        said = f"build cache: {self.hits} layer(s) fetched, {self.misses} missed, {self.stored} stored"
        return said + (f", {len(self.refused)} refused" if self.refused else "") + (
            f"; not used: {'; '.join(self.down)}" if self.down else "")


def cache_tag(key: str) -> str:
    return TAG_PREFIX + key


class _Side:
    """One cache repository (``--cache-from`` or ``--cache-to``): usable until its first failure."""

    def __init__(self, ref: str, registry: Registry | None = None) -> None:
        parsed = ImageRef.parse(ref)  # HOST/REPOSITORY; a tag or digest is not used: entries are tagged by key
        self.ref = ref
        self.repository = parsed.repository
        self.registry = registry or Registry(parsed.registry)
        self.down: str | None = None


class BuildCache:
    """Layers by key from ``cache_from``, layers built here stored to ``cache_to``; both ``HOST/REPOSITORY``."""

    def __init__(self, trust: CacheTrust, *, cache_from: str | None = None, cache_to: str | None = None,
                 registries: dict[str, Registry] | None = None,
                 warn: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> None:
        known = registries or {}
        self.trust = trust
        self.source = _Side(cache_from, known.get(cache_from)) if cache_from else None
        self.target = _Side(cache_to, known.get(cache_to)) if cache_to else None
        if self.target is not None and trust.sign is None:
            raise ValueError("a cache to write needs a signing key")
        self.report = CacheReport()
        self._warn = warn
        self._guard = threading.Lock()

    def _failed(self, side: _Side, err: Exception) -> None:
        with self._guard:
            if side.down is not None:
                return
            side.down = f"{side.ref}: {err}"
            self.report.down.append(side.down)
        self._warn(f"build cache {side.ref} not used for the rest of this run: {err}")

    # -- reading -------------------------------------------------------------------------------------------
    def fetch(self, key: str, what: str, layout: OCILayout, extras_dir: Path | None = None, *,
              progress: Callable[[str], None] | None = None) -> tuple[LayerDescriptor, dict[str, str]] | None:
        """The layer stored under ``key``, its blob written into ``layout`` and the files kept beside it into
        ``extras_dir``, and the meta stored with it; None on a miss, a refused entry or a cache that is down (then
        the caller builds it). ``progress`` hears the blob's bytes as they come (``complete``)."""
        found = self.lookup(key, what)
        if found is None or not self.complete(found, what, layout, extras_dir, progress=progress):
            return None
        return found.layer, found.meta

    def lookup(self, key: str, what: str) -> Found | None:
        """The verified entry under ``key`` (its blob not fetched yet: ``complete``); None on a miss (counted), a
        refused entry or a cache that is down. A caller can plan on what it names while its blob comes."""
        side = self.source
        if side is None or side.down is not None:
            return None
        try:
            entry = self._fetch_entry(side, key)
        except CacheRefused as err:
            self._refused(side, key, what, err)
            return None
        except CACHE_TROUBLE as err:
            self._failed(side, err)
            return None
        if entry is None:
            with self._guard:
                self.report.misses += 1
            return None
        return Found(key, *entry)

    def complete(self, found: Found, what: str, layout: OCILayout, extras_dir: Path | None = None, *,
                 progress: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic) -> bool:
        """The blob of a looked-up entry into ``layout`` (re-hashed to the signed digest as it streams) and its
        extras into ``extras_dir``: whether it came (a hit); a blob refused or a cache down since is a miss.
        ``progress`` hears, at most once a second while the blob comes, ``fetch WHAT from the build cache: bytes
        of size (share), rate, time left``."""
        side = self.source
        if side is None or side.down is not None:
            return False
        try:
            if not layout.intact_blob(found.layer.digest, found.layer.size):
                meter = TransferMeter(found.layer.size, clock=clock)
                _download(side, found.layer, layout, meter,
                          (lambda: progress(f"fetch {what} from the build cache: {meter.line()}")) if progress else None)
            for name, digest in found.extras.items() if extras_dir is not None else ():
                if name.startswith(found.layer.digest.split(":")[1]):  # only the layer's own; digest checked by get_blob
                    assert extras_dir is not None
                    atomic_write_bytes(extras_dir / name, side.registry.get_blob(side.repository, digest,
                                                                                 max_bytes=MAX_EXTRA))
        except CacheRefused as err:
            self._refused(side, found.key, what, err)
            return False
        except CACHE_TROUBLE as err:
            self._failed(side, err)
            return False
        with self._guard:
            self.report.hits += 1
        return True

    def _refused(self, side: _Side, key: str, what: str, err: CacheRefused) -> None:
        with self._guard:
            self.report.refused.append(f"{what}: {err}")
        self._warn(f"build cache {side.ref}: the entry for {what} (key {key[:12]}) refused, built here instead: {err}")

    def _fetch_entry(self, side: _Side, key: str) -> tuple[LayerDescriptor, dict[str, str], dict[str, str]] | None:
        """The verified entry under ``key``'s tag: None when there is none; CacheRefused when it does not verify."""
        payload = self._verified(side, key, MAX_ENVELOPE)
        return None if payload is None else _entry_layer(payload, key)

    def _verified(self, side: _Side, key: str, max_bytes: int) -> bytes | None:
        """The payload of the signed envelope under ``key``'s tag, verified; None when there is no entry."""
        manifest = side.registry.get_manifest(side.repository, cache_tag(key))
        if manifest is None:
            return None
        doc = manifest.json
        layers = layer_descriptors(doc)
        if doc.get("artifactType") != ARTIFACT_TYPE or not layers or layers[0].get("mediaType") != ENVELOPE_MEDIA_TYPE:
            raise CacheRefused("not a pinmatrix build cache entry")
        envelope = _embedded(layers[0], max_bytes)
        if envelope is None:
            envelope = side.registry.get_blob(side.repository, layers[0]["digest"], max_bytes=max_bytes)
        return self.trust.verify(envelope)

    # -- documents: what a machine would otherwise ask elsewhere (a lock's wheel choices), signed like a layer --
    def fetch_document(self, key: str, what: str) -> dict[str, Any] | None:
        """The signed document stored under ``key`` (its ``doc``), or None: a miss, a refused entry (one line) or
        a cache that is down. The caller checks what the document says against what it knows."""
        side = self.source
        if side is None or side.down is not None:
            return None
        try:
            payload = self._verified(side, key, MAX_DOCUMENT)
            return None if payload is None else _entry_document(payload, key)
        except CacheRefused as err:
            self._refused(side, key, what, err)
        except CACHE_TROUBLE as err:
            self._failed(side, err)
        return None

    def store_document(self, key: str, what: str, doc: dict[str, Any]) -> None:
        """``doc`` signed under ``key`` (no blob but the envelope), unless a verified entry is there already."""
        side = self.target
        if side is None or side.down is not None or self.trust.sign is None:
            return
        try:
            try:
                payload = self._verified(side, key, MAX_DOCUMENT)
                if payload is not None:
                    _entry_document(payload, key)  # CacheRefused unless it is this key's document
                    return
            except CacheRefused:
                pass  # written over
            envelope = self.trust.sign(json.dumps({"key": key, "what": what, "doc": doc}, sort_keys=True).encode())
            empty = b"{}"
            side.registry.push_blob(side.repository, empty)
            side.registry.push_blob(side.repository, envelope)
            body = json.dumps(_entry_manifest(key, what, [], envelope, empty), sort_keys=True,
                              separators=(",", ":")).encode()
            side.registry.put_manifest(side.repository, cache_tag(key),
                                       Manifest(body=body, media_type=OCI_MANIFEST, digest=sha256_digest(body)))
        except CACHE_TROUBLE as err:
            self._failed(side, err)

    # -- writing -------------------------------------------------------------------------------------------
    def store(self, key: str, layer: LayerDescriptor, what: str, layout: OCILayout,
              meta: dict[str, str] | None = None, extras: Sequence[Path] = ()) -> None:
        """Store a layer made here under ``key`` with ``meta`` and the ``extras`` kept beside it (named
        ``EXTRA_NAME``): the blobs, then the signed entry (a cache that is down: one line)."""
        side = self.target
        if side is None or side.down is not None or self.trust.sign is None:
            return
        try:
            if self._holds(side, key):
                return
            path = layout.blob_path(layer.digest)
            side.registry.push_blob_as(side.repository, layer.digest,
                                       lambda: (open(path, "rb"), path.stat().st_size))  # noqa: SIM115 - the registry closes it
            kept = {p.name: p.read_bytes() for p in extras if EXTRA_NAME.match(p.name)}
            named = {name: side.registry.push_blob(side.repository, data) for name, data in sorted(kept.items())}
            payload = json.dumps({"key": key, "layer": layer.to_json(), "what": what, "meta": meta or {},
                                  "extras": named}, sort_keys=True).encode()
            envelope = self.trust.sign(payload)
            empty = b"{}"
            side.registry.push_blob(side.repository, empty)
            side.registry.push_blob(side.repository, envelope)
            extra_layers = [{"mediaType": EXTRA_MEDIA_TYPE, "digest": named[n], "size": len(kept[n])} for n in named]
            body = json.dumps(_entry_manifest(key, what, [layer.as_oci(), *extra_layers], envelope, empty),
                              sort_keys=True, separators=(",", ":")).encode()
            side.registry.put_manifest(side.repository, cache_tag(key),
                                       Manifest(body=body, media_type=OCI_MANIFEST, digest=sha256_digest(body)))
        except CACHE_TROUBLE as err:
            self._failed(side, err)
            return
        with self._guard:
            self.report.stored += 1

    def _holds(self, side: _Side, key: str) -> bool:
        """Whether ``side`` has an entry for ``key`` that verifies (one that does not is written over)."""
        try:
            return self._fetch_entry(side, key) is not None
        except CacheRefused:
            return False

    def mount_into(self, registry: Registry, repository: str, layers: list[LayerDescriptor]) -> int:
        """Make the cache's blobs among ``layers`` present in ``repository`` of ``registry`` by a cross-repository
        mount (no upload) when the cache is on that registry; how many were mounted. A failure leaves the push to
        upload them."""
        side = self.source
        if side is None or side.down is not None or side.registry.host != registry.host:
            return 0
        mounted = 0
        for layer in layers:
            try:
                if not registry.has_blob(side.repository, layer.digest):
                    continue
                mounted += registry.mount_blob(repository, layer.digest, side.repository) == "mounted"
            except (RegistryError, AuthError):
                return mounted
        return mounted


def _entry_manifest(key: str, what: str, blobs: list[dict[str, Any]], envelope: bytes,
                    empty: bytes) -> dict[str, Any]:
    return {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": OCI_EMPTY, "digest": sha256_digest(empty), "size": len(empty)},
        "layers": [{"mediaType": ENVELOPE_MEDIA_TYPE, "digest": sha256_digest(envelope), "size": len(envelope),
                    **({"data": base64.b64encode(envelope).decode()} if len(envelope) <= MAX_EMBEDDED else {})},
                   *blobs],
        "annotations": {"io.pinmatrix.cache.key": key, "io.pinmatrix.cache.what": what[:200]},
    }


def _embedded(descriptor: dict[str, Any], max_bytes: int) -> bytes | None:
    """The envelope embedded in its descriptor (``data``, as OCI 1.1 allows) when it is there, at most ``max_bytes``
    and its descriptor's digest; else None (the envelope's blob is fetched, checked against that digest)."""
    data = descriptor.get("data")
    if not isinstance(data, str) or len(data) > (max_bytes + 2) // 3 * 4:
        return None
    try:
        envelope = base64.b64decode(data, validate=True)
    except ValueError:
        return None
    return envelope if sha256_digest(envelope) == descriptor.get("digest") else None


def _entry_layer(payload: bytes, key: str) -> tuple[LayerDescriptor, dict[str, str], dict[str, str]]:
    """The layer a verified entry names, its meta and its extras (name -> digest), once the entry is known to be
    for ``key``."""
    try:
        doc = json.loads(payload)
        if not isinstance(doc, dict) or not isinstance(doc.get("layer"), dict):
            raise ValueError("no layer")
        layer = LayerDescriptor.from_json(doc["layer"])
        meta = doc.get("meta") or {}
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise ValueError("meta is not a table of strings")
        extras = doc.get("extras") or {}
        if not isinstance(extras, dict) or not all(isinstance(n, str) and EXTRA_NAME.match(n) and isinstance(d, str)
                                                   and re.fullmatch(r"sha256:[0-9a-f]{64}", d)
                                                   for n, d in extras.items()):
            raise ValueError("extras are not files named for a layer, by digest")
    except (ValueError, KeyError, TypeError) as err:
        raise CacheRefused(f"the signed entry is not readable: {err}") from None
    if doc.get("key") != key:
        raise CacheRefused(f"the signed entry is for key {str(doc.get('key'))[:12]}, not this one")
    if not layer.digest.startswith("sha256:") or layer.size < 0:
        raise CacheRefused("the signed entry names no sha256 layer")
    return layer, {str(k): v for k, v in meta.items()}, dict(extras)


def _entry_document(payload: bytes, key: str) -> dict[str, Any]:
    """The ``doc`` of a verified document entry, once the entry is known to be for ``key``."""
    try:
        entry = json.loads(payload)
    except ValueError as err:
        raise CacheRefused(f"the signed entry is not readable: {err}") from None
    if not isinstance(entry, dict) or not isinstance(entry.get("doc"), dict):
        raise CacheRefused("the signed entry holds no document")
    if entry.get("key") != key:
        raise CacheRefused(f"the signed entry is for key {str(entry.get('key'))[:12]}, not this one")
    doc: dict[str, Any] = entry["doc"]
    return doc


def _download(side: _Side, layer: LayerDescriptor, layout: OCILayout, meter: TransferMeter,
              say: Callable[[], None] | None) -> None:
    """The blob into the layout, hashed as it streams (a blob that is not its digest is refused, never kept);
    ``meter`` counts its bytes, ``say`` is called when a progress line is due."""
    target = layout.blob_path(layer.digest)
    fd, tmp = tempfile.mkstemp(prefix=".fetch-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out, side.registry.open_blob(side.repository, layer.digest) as reader:
            if reader.length is not None and reader.length != layer.size:
                raise CacheRefused(f"blob {layer.digest} is {reader.length} bytes, the entry says {layer.size}")
            for chunk in iter(reader.read, b""):
                if reader.read_bytes > layer.size:  # never more than the signed size reaches the disk
                    raise CacheRefused(f"blob {layer.digest} is more than the {layer.size} bytes the entry says")
                out.write(chunk)
                meter.advance(len(chunk))
                if say is not None and meter.due():
                    say()
            if reader.read_bytes != layer.size:
                raise CacheRefused(f"blob {layer.digest} is {reader.read_bytes} bytes, the entry says {layer.size}")
        os.replace(tmp, target)
    except RegistryError as err:
        if "does not match its digest" in str(err):
            raise CacheRefused(str(err)) from None
        raise
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    layout.written(layer.digest, layer.size)
