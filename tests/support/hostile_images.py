"""Images written member by member into an OCI layout, for the tests of the unpacker and of the image runtimes:
any tar member a hostile image may hold (setuid programs, device nodes, FIFOs, links), on top of another image of
the layout, with any image config (User, WorkingDir, Env)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

GZ = "application/vnd.oci.image.layer.v1.tar+gzip"
KINDS = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE,
         "chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE, "fifo": tarfile.FIFOTYPE}


def member(name: str, kind: str = "file", data: bytes = b"", mode: int = 0o644, link: str = "", uid: int = 0,
           gid: int = 0, dev: tuple[int, int] = (0, 0)) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = KINDS[kind]
    info.mode, info.linkname, info.uid, info.gid, info.mtime = mode, link, uid, gid, 1735689600
    info.devmajor, info.devminor = dev
    info.size = len(data) if kind == "file" else 0
    return info, data


def layer(entries: Iterable[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    """A gzip tar layer of ``entries``."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return gzip.compress(raw.getvalue(), mtime=0)


def _put(layout: Path, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256" / digest[7:]
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_bytes(data)
    return digest


def add_image(layout: Path, ref: str, layers: list[bytes], *, base: str | None = None,
              config: dict[str, Any] | None = None, media: str = GZ) -> str:
    """An image in ``layout``: ``base``'s layers and config (a manifest digest there) plus ``layers``; the config's
    ``config`` keys replaced by ``config``. Returns the manifest digest, named ``ref`` in index.json."""
    blobs = layout / "blobs" / "sha256"
    descriptors: list[dict[str, Any]] = []
    image_config: dict[str, Any] = {"architecture": "amd64", "os": "linux", "config": {}, "rootfs": {"diff_ids": []}}
    if base is not None:
        manifest = json.loads((blobs / base[7:]).read_bytes())
        descriptors = list(manifest["layers"])
        image_config = json.loads((blobs / manifest["config"]["digest"][7:]).read_bytes())
    for data in layers:
        descriptors.append({"mediaType": media, "digest": _put(layout, data), "size": len(data)})
    image_config = {**image_config, "config": {**image_config.get("config", {}), **(config or {})}}
    config_blob = json.dumps(image_config, sort_keys=True).encode()
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": _put(layout, config_blob), "size": len(config_blob)},
                "layers": descriptors}
    body = json.dumps(manifest, sort_keys=True).encode()
    digest = _put(layout, body)
    index_path = layout / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"schemaVersion": 2, "manifests": []}
    index["manifests"] = [m for m in index["manifests"] if m.get("annotations", {}).get(
        "org.opencontainers.image.ref.name") != ref] + [
        {"mediaType": manifest["mediaType"], "digest": digest, "size": len(body),
         "annotations": {"org.opencontainers.image.ref.name": ref}}]
    index_path.write_text(json.dumps(index))
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    return digest
