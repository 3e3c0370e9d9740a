"""Shared by tests in several folders."""

from __future__ import annotations

import json

from memregistry import MemoryRegistry

from pinmatrix.imageref import ImageRef
from pinmatrix.registry.client import OCI_MANIFEST


def _image(reg: MemoryRegistry, labels: dict[str, str]) -> ImageRef:
    config = json.dumps({"config": {"Labels": labels}}).encode()
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"digest": reg.add_blob("promoted/demo", config), "size": len(config)}, "layers": []}
    digest = reg.add_manifest("promoted/demo", json.dumps(manifest).encode(), OCI_MANIFEST)
    return ImageRef(reg.address, "promoted/demo", None, digest)
