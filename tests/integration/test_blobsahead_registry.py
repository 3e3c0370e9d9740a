"""Blobs pushed ahead to a real registry (docker-registry): each sent once and present after finish; a blob that is
not its digest refused, sending stopped with the reason."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from blobsahead_layers import put_layer

from pinmatrix.engine.services import Service
from pinmatrix.image.blobsahead import BlobsAhead
from pinmatrix.oci.layer import LayerDescriptor
from pinmatrix.oci.layout import OCILayout
from pinmatrix.registry.client import Registry


@pytest.mark.registry
def test_each_blob_handed_over_is_in_the_registry_after_finish_and_sent_once(docker_registry: Service,
                                                                              tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    layers = [put_layer(layout, bytes([n]) * (n * 300_000 + 7)) for n in range(1, 4)]
    registry = Registry(docker_registry.address)
    with BlobsAhead(registry, "ahead/one", layout.blob_path) as ahead:
        for layer in [*layers, layers[0]]:
            ahead.add(layer)
        report = ahead.finish()
    assert (report.sent, report.present, report.stopped) == (3, 0, None)
    assert report.bytes_sent == sum(layer.size for layer in layers)
    for layer in layers:
        assert registry.get_blob("ahead/one", layer.digest) == layout.blob_path(layer.digest).read_bytes()
    new = put_layer(layout, b"one more layer")
    with BlobsAhead(registry, "ahead/one", layout.blob_path) as ahead:
        for layer in [*layers, new]:
            ahead.add(layer)
        again = ahead.finish()
    assert (again.sent, again.present, again.bytes_sent) == (1, 3, new.size)
    assert again.describe() == "1 blob(s) sent ahead (0.0 MB), 3 already there"
    assert report.describe() == f"3 blob(s) sent ahead ({report.bytes_sent / 1e6:.1f} MB), 0 already there"
    assert report.describe() == "3 blob(s) sent ahead (1.8 MB), 0 already there"


@pytest.mark.registry
def test_a_blob_that_is_not_its_digest_is_refused_and_sending_stops_with_the_reason(docker_registry: Service,
                                                                                     tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    good = put_layer(layout, b"a good layer" * 1000)
    claimed = "sha256:" + hashlib.sha256(b"what the layer should be").hexdigest()
    layout.blob_path(claimed).write_bytes(b"what the file holds instead")
    bad = LayerDescriptor(digest=claimed, size=len(b"what the file holds instead"), diff_id=claimed,
                          media_type="application/vnd.oci.image.layer.v1.tar")
    registry = Registry(docker_registry.address)
    with BlobsAhead(registry, "ahead/bad", layout.blob_path) as ahead:
        ahead.add(bad)
        ahead.add(good)
        report = ahead.finish()
    assert report.sent == 0 and report.stopped is not None and claimed in report.stopped
    assert "stopped early" in report.describe()
    assert not registry.has_blob("ahead/bad", claimed) and not registry.has_blob("ahead/bad", good.digest)
