"""sha256 helpers for whole files, bytes and ``sha256:`` digests. Code that hashes as it streams (layers
as they are written, blobs as they are read, wheel members) keeps its own ``hashlib`` object in place."""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK = 1 << 20


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def oci_digest(hexdigest: str) -> str:
    """``sha256:<hex>``, the form OCI descriptors use."""
    return f"sha256:{hexdigest}"


def sha256_digest(data: bytes) -> str:
    """``sha256:<hex>`` of ``data``: an OCI descriptor's digest."""
    return oci_digest(sha256_bytes(data))
