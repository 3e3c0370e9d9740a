"""A tiny OCI image assembled here (no build): an OCI image layout directory with one gzip layer and a config
with the labels a test asks for, pushed to a registry with skopeo. Used where a test needs *an* image in a
registry, not a built cell."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _blob(layout: Path, data: bytes) -> str:
    hexdigest = hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256" / hexdigest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return f"sha256:{hexdigest}"


def hello_image(content: str, config: dict[str, object]) -> tuple[bytes, bytes]:
    """One gzip layer holding /hello.txt = ``content`` and an amd64 config (``config`` merged in) that names it:
    (the layer blob, the config blob)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        data = content.encode()
        info = tarfile.TarInfo("hello.txt")
        info.size, info.mtime = len(data), 0
        tar.addfile(info, io.BytesIO(data))
    layer_tar = raw.getvalue()
    config_blob = json.dumps({
        "architecture": "amd64", "os": "linux", **config,
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()]},
    }, sort_keys=True).encode()
    return gzip.compress(layer_tar, mtime=0), config_blob


def write_layout(layout: Path, *, labels: dict[str, str], content: str, tag: str = "latest") -> str:
    """Write an OCI layout holding one image (one file, /hello.txt = ``content``); returns the manifest digest."""
    layer, config = hello_image(content, {"created": "2025-01-01T00:00:00Z",
                                          "config": {"Cmd": ["/bin/true"], "Labels": labels}})
    layer_digest, config_digest = _blob(layout, layer), _blob(layout, config)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest,
                    "size": len(layer)}],
    }, sort_keys=True).encode()
    digest = _blob(layout, manifest)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (layout / "index.json").write_text(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": digest, "size": len(manifest),
                       "annotations": {"org.opencontainers.image.ref.name": tag}}],
    }))
    return digest


def skopeo_push(layout: Path, target: str, *, authfile: Path | None = None, tag: str = "latest") -> str:
    """``skopeo copy oci:LAYOUT:TAG docker://TARGET`` (plain HTTP, digests preserved); returns the pushed digest.
    Credentials, when needed, go through ``--dest-authfile``."""
    digestfile = layout.parent / f"{layout.name}.digest"
    auth = ["--dest-authfile", str(authfile)] if authfile else []
    proc = subprocess.run(["skopeo", "copy", "--preserve-digests", "--dest-tls-verify=false", *auth,
                           f"--digestfile={digestfile}", f"oci:{layout}:{tag}", f"docker://{target}"],
                          capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"skopeo copy to {target} failed: {proc.stderr.strip()[-500:]}")
    return digestfile.read_text().strip()


def push_cell_image(layout: Path, target: str, labels: dict[str, str], content: str, *,
                    authfile: Path | None = None) -> str:
    """Assemble an image with ``labels`` and push it to ``target`` (registry/repo:tag)."""
    expected = write_layout(layout, labels=labels, content=content)
    pushed = skopeo_push(layout, target, authfile=authfile)
    assert pushed == expected, (pushed, expected)
    return pushed


def cell_labels(cell) -> dict[str, str]:  # noqa: ANN001 - a pinmatrix Cell
    """The io.pinmatrix.* labels a built image of ``cell`` carries (src/pinmatrix/image/cellconfig.py)."""
    labels = {"io.pinmatrix.cell.id": cell.id, "io.pinmatrix.cell.stack": cell.stack,
              "io.pinmatrix.cell.name": cell.name, "io.pinmatrix.cell.python": cell.python,
              "io.pinmatrix.cell.platform": cell.platform,
              "io.pinmatrix.cell.gpu_required": str(cell.gpu_required).lower()}
    labels.update({f"io.pinmatrix.pin.{k}": str(v) for k, v in sorted(cell.pins.items())})
    return labels
