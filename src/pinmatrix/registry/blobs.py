"""Blobs as they travel to and from a registry: request bodies that can be sent again, and a reader that
checks a blob against its digest as it streams."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import BinaryIO

from pinmatrix.imageref import RegistryError

CHUNK = 1 << 20
# A request body: bytes, or a function that opens it afresh (stream, length), so it can be sent again after
# an authentication round.
Body = bytes | Callable[[], tuple[BinaryIO, int]] | None


class VerifyingReader:
    """A blob being read from the registry: hashed as it is read; reading past its end checks the digest."""

    def __init__(self, raw: BinaryIO, digest: str, where: str, length: int | None) -> None:
        self._raw, self._digest, self._where, self.length = raw, digest, where, length
        self._hash = hashlib.sha256()
        self.read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        chunk = self._raw.read(CHUNK if size is None or size < 0 else size)
        if chunk:
            self._hash.update(chunk)
            self.read_bytes += len(chunk)
            return chunk
        got = "sha256:" + self._hash.hexdigest()
        if got != self._digest:
            raise RegistryError(f"{self._where}: blob {self._digest} does not match its digest (got {got})")
        return b""

    def close(self) -> None:
        self._raw.close()
