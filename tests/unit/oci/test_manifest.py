"""pinmatrix.oci.manifest: a manifest's layers and a document's descriptors, taken the same way whatever the
document holds (absent, null, malformed lists), and an index told from one image's manifest; an image's bytes
as its config and layer descriptors declare them, a size that is no count counted 0."""

from __future__ import annotations

from typing import Any

import pytest

from pinmatrix.oci.manifest import DOCKER_LIST, child_descriptors, image_bytes, is_index, layer_descriptors

CONFIG = {"digest": "sha256:" + "c" * 64, "size": 2, "mediaType": "application/vnd.oci.image.config.v1+json"}
LAYER = {"digest": "sha256:" + "a" * 64, "size": 3, "mediaType": "application/vnd.oci.image.layer.v1.tar"}


@pytest.mark.parametrize(("doc", "layers"), [
    ({"config": CONFIG, "layers": [LAYER, LAYER]}, [LAYER, LAYER]),
    ({"config": CONFIG, "layers": [LAYER, "junk", 3, None]}, [LAYER]),
    ({"config": CONFIG}, []),
    ({"layers": None}, []),
    ({"layers": LAYER}, []),  # one descriptor where a list belongs: no list, no layers
    ({"layers": "junk"}, []),
])
def test_a_manifests_layers_are_its_descriptor_objects_in_order(doc: dict[str, Any], layers: list[Any]) -> None:
    assert layer_descriptors(doc) == layers


def test_child_descriptors_are_config_layers_then_manifests_as_found() -> None:
    manifest = {"config": CONFIG, "layers": [LAYER, "junk"]}
    assert child_descriptors(manifest) == [CONFIG, LAYER, "junk"]  # the caller refuses what is no descriptor
    index = {"manifests": [LAYER], "config": "not a descriptor"}
    assert child_descriptors(index) == [LAYER]
    assert child_descriptors({"layers": {"digest": "x"}}) == [{"digest": "x"}]
    assert child_descriptors({}) == []


def test_an_index_is_told_by_its_media_type_or_its_manifests() -> None:
    assert is_index({"mediaType": "application/vnd.oci.image.index.v1+json"})
    assert is_index({"mediaType": DOCKER_LIST}) and is_index({"manifests": []})
    assert not is_index({"mediaType": "application/vnd.oci.image.manifest.v1+json", "config": CONFIG, "layers": []})
    assert not is_index({})


def test_image_bytes_are_the_config_and_layers_declared_sizes() -> None:
    assert image_bytes({"config": CONFIG, "layers": [LAYER, LAYER, "junk"]}) == 8
    odd = [{**LAYER, "size": bad} for bad in (-1, True, "9", 1.5, None)]
    assert image_bytes({"config": {**CONFIG, "size": "2"}, "layers": [LAYER, *odd]}) == 3
    assert image_bytes({}) == 0
