"""Where a cell's patch file comes from: a path in the repository (``patches/...``) or a remote URL fetched
once into the cache (``<cache>/patches/<sha256>.patch``, content-addressed). Either way the bytes must have
the sha256 the matrix states; a mismatch is refused and nothing is cached."""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from pinmatrix.atomic import atomic_write_bytes
from pinmatrix.cell import CellPatch
from pinmatrix.errors import PatchError
from pinmatrix.hashing import sha256_bytes

FETCH_TIMEOUT_S = 60
MAX_PATCH_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ResolvedPatch:
    patch: CellPatch
    path: Path  # a local file with the verified bytes
    fetched: bool  # True when this call downloaded it (False: repository file or cache hit)


def is_remote(source: str) -> bool:
    return source.startswith(("http://", "https://"))




def _check(patch: CellPatch, data: bytes, where: str) -> None:
    actual = sha256_bytes(data)
    if actual != patch.sha256:
        raise PatchError(
            f"patch {patch.id}: sha256 of {where} is {actual}, the matrix says {patch.sha256}; refused"
        )


def fetch(url: str, timeout: float = FETCH_TIMEOUT_S) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "pinmatrix"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            data: bytes = response.read(MAX_PATCH_BYTES + 1)
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise PatchError(f"cannot fetch patch {url}: {reason}") from None
    if len(data) > MAX_PATCH_BYTES:
        raise PatchError(f"patch {url} is larger than {MAX_PATCH_BYTES} bytes; refused")
    return data


def resolve_patch(patch: CellPatch, root: Path, cache_dir: Path) -> ResolvedPatch:
    """The verified local file of ``patch``. Remote sources are fetched at most once per sha256."""
    if not patch.source:
        raise PatchError(f"patch {patch.id} ({patch.package} {patch.version}) has no source to apply")
    if not patch.sha256:
        raise PatchError(f"patch {patch.id}: no sha256 in the matrix; refusing to apply {patch.source}")
    if not is_remote(patch.source):
        path = (root / patch.source).resolve()
        if not path.is_file():
            raise PatchError(f"patch {patch.id}: {patch.source} does not exist")
        _check(patch, path.read_bytes(), patch.source)
        return ResolvedPatch(patch, path, fetched=False)
    cached = cache_dir / "patches" / f"{patch.sha256}.patch"
    if cached.is_file() and sha256_bytes(cached.read_bytes()) == patch.sha256:
        return ResolvedPatch(patch, cached, fetched=False)
    data = fetch(patch.source)
    _check(patch, data, patch.source)
    atomic_write_bytes(cached, data)
    return ResolvedPatch(patch, cached, fetched=True)
