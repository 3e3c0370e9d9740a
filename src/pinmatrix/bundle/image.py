"""An image as a bundle: the blobs of one manifest (or index) digest in an OCI layout (as ``pinmatrix build
--engine none`` writes it; its documents read through oci/layout.py's checked reader), each checked against its
digest, less the blobs the host lists as present, packed into parts."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from securesystemslib.signer import CryptoSigner

from pinmatrix import __version__
from pinmatrix.bundle.model import BlobItem, BundledImage, BundleManifest
from pinmatrix.bundle.pack import BundleError, Say, check_out, publish, staging_folder, write_parts
from pinmatrix.hashing import oci_digest, sha256_file
from pinmatrix.image.cellconfig import LOCK_LABEL
from pinmatrix.oci.layout import MEDIA_TYPE_MANIFEST, REF_NAME, LayoutError, OCILayout
from pinmatrix.oci.manifest import INDEX_TYPES, MANIFEST_TYPES, child_descriptors
from pinmatrix.sizes import read_capped

MAX_HOST_HAS = 16 << 20
MAX_BLOBS = 20000
_DIGEST = re.compile(r"^(?:sha256:)?([0-9a-f]{64})$")
_CELL_LABEL = "io.pinmatrix.cell.id"


def read_host_has(path: Path) -> set[str]:
    """Digests a host has, one a line: ``sha256:<hex>`` or the bare hex (what ``ls blobs/sha256`` prints);
    blank lines and ``#`` comments are skipped, anything else is refused with its line number."""
    raw = read_capped(path, MAX_HOST_HAS, "the host's blob list", BundleError)
    found: set[str] = set()
    for number, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        m = _DIGEST.match(text)
        if not m:
            raise BundleError(f"{path}:{number}: not a sha256 digest: {text[:80]!r}")
        found.add(oci_digest(m.group(1)))
    return found


def _children(doc: dict[str, Any], digest: str) -> list[tuple[str, str, int]]:
    """(digest, media type, size) of the descriptors a manifest or index names."""
    out = []
    for d in child_descriptors(doc):
        if not (isinstance(d, dict) and isinstance(d.get("digest"), str) and isinstance(d.get("size"), int)
                and isinstance(d.get("mediaType"), str)):
            raise BundleError(f"{digest}: a descriptor without digest, size and mediaType")
        out.append((d["digest"], d["mediaType"], d["size"]))
    return out


def image_blobs(layout: OCILayout, digest: str) -> tuple[BundledImage, list[tuple[str, str, int]],
                                                        tuple[str | None, str | None]]:
    """The image (its descriptor), every blob it needs in order (manifests first, then config and layers, each
    once), and the cell id and lock sha256 its config names (labels)."""
    if not _DIGEST.match(digest) or not digest.startswith("sha256:"):
        raise BundleError(f"--digest {digest!r}: expected sha256:<64 hex digits>")
    entry = layout.entry(digest)
    if not layout.has_blob(digest):
        raise BundleError(f"{layout.root}: no blob {digest} (the image's manifest digest, as `pinmatrix build "
                          "--json` prints it)")
    doc = layout.read_document(digest, "image manifest or index")
    media_type = str((entry or {}).get("mediaType") or doc.get("mediaType") or MEDIA_TYPE_MANIFEST)
    ref = ((entry or {}).get("annotations") or {}).get(REF_NAME)
    image = BundledImage(digest=digest, media_type=media_type, size=layout.blob_path(digest).stat().st_size,
                         ref=ref if isinstance(ref, str) else None)
    blobs: list[tuple[str, str, int]] = [(digest, media_type, image.size)]
    cell_id = lock_sha = None
    todo = [(digest, media_type)]
    while todo:
        current, kind = todo.pop(0)
        if kind not in INDEX_TYPES + MANIFEST_TYPES:
            continue
        doc = layout.read_document(current, "image manifest or index")
        for child, child_type, size in _children(doc, current):
            if child in {b[0] for b in blobs}:
                continue
            if len(blobs) >= MAX_BLOBS:
                raise BundleError(f"{digest}: more than {MAX_BLOBS} blobs")
            blobs.append((child, child_type, size))
            todo.append((child, child_type))
            if child_type.endswith("config.v1+json") and layout.has_blob(child) and cell_id is None:
                labels = (layout.read_document(child, "config").get("config") or {}).get("Labels") or {}
                found, lock = labels.get(_CELL_LABEL), labels.get(LOCK_LABEL)
                cell_id = found if isinstance(found, str) and re.fullmatch(r"[0-9a-f]{12}", found) else None
                lock_sha = lock if isinstance(lock, str) and re.fullmatch(r"[0-9a-f]{64}", lock) else None
    return image, blobs, (cell_id, lock_sha)


@dataclass(frozen=True)
class ImageRequest:
    layout: Path
    digest: str
    host_has: frozenset[str]
    part_size: int
    out: Path
    signer: CryptoSigner | None = None  # the project's signing key: the bundle carries manifest.dsse.json


def bundle_image(request: ImageRequest, say: Say) -> BundleManifest:
    check_out(request.out)
    if not (request.layout / "oci-layout").is_file():
        raise BundleError(f"{request.layout}: not an OCI layout (no oci-layout file)")
    layout = OCILayout(request.layout)
    try:
        image, blobs, (cell_id, lock_sha) = image_blobs(layout, request.digest)
    except LayoutError as err:
        raise BundleError(str(err)) from None
    items, files, offset = [], [], 0
    for digest, media_type, size in blobs:
        if digest in request.host_has:
            items.append(BlobItem(digest=digest, media_type=media_type, size=size))
            continue
        path = layout.blob_path(digest)
        if not path.is_file():
            raise BundleError(f"{request.layout}: blob {digest} of image {request.digest} is missing")
        found = path.stat().st_size
        if found != size or oci_digest(sha256_file(path)) != digest:
            raise BundleError(f"{request.layout}: blob {digest} does not match its digest or size ({found} bytes, "
                              f"the manifest says {size}): refused")
        items.append(BlobItem(digest=digest, media_type=media_type, size=size, offset=offset))
        files.append(path)
        offset += size
    shipped = len(files)
    say(f"image {request.digest}: {len(blobs)} blob(s), {shipped} shipped ({offset} bytes), "
        f"{len(blobs) - shipped} the host has")
    folder = staging_folder(request.out)
    try:
        parts = write_parts(files, request.part_size, folder, say)
        manifest = BundleManifest(kind="image", pinmatrix_version=__version__, cell_id=cell_id, lock_sha256=lock_sha,
                                  image=image, blobs=items, part_size=request.part_size, total_size=offset,
                                  parts=parts)
        publish(manifest, folder, request.out.absolute(), {}, request.signer)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return manifest
