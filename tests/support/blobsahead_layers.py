"""Shared by tests/unit/image/test_blobsahead.py and tests/integration/test_blobsahead_registry.py."""

from __future__ import annotations

from pinmatrix.oci.layer import LayerDescriptor
from pinmatrix.oci.layout import OCILayout


def put_layer(layout: OCILayout, data: bytes) -> LayerDescriptor:
    digest = layout.put_blob(data)
    return LayerDescriptor(digest=digest, size=len(data), diff_id=digest,
                           media_type="application/vnd.oci.image.layer.v1.tar")
