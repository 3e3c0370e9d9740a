"""An OCI image layout on disk (``oci-layout``, ``index.json``, ``blobs/sha256/``): the builder's store.

Every cell image is written here first, as data: blobs under their digests, a manifest per image, and an
``index.json`` entry whose ``org.opencontainers.image.ref.name`` annotation is the image reference. Engines load
images from it (``oci-archive`` streamed to ``docker load`` / ``podman load``) and skopeo pushes from it, so the
manifest digest a registry serves is the one computed here.

A blob is trusted only while its bytes hash to its name: a cached blob is re-hashed before it is reused
(``intact_blob``, once per process), and a damaged one is removed so that it is built again (a fresh file, so a
hard link it shared with another layout is not written through). Temporary files that a killed build left in
the blob folder (their writer's pid is gone) are removed when the layout is opened.

This is the one reader of a layout, too: ``index.json`` and every JSON blob (manifest, index, config) are read
bounded (``MAX_DOCUMENT``), a document blob only once its bytes hash to its name, never through a symlink
(``read_document``, ``checked_blob``); the image manifest a build writes is made here (``put_manifest``)."""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import re
import tarfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from pinmatrix.atomic import atomic_write_bytes, process_alive
from pinmatrix.errors import PinmatrixError
from pinmatrix.hashing import oci_digest, sha256_bytes
from pinmatrix.oci.layer import LayerDescriptor

MEDIA_TYPE_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_TYPE_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_TYPE_INDEX = "application/vnd.oci.image.index.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"
CONTAINERD_NAME = "io.containerd.image.name"  # what `docker load` reads to tag an OCI archive's image
# What pinmatrix's writers name their temporary files: LayerWriter's ".layer-PID-ID.tmp", atomic's
# ".NAME.PID.HEX.tmp", a download's ".NAME.PID.part".
_TEMPORARY = re.compile(r"^\.(?:layer-(\d+)-[0-9a-f]+\.tmp|.+\.(\d+)\.[0-9a-f]+\.tmp|.+\.(\d+)\.part)$")
_CHUNK = 1 << 20
MAX_DOCUMENT = 4 << 20  # index.json, a manifest, a config: a few kB each


def remove_dead_temporaries(directory: Path) -> list[Path]:
    """Remove the temporary files in ``directory`` whose writer (the pid in the name) is no longer running;
    returns what was removed. Another running build's files are left alone."""
    removed: list[Path] = []
    try:
        entries = list(directory.iterdir())
    except FileNotFoundError:
        return removed
    for path in entries:
        m = _TEMPORARY.match(path.name)
        if not m or not path.is_file():
            continue
        pid = int(next(g for g in m.groups() if g is not None))
        if pid != os.getpid() and not process_alive(pid):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


class LayoutError(PinmatrixError):
    """The OCI layout is missing a blob or an image, or cannot be read."""


def checked_digest(digest: object, what: str) -> str:
    """``digest`` when it is ``sha256:`` and 64 lowercase hex digits; else one line naming ``what`` holds it."""
    if not isinstance(digest, str) or not digest.startswith("sha256:") or len(digest) != 71 \
            or any(c not in "0123456789abcdef" for c in digest[7:]):
        raise LayoutError(f"{what}: not a sha256 digest: {str(digest)[:80]!r}")
    return digest


