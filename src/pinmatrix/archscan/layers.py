"""What a cell's image adds to its wheels: the layer of FlashInfer modules compiled ahead of time at build time
(``pinmatrix.image.assembly.aot_plan``), read from the OCI layout the build wrote. The cell's image is found by its id
annotation; the layer by its history entry; its shared objects are read like a wheel's members, and the result
is cached by the layer's digest."""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pinmatrix.archscan.binary import (
    INFLATION_FLOOR,
    MAX_EXTRACTED_BYTES,
    MAX_INFLATION,
    TOOL_HEADER,
    BinaryTargets,
    Extraction,
    read_binary,
)
from pinmatrix.archscan.wheels import scan_cache_file, write_scan_cache
from pinmatrix.oci.layer import open_layer
from pinmatrix.oci.layout import OCILayout
from pinmatrix.oci.manifest import layer_descriptors

AOT_HISTORY = "pinmatrix: flashinfer-aot"
AOT_FOLDER = "flashinfer/data/aot/"
AOT_MANIFEST = "pinmatrix-aot.json"
MAX_JSON = 4 << 20


@dataclass
class LayerScan:
    digest: str
    binaries: list[BinaryTargets]
    manifest: dict[str, Any]  # the build's own record: arch list, modules, gencode flags
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"digest": self.digest, "manifest": self.manifest, "seconds": round(self.seconds, 2),
                "binaries": [b.to_dict() for b in self.binaries]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LayerScan:
        return cls(data["digest"], [BinaryTargets.from_dict(b) for b in data["binaries"]], data["manifest"],
                   data["seconds"])


def _blob(layout: Path, digest: str) -> Path:
    return OCILayout(layout).checked_blob(digest)


def aot_layer(layout: Path, cell_id: str) -> tuple[str, str, str] | None:
    """(image manifest digest, layer digest, media type) of the newest image of ``cell_id`` in the layout that has
    an AOT layer; None when the layout holds no such image. Manifest and config are read through the layout's
    checked reader (bounded, matched against their digests)."""
    oci = OCILayout(layout)
    if not oci.has_index():
        return None
    found: tuple[str, str, str] | None = None
    for entry in oci.entries():
        if (entry.get("annotations") or {}).get("io.pinmatrix.cell.id") != cell_id:
            continue
        digest = str(entry.get("digest"))
        manifest = oci.read_document(digest, "manifest")
        config = oci.read_document(str((manifest.get("config") or {}).get("digest")), "config")
        history = [h.get("created_by", "") for h in config.get("history") or [] if isinstance(h, dict)]
        layers = layer_descriptors(manifest)
        if AOT_HISTORY in history and len(history) == len(layers):
            layer = layers[history.index(AOT_HISTORY)]
            found = (digest, str(layer.get("digest")), str(layer.get("mediaType")))
    return found


def scan_aot_layer(layout: Path, digest: str, media_type: str, cuobjdump: str | None, tool_label: str,
                   cache: Path | None = None) -> LayerScan:
    """The CUDA binaries of the AOT layer ``digest``, labelled by their path in the AOT folder."""
    cached = scan_cache_file(cache, f"layer-{digest.split(':', 1)[1]}", tool_label)
    if cached and cached.is_file():
        return LayerScan.from_dict(json.loads(cached.read_text()))
    t0 = time.monotonic()
    binaries: list[BinaryTargets] = []
    manifest: dict[str, Any] = {}
    blob = _blob(layout, digest)
    # a layer's members are extracted up to MAX_INFLATION times the compressed layer, and MAX_EXTRACTED_BYTES
    extraction = Extraction(min(MAX_EXTRACTED_BYTES, max(INFLATION_FLOOR, MAX_INFLATION * blob.stat().st_size)))
    with open_layer(blob, media_type) as tar, tempfile.TemporaryDirectory(prefix="pinmatrix-layer-") as tmp:
        for member in tar:
            name = member.name.removeprefix("./")
            at = name.find(AOT_FOLDER)
            if not member.isreg() or at < 0:
                continue
            rel = name[at + len(AOT_FOLDER):]
            handle = tar.extractfile(member)
            if handle is None:
                continue
            if rel == AOT_MANIFEST and member.size <= MAX_JSON:
                manifest = json.loads(handle.read())
                continue
            if not rel.endswith(".so"):
                continue
            scratch = Path(tmp) / "member"
            why = extraction.refusal(member.size, None) or extraction.copy(handle, scratch, member.size)
            if why is not None:
                binaries.append(BinaryTargets(rel, member.size, [], TOOL_HEADER, exact=False, grouped=False,
                                              notes=[why]))
                continue
            found = read_binary(scratch, cuobjdump, label=rel)
            if found is not None:
                binaries.append(found)
            scratch.unlink()
    scan = LayerScan(digest, binaries, manifest, time.monotonic() - t0)
    if cached:
        write_scan_cache(cached, scan.to_dict())
    return scan
