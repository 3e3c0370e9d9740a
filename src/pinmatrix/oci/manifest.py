"""An image manifest or index as a JSON document, wherever it came from (a layout's blob, a registry's answer):
which media types name one, and the descriptors it lists. Every module outside the registry client asks here
for a manifest's layers or an index's manifests instead of reading those keys itself, so a document whose
lists are missing or malformed is handled the same way everywhere (oci/layout.py reads and writes the
documents of a layout)."""

from __future__ import annotations

from typing import Any

from pinmatrix.oci.layout import MEDIA_TYPE_INDEX, MEDIA_TYPE_MANIFEST

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = (MEDIA_TYPE_MANIFEST, DOCKER_MANIFEST)  # one image: a config and its layers
INDEX_TYPES = (MEDIA_TYPE_INDEX, DOCKER_LIST)  # a list of manifests (one per platform, say)


def _listed(doc: dict[str, Any], key: str) -> list[Any]:
    """``doc[key]`` as a list: [] when absent or null, the one value when it is not a list (a caller that checks
    each descriptor then refuses it)."""
    value = doc.get(key)
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def layer_descriptors(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The layer descriptors of an image manifest, bottom first: none when ``layers`` is no list, and entries
    that are not JSON objects left out."""
    layers = manifest.get("layers")
    return [d for d in layers if isinstance(d, dict)] if isinstance(layers, list) else []


def is_index(doc: dict[str, Any]) -> bool:
    """Whether ``doc`` is an image index (it lists manifests) rather than one image's manifest."""
    return doc.get("mediaType") in INDEX_TYPES or "manifests" in doc


def child_descriptors(doc: dict[str, Any]) -> list[Any]:
    """Every descriptor a manifest or an index names, as found: the config, the layers, the manifests, in that
    order (a reader that walks them checks each is a descriptor)."""
    config = doc.get("config")
    return [*([config] if isinstance(config, dict) else []), *_listed(doc, "layers"), *_listed(doc, "manifests")]


def image_bytes(manifest: dict[str, Any]) -> int:
    """The bytes of an image manifest's config and layers, as their descriptors declare them (a size that is not
    a non-negative integer counts 0): what a copy of the whole image moves, for its progress line."""
    config = manifest.get("config")
    sizes = [d.get("size") for d in [*([config] if isinstance(config, dict) else []), *layer_descriptors(manifest)]]
    return sum(s for s in sizes if isinstance(s, int) and not isinstance(s, bool) and s >= 0)