def canonical_json(value: Any) -> bytes:
    """The bytes pinmatrix writes for a JSON document: sorted keys, no spaces, so the digest is stable."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True)
class StoredImage:
    ref: str
    digest: str  # manifest digest
    manifest: dict[str, Any]
    annotations: dict[str, str]

    @property
    def config_digest(self) -> str:
        return str(self.manifest["config"]["digest"])


class OCILayout:
    """A shared, content-addressed store of blobs plus a name -> manifest index, safe for concurrent writers."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = root / "blobs" / "sha256"
        self._intact: dict[str, int] = {}  # digest -> size of the blobs this process has hashed
        self._intact_lock = threading.Lock()

    def init(self) -> OCILayout:
        self.blobs.mkdir(parents=True, exist_ok=True)
        remove_dead_temporaries(self.blobs)
        marker = self.root / "oci-layout"
        if not marker.exists():
            atomic_write_bytes(marker, canonical_json({"imageLayoutVersion": "1.0.0"}))
        if not (self.root / "index.json").exists():
            atomic_write_bytes(self.root / "index.json", canonical_json(self._empty_index()))
        return self

    @staticmethod
    def _empty_index() -> dict[str, Any]:
        return {"schemaVersion": 2, "mediaType": MEDIA_TYPE_INDEX, "manifests": []}

    def blob_path(self, digest: str) -> Path:
        algo, _, hexd = digest.partition(":")
        if algo != "sha256" or len(hexd) != 64 or not all(c in "0123456789abcdef" for c in hexd):
            raise LayoutError(f"not a sha256 digest: {digest!r}")
        return self.blobs / hexd

    def has_blob(self, digest: str) -> bool:
        return self.blob_path(digest).is_file()

    def intact_blob(self, digest: str, size: int | None = None) -> bool:
        """Whether the blob exists and its bytes hash to ``digest`` (and, given, are ``size`` long). A damaged
        blob is removed, so whoever needs it builds it again. Hashed once per process per digest; the size is
        compared every time."""
        with self._intact_lock:
            known = self._intact.get(digest)
        if known is not None:
            return size is None or size == known
        path = self.blob_path(digest)
        hasher, length = hashlib.sha256(), 0
        try:
            with open(path, "rb") as handle:
                for chunk in iter(lambda: handle.read(_CHUNK), b""):
                    hasher.update(chunk)
                    length += len(chunk)
        except FileNotFoundError:
            return False
        if oci_digest(hasher.hexdigest()) != digest or (size is not None and length != size):
            path.unlink(missing_ok=True)
            return False
        with self._intact_lock:
            self._intact[digest] = length
        return True

    def written(self, digest: str, size: int) -> None:
        """``digest`` names a blob this process has just written, hashing its bytes as it wrote them (a layer
        writer): it counts as hashed, so it is not read again to be reused in this process."""
        with self._intact_lock:
            self._intact[digest] = size

    def put_blob(self, data: bytes) -> str:
        digest = oci_digest(sha256_bytes(data))
        path = self.blob_path(digest)
        if not self.intact_blob(digest):
            atomic_write_bytes(path, data)
        return digest

    def read_blob(self, digest: str) -> bytes:
        try:
            return self.blob_path(digest).read_bytes()
        except FileNotFoundError:
            raise LayoutError(f"{self.root}: blob {digest} is missing") from None

    def has_index(self) -> bool:
        """Whether the folder holds an ``index.json``: a layout someone wrote (``init`` makes one)."""
        return (self.root / "index.json").is_file()

    def checked_blob(self, digest: str) -> Path:
        """The file of blob ``digest``: a regular file, never a symlink (that could lead out of the layout). Its
        bytes are the reader's to check (``read_document`` does, an unpacker as it reads)."""
        path = self.blob_path(checked_digest(digest, str(self.root)))
        if path.is_symlink() or not path.is_file():
            raise LayoutError(f"{self.root}: blob {digest} is missing")
        return path

    def read_document(self, digest: str, what: str = "blob") -> dict[str, Any]:
        """The JSON object blob ``digest`` (a manifest, an index, a config: ``what``), read at most
        ``MAX_DOCUMENT`` bytes and parsed only once those bytes hash to ``digest``."""
        with open(self.checked_blob(digest), "rb") as handle:
            data = handle.read(MAX_DOCUMENT + 1)
        if len(data) > MAX_DOCUMENT:
            raise LayoutError(f"{self.root}: {what} {digest} is larger than {MAX_DOCUMENT} bytes")
        if oci_digest(sha256_bytes(data)) != digest:
            raise LayoutError(f"{self.root}: {what} {digest} does not match its digest (tampered or damaged)")
        try:
            value = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise LayoutError(f"{self.root}: {what} {digest} is not JSON ({err})") from None
        if not isinstance(value, dict):
            raise LayoutError(f"{self.root}: {what} {digest} is not a JSON object")
        return value

    @contextmanager
    def _index_lock(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".index.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _read_index(self) -> dict[str, Any]:
        path = self.root / "index.json"
        if not path.exists():
            return self._empty_index()
        try:
            with open(path, "rb") as handle:
                raw = handle.read(MAX_DOCUMENT + 1)
            if len(raw) > MAX_DOCUMENT:
                raise ValueError(f"larger than {MAX_DOCUMENT} bytes")
            data = json.loads(raw)
        except (OSError, ValueError) as err:  # a JSON or UTF-8 decoding error is a ValueError
            raise LayoutError(f"{path}: not a readable OCI index ({err})") from None
        if not isinstance(data, dict) or not isinstance(data.get("manifests"), list):
            raise LayoutError(f"{path}: not an OCI image index")
        return data

    def entries(self) -> list[dict[str, Any]]:
        """The manifest descriptors ``index.json`` lists (those that are JSON objects), in its order."""
        return [m for m in self._read_index()["manifests"] if isinstance(m, dict)]

    def entry(self, digest: str) -> dict[str, Any] | None:
        """The first descriptor ``index.json`` lists for the manifest ``digest``; None when it lists none."""
        return next((m for m in self.entries() if m.get("digest") == digest), None)

    def find(self, ref_or_digest: str) -> str | None:
        """The manifest digest that ``index.json`` names ``ref_or_digest`` (its reference name annotation), or that
        digest itself when the index lists it; None when neither."""
        for entry in self.entries():
            found = entry.get("annotations")
            annotations: dict[str, Any] = found if isinstance(found, dict) else {}
            if entry.get("digest") == ref_or_digest or annotations.get(REF_NAME) == ref_or_digest:
                return checked_digest(entry.get("digest"), f"{self.root / 'index.json'}")
        return None

    def put_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """Store the image config ``config``; its descriptor, for ``put_manifest``."""
        body = canonical_json(config)
        return {"mediaType": MEDIA_TYPE_CONFIG, "digest": self.put_blob(body), "size": len(body)}

    def put_manifest(self, ref: str, config: dict[str, Any], layers: Sequence[LayerDescriptor],
                     annotations: dict[str, str] | None = None,
                     manifest_annotations: dict[str, str] | None = None) -> str:
        """The image manifest of the config descriptor ``config`` and ``layers`` (bottom first), stored and named
        ``ref``; its digest. ``annotations`` go on its ``index.json`` entry, ``manifest_annotations`` (when any)
        into the manifest itself, so into its digest."""
        manifest: dict[str, Any] = {"schemaVersion": 2, "mediaType": MEDIA_TYPE_MANIFEST, "config": config,
                                    "layers": [layer.as_oci() for layer in layers]}
        if manifest_annotations:
            manifest["annotations"] = dict(sorted(manifest_annotations.items()))
        return self.put_image(ref, manifest, annotations)

    def put_image(self, ref: str, manifest: dict[str, Any], annotations: dict[str, str] | None = None) -> str:
        """Store ``manifest`` and name it ``ref`` (replacing what had that name); return the manifest digest."""
        body = canonical_json(manifest)
        digest = self.put_blob(body)
        descriptor = {
            "mediaType": MEDIA_TYPE_MANIFEST, "digest": digest, "size": len(body),
            "annotations": {**(annotations or {}), REF_NAME: ref},
        }
        with self._index_lock():
            index = self._read_index()
            index["manifests"] = [m for m in index["manifests"]
                                  if m.get("annotations", {}).get(REF_NAME) != ref] + [descriptor]
            index["manifests"].sort(key=lambda m: m.get("annotations", {}).get(REF_NAME, ""))
            atomic_write_bytes(self.root / "index.json", canonical_json(index))
        return digest

    def images(self) -> list[StoredImage]:
        out = []
        for entry in self.entries():
            annotations = dict(entry.get("annotations", {}))
            ref = annotations.get(REF_NAME)
            if not ref or not self.has_blob(entry["digest"]):
                continue
            manifest = json.loads(self.read_blob(entry["digest"]))
            out.append(StoredImage(ref=ref, digest=entry["digest"], manifest=manifest, annotations=annotations))
        return out

    def image(self, ref: str) -> StoredImage | None:
        return next((i for i in self.images() if i.ref == ref), None)

    def config(self, image: StoredImage) -> dict[str, Any]:
        config: dict[str, Any] = json.loads(self.read_blob(image.config_digest))
        return config

    def blobs_of(self, image: StoredImage) -> list[str]:
        """Every blob the image needs: config, layers, and the manifest itself."""
        return [image.config_digest, *(layer["digest"] for layer in image.manifest["layers"]), image.digest]

    def missing_blobs(self, image: StoredImage) -> list[str]:
        """The image's blobs that are absent or damaged (a damaged one is removed: it is to be rebuilt)."""
        return [d for d in self.blobs_of(image) if not self.intact_blob(d)]

    def write_archive(self, images: Iterable[StoredImage], out: BinaryIO) -> None:
        """An ``oci-archive`` of ``images`` (a tar of a layout holding only them) written to ``out``: what
        ``docker load`` and ``podman load`` read from standard input."""
        images = list(images)
        index = self._empty_index()
        index["manifests"] = [{
            "mediaType": MEDIA_TYPE_MANIFEST, "digest": img.digest,
            "size": self.blob_path(img.digest).stat().st_size,
            "annotations": {REF_NAME: img.ref, CONTAINERD_NAME: img.ref},
        } for img in images]
        seen: set[str] = set()
        with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for name, data in (("oci-layout", canonical_json({"imageLayoutVersion": "1.0.0"})),
                               ("index.json", canonical_json(index))):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            for img in images:
                for digest in self.blobs_of(img):
                    if digest in seen:
                        continue
                    seen.add(digest)
                    path = self.blob_path(digest)
                    info = tarfile.TarInfo(f"blobs/sha256/{path.name}")
                    info.size = path.stat().st_size
                    with open(path, "rb") as handle:
                        tar.addfile(info, handle)

