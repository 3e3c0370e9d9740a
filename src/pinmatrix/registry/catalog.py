"""What building and benchmarks need from a registry, on top of the distribution API client
(``pinmatrix.registry.client``, which also does the authentication): image labels, the catalog, stored bytes
against image sizes, and retagging by digest with skopeo (credentials passed with ``--authfile``). Pushing and
pulling go through the engine (``OCIEngine.push`` returns the digest; ``pull`` takes ``repo@sha256:...``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
from dataclasses import dataclass
from typing import Any

from pinmatrix.registry.client import Registry as DistributionRegistry
from pinmatrix.registry.client import RegistryError

__all__ = ["Registry", "RegistryError", "StorageStats", "is_local_host", "split_ref"]
TIMEOUT_S = 30


def split_ref(ref: str) -> tuple[str, str, str]:
    """"host:port/repo/name:tag" or "...@sha256:..." -> (host, repository, tag or digest)."""
    name, reference = (ref.split("@", 1) if "@" in ref else (ref, ""))
    if not reference:
        slash = name.rfind("/")
        colon = name.rfind(":")
        if colon > slash:
            name, reference = name[:colon], name[colon + 1 :]
        else:
            reference = "latest"
    host, _, repository = name.partition("/")
    if not repository or ("." not in host and ":" not in host and host != "localhost"):
        raise RegistryError(f"image reference {ref!r} names no registry host")
    return host, repository, reference


def is_local_host(host: str) -> bool:
    bare = host.rsplit(":", 1)[0]
    return bare in {"localhost", "::1"} or bare.startswith("127.")


@dataclass(frozen=True)
class StorageStats:
    images: int
    blobs: int
    stored_bytes: int  # each distinct blob once: what the registry keeps
    image_bytes: int  # every image's config + layers summed: what it would keep without sharing

    @property
    def sharing_ratio(self) -> float:
        return self.image_bytes / self.stored_bytes if self.stored_bytes else 0.0


class Registry(DistributionRegistry):
    """The registry at ``host`` ("127.0.0.1:5000"); plain HTTP for loopback hosts unless ``tls_verify``."""

    def __init__(self, host: str, *, tls_verify: bool | None = None) -> None:
        self.tls_verify = (not is_local_host(host)) if tls_verify is None else tls_verify
        super().__init__(host, insecure=not self.tls_verify, timeout=TIMEOUT_S)

    @classmethod
    def from_setting(cls, registry: str) -> Registry:
        """From matrix.registry ("127.0.0.1:5000/pinmatrix": the host is the part before the first '/')."""
        return cls(registry.split("/", 1)[0])

    def manifest(self, repository: str, reference: str) -> tuple[str, dict[str, Any]] | None:
        found = self.get_manifest(repository, reference)
        return (found.digest, found.json) if found else None

    def manifest_digest(self, repository: str, reference: str) -> str | None:
        found = self.get_manifest(repository, reference)
        return found.digest if found else None

    def config(self, repository: str, reference: str) -> dict[str, Any]:
        found = self.manifest(repository, reference)
        if found is None:
            raise RegistryError(f"registry {self.host}: no image {repository}:{reference}")
        manifest = found[1]
        if "config" not in manifest:
            raise RegistryError(f"registry {self.host}: {repository}:{reference} is an index, not one image")
        return json.loads(self.get_blob(repository, manifest["config"]["digest"]))

    def labels(self, repository: str, reference: str) -> dict[str, str]:
        return dict((self.config(repository, reference).get("config") or {}).get("Labels") or {})

    def repositories(self) -> list[str]:
        """Every repository, following the catalog's pagination (at most 1000 names a page)."""
        names: list[str] = []
        last = ""
        while True:
            query = "/v2/_catalog?n=1000" + (f"&last={urllib.parse.quote(last)}" if last else "")
            _, headers, body = self._request("GET", query)
            page = list(json.loads(body).get("repositories") or [])
            names.extend(page)
            if not page or "next" not in headers.get("link", ""):
                return names
            last = page[-1]

    def storage(self, repositories: list[str] | None = None) -> StorageStats:
        """Bytes the registry stores (distinct blobs) against the sum of its images' sizes."""
        repos = self.repositories() if repositories is None else repositories
        seen_manifests: set[str] = set()
        blobs: dict[str, int] = {}
        image_bytes = 0
        for repo in repos:
            for tag in self.tags(repo):
                found = self.manifest(repo, tag)
                if found is None or "config" not in found[1] or found[0] in seen_manifests:
                    continue
                seen_manifests.add(found[0])
                parts = [found[1]["config"], *found[1].get("layers", [])]
                for part in parts:
                    blobs[part["digest"]] = int(part["size"])
                    image_bytes += int(part["size"])
        return StorageStats(len(seen_manifests), len(blobs), sum(blobs.values()), image_bytes)

    # ----------------------------------------------------------------------------------------- skopeo
    def skopeo_copy(self, source: str, target: str) -> str:
        """``skopeo copy`` between two references of this registry (e.g. retag a digest as known-good);
        returns the digest of the copy, which equals the source's when the manifest is carried over unchanged."""
        skopeo = shutil.which("skopeo")
        if skopeo is None:
            raise RegistryError("skopeo is not installed (apt-get install skopeo)")
        tls = str(self.tls_verify).lower()
        _, repository, _ = split_ref(target)
        creds = self.credentials(repository)
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
        _, repository, reference = split_ref(target)
        digest = self.manifest_digest(repository, reference)
        if digest is None:
            raise RegistryError(f"skopeo copy left no {target}")
        return digest
