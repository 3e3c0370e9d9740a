"""A Docker/OCI distribution registry (Debian's docker-registry in tests) seen through its HTTP API: manifest
digests, image labels, stored bytes; and retagging by digest with skopeo. Pushing and pulling go through the
engine (``OCIEngine.push`` returns the digest; ``pull`` takes ``repo@sha256:...``)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from pinmatrix.errors import PinmatrixError

MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
TIMEOUT_S = 30


class RegistryError(PinmatrixError):
    """The registry cannot be reached or answered something unexpected."""


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


class Registry:
    """The registry at ``host`` ("127.0.0.1:5000"); plain HTTP for loopback hosts unless ``tls_verify``."""

    def __init__(self, host: str, *, tls_verify: bool | None = None) -> None:
        self.host = host
        self.tls_verify = (not is_local_host(host)) if tls_verify is None else tls_verify
        self.base_url = f"{'https' if self.tls_verify else 'http'}://{host}/v2"

    @classmethod
    def from_setting(cls, registry: str) -> Registry:
        """From matrix.registry ("127.0.0.1:5000/pinmatrix": the host is the part before the first '/')."""
        return cls(registry.split("/", 1)[0])

    # ------------------------------------------------------------------------------------------- HTTP
    def _request(self, path: str, *, method: str = "GET", accept: tuple[str, ...] = ()) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(f"{self.base_url}/{path}", method=method)
        if accept:
            request.add_header("Accept", ", ".join(accept))
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                return response.status, dict(response.headers.items()), response.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers.items()), err.read()
        except (urllib.error.URLError, OSError) as err:
            raise RegistryError(f"registry {self.host} is not reachable: {getattr(err, 'reason', err)}") from None

    def ping(self) -> bool:
        try:
            status, _, _ = self._request("")
        except RegistryError:
            return False
        return status in (200, 401)

    def manifest(self, repository: str, reference: str) -> tuple[str, dict[str, Any]] | None:
        status, headers, body = self._request(f"{repository}/manifests/{reference}", accept=MANIFEST_TYPES)
        if status == 404:
            return None
        if status != 200:
            raise RegistryError(f"registry {self.host}: manifest {repository}:{reference} answered HTTP {status}")
        digest = headers.get("Docker-Content-Digest") or f"sha256:{hashlib.sha256(body).hexdigest()}"
        return digest, json.loads(body)

    def manifest_digest(self, repository: str, reference: str) -> str | None:
        found = self.manifest(repository, reference)
        return found[0] if found else None

    def config(self, repository: str, reference: str) -> dict[str, Any]:
        found = self.manifest(repository, reference)
        if found is None:
            raise RegistryError(f"registry {self.host}: no image {repository}:{reference}")
        manifest = found[1]
        if "config" not in manifest:
            raise RegistryError(f"registry {self.host}: {repository}:{reference} is an index, not one image")
        status, _, body = self._request(f"{repository}/blobs/{manifest['config']['digest']}")
        if status != 200:
            raise RegistryError(f"registry {self.host}: config blob of {repository}:{reference} answered HTTP {status}")
        return json.loads(body)

    def labels(self, repository: str, reference: str) -> dict[str, str]:
        return dict((self.config(repository, reference).get("config") or {}).get("Labels") or {})

    def repositories(self) -> list[str]:
        """Every repository, following the catalog's pagination (at most 1000 names a page)."""
        names: list[str] = []
        last = ""
        while True:
            query = "_catalog?n=1000" + (f"&last={urllib.parse.quote(last)}" if last else "")
            status, headers, body = self._request(query)
            if status != 200:
                raise RegistryError(f"registry {self.host}: catalog answered HTTP {status}")
            page = list(json.loads(body).get("repositories") or [])
            names.extend(page)
            if not page or "next" not in headers.get("Link", ""):
                return names
            last = page[-1]

    def tags(self, repository: str) -> list[str]:
        status, _, body = self._request(f"{repository}/tags/list")
        if status == 404:
            return []
        if status != 200:
            raise RegistryError(f"registry {self.host}: tags of {repository} answered HTTP {status}")
        return sorted(json.loads(body).get("tags") or [])

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
    def copy(self, source: str, target: str) -> str:
        """``skopeo copy`` between two references of this registry (e.g. retag a digest as known-good);
        returns the digest of the copy, which equals the source's when the manifest is carried over unchanged."""
        skopeo = shutil.which("skopeo")
        if skopeo is None:
            raise RegistryError("skopeo is not installed (apt-get install skopeo)")
        tls = str(self.tls_verify).lower()
        proc = subprocess.run(
            [skopeo, "copy", "--preserve-digests", f"--src-tls-verify={tls}", f"--dest-tls-verify={tls}",
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
