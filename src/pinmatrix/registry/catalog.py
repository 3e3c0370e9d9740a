"""What the benchmarks read from a whole registry on top of the API client
(``pinmatrix.registry.client``): bytes stored against image sizes, and retagging by digest with skopeo
(credentials passed with ``--authfile``)."""

from __future__ import annotations

from dataclasses import dataclass

from pinmatrix.registry.client import Registry


@dataclass(frozen=True)
class StorageStats:
    images: int
    blobs: int
    stored_bytes: int  # each distinct blob once: what the registry keeps
    image_bytes: int  # every image's config + layers summed: what it would keep without sharing

    @property
    def sharing_ratio(self) -> float:
        return self.image_bytes / self.stored_bytes if self.stored_bytes else 0.0


def storage_stats(registry: Registry, repositories: list[str] | None = None) -> StorageStats:
    """Bytes the registry stores (distinct blobs) against the sum of its images' sizes."""
    repos = registry.repositories() if repositories is None else repositories
    seen_manifests: set[str] = set()
    blobs: dict[str, int] = {}
    image_bytes = 0
    for repo in repos:
        for tag in registry.tags(repo):
            found = registry.get_manifest(repo, tag)
            if found is None or found.digest in seen_manifests:
                continue
            manifest = found.json
            if "config" not in manifest:
                continue
            seen_manifests.add(found.digest)
            for part in [manifest["config"], *manifest.get("layers", [])]:
                blobs[part["digest"]] = int(part["size"])
                image_bytes += int(part["size"])
    return StorageStats(len(seen_manifests), len(blobs), sum(blobs.values()), image_bytes)
