"""What building and benchmarks read from a whole registry on top of the API client
(``pinmatrix.registry.client``): bytes stored against image sizes, and retagging by digest with skopeo
(credentials passed with ``--authfile``)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from pinmatrix.imageref import ImageRef, RegistryError
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


def skopeo_copy(registry: Registry, source: str, target: str) -> str:
    """``skopeo copy`` between two references of one registry (e.g. retag a digest as known-good); returns the
    digest of the copy, which equals the source's when the manifest is carried over unchanged."""
    skopeo = shutil.which("skopeo")
    if skopeo is None:
        raise RegistryError("skopeo is not installed (apt-get install skopeo)")
    tls = str(registry.tls_verify).lower()
    dest = ImageRef.parse(target)
    creds = registry.credentials(dest.repository)
    # credentials reach skopeo through the file they came from (--authfile), never as a command-line password
    auth = ["--authfile", str(creds.source)] if creds is not None else []
    proc = subprocess.run(
        [skopeo, "copy", *auth, "--preserve-digests", f"--src-tls-verify={tls}", f"--dest-tls-verify={tls}",
         f"docker://{source}", f"docker://{target}"],
        capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        last = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["no output"]
        raise RegistryError(f"skopeo copy {source} -> {target} failed: {last[0]}")
    digest = registry.manifest_digest(dest.repository, dest.reference)
    if digest is None:
        raise RegistryError(f"skopeo copy left no {target}")
    return digest
