"""Measure the SBOM's Debian part on real bases: each base layer pinmatrix built on this machine (the rootfs cache,
.pinmatrix/cache/rootfs/KEY.layer + KEY.json) is pushed, as the one base layer of an image, to a private
docker-registry on 127.0.0.1, then read back with pinmatrix.release.debian.base_packages (streamed, digest-checked).
Prints one JSON line per base: its inputs, the layer size, the packages found, the seconds it took.
Run: .venv/bin/python results/sbom/measure.py > results/sbom/measure.jsonl"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

from pinmatrix.engine.services import start_registry
from pinmatrix.registry.client import OCI_MANIFEST, Manifest, Registry
from pinmatrix.imageref import ImageRef
from pinmatrix.release.debian import base_packages

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    cache = ROOT / ".pinmatrix" / "cache" / "rootfs"
    with tempfile.TemporaryDirectory(prefix="pinmatrix-sbom-measure-") as tmp:
        service = start_registry(Path(tmp), None)
        try:
            reg = Registry(service.address)
            for record in sorted(cache.glob("*.json")):
                data = json.loads(record.read_text())
                layer = record.with_suffix(".layer")
                if not layer.is_file():
                    continue
                inputs = data["inputs"]
                what = f"pinmatrix: base debian:{inputs['suite']} ({inputs['arch']}, {record.stem})"
                config = json.dumps({"architecture": inputs["arch"], "os": "linux",
                                     "rootfs": {"type": "layers", "diff_ids": [data["layer"]["diff_id"]]},
                                     "history": [{"created_by": what}]}).encode()
                blob = reg.push_blob_file("measure/base", layer)
                body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                                   "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                              "digest": reg.push_blob("measure/base", config), "size": len(config)},
                                   "layers": [{"mediaType": data["layer"]["media_type"], "digest": blob,
                                               "size": layer.stat().st_size}]}).encode()
                digest = reg.put_manifest("measure/base", record.stem,
                                          Manifest(body, OCI_MANIFEST, "sha256:" + hashlib.sha256(body).hexdigest()))
                start = time.monotonic()
                found = base_packages(reg, ImageRef.parse(f"{service.address}/measure/base@{digest}"))
                took = time.monotonic() - start
                print(json.dumps({"base": record.stem, "suite": inputs["suite"], "arch": inputs["arch"],
                                  "variant": inputs["variant"], "declared_packages": inputs["packages"],
                                  "layer_bytes": layer.stat().st_size, "debian_packages": len(found.packages),
                                  "seconds": round(took, 2), "note": found.note.split(" of ", 1)[0],
                                  "first": [p.purl().to_string() for p in found.packages[:3]]}), flush=True)
        finally:
            service.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
