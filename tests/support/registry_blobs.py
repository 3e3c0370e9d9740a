"""Blob transfers between a file and a registry that only the tests make: a blob streamed into a file (replaced
only once its digest checked out) and a file pushed as a blob, streamed. pinmatrix itself moves blobs between
layouts and registries (``Registry.open_blob``, ``push_blob_as``), never through a loose file."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pinmatrix.registry import blobs
from pinmatrix.registry.client import Registry


def download_blob(registry: Registry, repository: str, digest: str, dest: Path) -> int:
    """Stream a blob into ``dest`` (replaced only once its digest checked out). Returns its size."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    try:
        with registry.open_blob(repository, digest) as reader, open(tmp, "wb") as out:
            for chunk in iter(reader.read, b""):
                out.write(chunk)
            size = reader.read_bytes
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return size


def push_blob_file(registry: Registry, repository: str, path: Path) -> str:
    """Upload a file as a blob, streamed (hashed first in CHUNK-sized reads, then sent as it is read)."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(blobs.CHUNK), b""):
            digest.update(chunk)
            size += len(chunk)
    name = "sha256:" + digest.hexdigest()
    registry.push_blob_as(repository, name, lambda: (open(path, "rb"), size))
    return name
