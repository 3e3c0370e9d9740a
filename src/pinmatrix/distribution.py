"""A small client for the OCI distribution (Docker registry v2) HTTP API: what promotion and attestation
need and nothing more. Copy an image by digest between repositories (cross-repository blob mount, then
the manifest under its digest and tags), push a small artifact, list referrers.

Every manifest fetched by digest is checked against that digest here, so a registry (or a tag moved
between two calls) cannot hand back other content than the digest names. Anonymous access only: the local
registry (Debian's docker-registry) needs none; HTTP for loopback hosts, HTTPS elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from pinmatrix.errors import PinmatrixError

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
MANIFEST_TYPES = (OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST)
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)

_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")


class RegistryError(PinmatrixError):
    """The registry refused a request, is unreachable, or served content that does not match its digest."""


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def is_digest(text: str | None) -> bool:
    return bool(text) and bool(_DIGEST_RE.match(text or ""))


@dataclass(frozen=True)
class ImageRef:
    """registry/repository[:tag][@digest]. The registry part is required (there is no default registry)."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        rest, _, digest = text.partition("@")
        if digest and not is_digest(digest):
            raise RegistryError(f"{text!r}: digest must be sha256:<64 hex>")
        host, slash, path = rest.partition("/")
        if not slash or not path or not ("." in host or ":" in host or host == "localhost"):
            raise RegistryError(f"{text!r}: expected registry/repository[:tag][@sha256:...], e.g. 127.0.0.1:5000/pinmatrix/demo")
        tag = None
        if ":" in path.rsplit("/", 1)[-1]:
            path, _, tag = path.rpartition(":")
            if not _TAG_RE.match(tag):
                raise RegistryError(f"{text!r}: bad tag {tag!r}")
        if not re.fullmatch(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*", path):
            raise RegistryError(f"{text!r}: bad repository name {path!r} (lowercase, digits, '._-/')")
        return cls(host, path, tag or None, digest or None)

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}"

    def with_digest(self, digest: str) -> ImageRef:
        return ImageRef(self.registry, self.repository, None, digest)

    def with_tag(self, tag: str) -> ImageRef:
        return ImageRef(self.registry, self.repository, tag, None)

    @property
    def reference(self) -> str:
        """What the registry API calls the reference: the digest when there is one, else the tag."""
        return self.digest or self.tag or "latest"

    def __str__(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


@dataclass(frozen=True)
class Manifest:
    body: bytes
    media_type: str
    digest: str

    @property
    def json(self) -> dict[str, Any]:
        return dict(json.loads(self.body))


class Registry:
    """One registry host. ``insecure`` (plain HTTP) defaults to True for loopback hosts only."""

    def __init__(self, host: str, *, insecure: bool | None = None, timeout: float = 60.0) -> None:
        self.host = host
        if insecure is None:
            hostname = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
            insecure = hostname in ("localhost", "::1", "[::1]") or hostname.startswith("127.")
        self.base = f"{'http' if insecure else 'https'}://{host}"
        self.timeout = timeout

    # -- plumbing ------------------------------------------------------------------------------------
    def _request(self, method: str, url: str, *, headers: dict[str, str] | None = None,
                 data: bytes | None = None, ok: tuple[int, ...] = (200,)) -> tuple[int, dict[str, str], bytes]:
        if url.startswith("/"):
            url = self.base + url
        req = urllib.request.Request(url, method=method, data=data, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                status, hdrs, body = resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
        except urllib.error.HTTPError as err:
            status, hdrs, body = err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()
        except (urllib.error.URLError, OSError) as err:
            raise RegistryError(f"registry {self.host} unreachable: {getattr(err, 'reason', err)}") from None
        if status not in ok:
            detail = ""
            try:
                errors = json.loads(body).get("errors") or []
                detail = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors)
            except (ValueError, AttributeError):
                detail = body[:200].decode("utf-8", "replace")
            raise RegistryError(f"{method} {url.replace(self.base, self.host)}: HTTP {status} {detail}".rstrip())
        return status, hdrs, body

    def ping(self) -> bool:
        try:
            self._request("GET", "/v2/")
            return True
        except RegistryError:
            return False

    # -- manifests -----------------------------------------------------------------------------------
    def get_manifest(self, repository: str, reference: str) -> Manifest | None:
        """The manifest at a tag or digest, or None when there is none. By digest, the body is verified."""
        try:
            _, hdrs, body = self._request("GET", f"/v2/{repository}/manifests/{reference}",
                                          headers={"Accept": ", ".join(MANIFEST_TYPES)})
        except RegistryError as err:
            if "HTTP 404" in str(err):
                return None
            raise
        digest = sha256_digest(body)
        if is_digest(reference) and digest != reference:
            raise RegistryError(f"{self.host}/{repository}@{reference}: registry served content with digest {digest}")
        media_type = hdrs.get("content-type", "").split(";")[0].strip()
        if media_type not in MANIFEST_TYPES:
            media_type = json.loads(body).get("mediaType") or OCI_MANIFEST
        return Manifest(body=body, media_type=media_type, digest=digest)

    def resolve(self, ref: ImageRef) -> str | None:
        """The digest a tag (or digest) currently names, or None when it does not exist."""
        m = self.get_manifest(ref.repository, ref.reference)
        return m.digest if m else None

    def put_manifest(self, repository: str, reference: str, manifest: Manifest) -> str:
        _, hdrs, _ = self._request("PUT", f"/v2/{repository}/manifests/{reference}", data=manifest.body,
                                   headers={"Content-Type": manifest.media_type}, ok=(201,))
        served = hdrs.get("docker-content-digest")
        if served and served != manifest.digest:
            raise RegistryError(f"{self.host}/{repository}: stored manifest as {served}, expected {manifest.digest}")
        return manifest.digest

    def tags(self, repository: str) -> list[str]:
        try:
            _, _, body = self._request("GET", f"/v2/{repository}/tags/list")
        except RegistryError as err:
            if "HTTP 404" in str(err):
                return []
            raise
        return sorted(json.loads(body).get("tags") or [])

    # -- blobs ---------------------------------------------------------------------------------------
    def has_blob(self, repository: str, digest: str) -> bool:
        try:
            self._request("HEAD", f"/v2/{repository}/blobs/{digest}")
            return True
        except RegistryError as err:
            if "HTTP 404" in str(err):
                return False
            raise

    def get_blob(self, repository: str, digest: str) -> bytes:
        _, _, body = self._request("GET", f"/v2/{repository}/blobs/{digest}")
        if sha256_digest(body) != digest:
            raise RegistryError(f"{self.host}/{repository}: blob {digest} does not match its digest")
        return body

    def push_blob(self, repository: str, data: bytes) -> str:
        digest = sha256_digest(data)
        if self.has_blob(repository, digest):
            return digest
        _, hdrs, _ = self._request("POST", f"/v2/{repository}/blobs/uploads/", ok=(202,))
        location = urllib.parse.urljoin(self.base + "/", hdrs["location"])
        sep = "&" if "?" in location else "?"
        self._request("PUT", f"{location}{sep}digest={urllib.parse.quote(digest)}", data=data,
                      headers={"Content-Type": "application/octet-stream"}, ok=(201,))
        return digest

    def mount_blob(self, repository: str, digest: str, from_repository: str) -> None:
        """Make ``digest`` available in ``repository``: a cross-repository mount, or a copy when the
        registry answers the mount request with an upload session instead."""
        if self.has_blob(repository, digest):
            return
        status, hdrs, _ = self._request(
            "POST", f"/v2/{repository}/blobs/uploads/?mount={urllib.parse.quote(digest)}&from={urllib.parse.quote(from_repository)}",
            ok=(201, 202))
        if status == 201:
            return
        data = self.get_blob(from_repository, digest)
        location = urllib.parse.urljoin(self.base + "/", hdrs["location"])
        sep = "&" if "?" in location else "?"
        self._request("PUT", f"{location}{sep}digest={urllib.parse.quote(digest)}", data=data,
                      headers={"Content-Type": "application/octet-stream"}, ok=(201,))

    # -- copy ----------------------------------------------------------------------------------------
    def copy(self, src: ImageRef, dst_repository: str, tags: list[str]) -> str:
        """Copy the image ``src`` names by its digest (required) into ``dst_repository`` within this
        registry, blobs first, then the manifest under its digest, then each tag. Returns the digest."""
        if not src.digest:
            raise RegistryError(f"{src}: copying needs a digest, not a tag")
        manifest = self.get_manifest(src.repository, src.digest)
        if manifest is None:
            raise RegistryError(f"{src}: no such manifest")
        self._copy_manifest(src.repository, dst_repository, manifest)
        for tag in tags:
            self.put_manifest(dst_repository, tag, manifest)
            if self.resolve(ImageRef(self.host, dst_repository, tag)) != manifest.digest:
                raise RegistryError(f"{self.host}/{dst_repository}:{tag} does not name {manifest.digest} after the copy")
        return manifest.digest

    def _copy_manifest(self, src_repo: str, dst_repo: str, manifest: Manifest) -> None:
        doc = manifest.json
        if manifest.media_type in INDEX_TYPES:
            for child in doc.get("manifests", []):
                sub = self.get_manifest(src_repo, child["digest"])
                if sub is None:
                    raise RegistryError(f"{self.host}/{src_repo}: index names missing manifest {child['digest']}")
                self._copy_manifest(src_repo, dst_repo, sub)
        else:
            for desc in [doc.get("config")] + list(doc.get("layers", [])):
                if desc and desc.get("digest"):
                    self.mount_blob(dst_repo, desc["digest"], src_repo)
        self.put_manifest(dst_repo, manifest.digest, manifest)

    # -- referrers -----------------------------------------------------------------------------------
    def supports_referrers_api(self, repository: str, digest: str) -> bool:
        try:
            _, hdrs, _ = self._request("GET", f"/v2/{repository}/referrers/{digest}")
        except RegistryError:
            return False
        return hdrs.get("content-type", "").startswith(OCI_INDEX)

    def referrers(self, repository: str, digest: str, artifact_type: str | None = None) -> list[dict[str, Any]]:
        """Descriptors of the artifacts whose ``subject`` is ``digest``: from the referrers API when the
        registry has it, else from the referrers tag schema (tag ``sha256-<hex>`` holding an index)."""
        docs: list[dict[str, Any]] = []
        if self.supports_referrers_api(repository, digest):
            _, _, body = self._request("GET", f"/v2/{repository}/referrers/{digest}")
            docs = list(json.loads(body).get("manifests") or [])
        else:
            index = self.get_manifest(repository, referrers_tag(digest))
            if index is not None:
                docs = list(index.json.get("manifests") or [])
        if artifact_type:
            docs = [d for d in docs if d.get("artifactType") == artifact_type]
        return docs

    def push_artifact(self, repository: str, subject: Manifest, *, artifact_type: str, payload: bytes,
                      payload_media_type: str, annotations: dict[str, str] | None = None) -> str:
        """Push an OCI 1.1 artifact manifest whose ``subject`` is ``subject`` and record it as a referrer
        (through the registry's referrers API, or the tag schema fallback for registries without it).
        Returns the artifact manifest's digest."""
        empty = b"{}"
        self.push_blob(repository, empty)
        layer_digest = self.push_blob(repository, payload)
        doc: dict[str, Any] = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": artifact_type,
            "config": {"mediaType": OCI_EMPTY, "digest": sha256_digest(empty), "size": len(empty)},
            "layers": [{"mediaType": payload_media_type, "digest": layer_digest, "size": len(payload)}],
            "subject": {"mediaType": subject.media_type, "digest": subject.digest, "size": len(subject.body)},
        }
        if annotations:
            doc["annotations"] = dict(annotations)
        body = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        artifact = Manifest(body=body, media_type=OCI_MANIFEST, digest=sha256_digest(body))
        self.put_manifest(repository, artifact.digest, artifact)
        if not self.supports_referrers_api(repository, subject.digest):
            self._add_to_referrers_tag(repository, subject.digest, {
                "mediaType": OCI_MANIFEST, "digest": artifact.digest, "size": len(body),
                "artifactType": artifact_type, **({"annotations": dict(annotations)} if annotations else {}),
            })
        return artifact.digest

    def _add_to_referrers_tag(self, repository: str, subject_digest: str, descriptor: dict[str, Any]) -> None:
        tag = referrers_tag(subject_digest)
        current = self.get_manifest(repository, tag)
        manifests = list(current.json.get("manifests") or []) if current else []
        if any(m.get("digest") == descriptor["digest"] for m in manifests):
            return
        manifests.append(descriptor)
        body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests},
                          sort_keys=True, separators=(",", ":")).encode()
        self.put_manifest(repository, tag, Manifest(body=body, media_type=OCI_INDEX, digest=sha256_digest(body)))


def referrers_tag(digest: str) -> str:
    """The OCI 1.1 referrers tag schema: ``sha256:abc...`` -> ``sha256-abc...``."""
    alg, _, hexpart = digest.partition(":")
    return f"{alg}-{hexpart}"
