"""The image's flashinfer-aot layer: found in the layout through its checked reader (a manifest that does not
match its digest is refused), and the 120f known issue's evidence from it counts only its FP4 modules
(data/arch_rules.toml ``aot_fp4_modules``): a 12.0f cell's cross-compiled decode module holds sm_120f too
(results/arch-scan/gb10-aot/), and is no FP4 kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

from pinmatrix.archscan.binary import BinaryTargets
from pinmatrix.archscan.layers import aot_layer
from pinmatrix.archscan.scan import _evidence
from pinmatrix.matrix.selection import load
from pinmatrix.oci.layer import LayerWriter
from pinmatrix.oci.layout import LayoutError, OCILayout

REPO = Path(__file__).resolve().parents[3]
DECODE = "single_decode_f16/single_decode_f16.so"
QUANT = "fp4_quantization_120f/fp4_quantization_120f.so"


def _bins() -> dict[str, list[BinaryTargets]]:
    return {"flashinfer-aot": [BinaryTargets(DECODE, 1, [("sm_120f",)] * 3, "cuobjdump", True),
                               BinaryTargets(QUANT, 1, [("sm_120f",)], "cuobjdump", True)]}


def test_only_the_aot_layers_fp4_modules_are_fp4_evidence() -> None:
    _, expansion = load(REPO / "matrix.toml")
    cell = next(c for c in expansion.cells if c.stack == "gb10-nvfp4" and c.flashinfer_cuda_arch_list == "12.0f"
                and any(k.id == "nvfp4-built-for-120f-on-sm121" for k in c.known_issues))
    modules = {DECODE: "decode-f16-hd128", QUANT: "fp4-quantize"}
    (issue,) = _evidence(cell, "sm_121", _bins(), modules)
    assert issue["status"] == "confirmed"
    assert issue["evidence"] == [f"flashinfer-aot: {QUANT}: 1/1 kernel group(s) hold sm_120f and no sm_121a"]
    (unnamed,) = _evidence(cell, "sm_121", _bins())  # a manifest that names no module: every binary counts
    assert len(unnamed["evidence"]) == 2 and any(DECODE in line for line in unnamed["evidence"])
    assert _evidence(cell, "sm_121", {"flashinfer-aot": _bins()["flashinfer-aot"][:1]}, modules)[0]["status"] == "not-seen"


def test_the_aot_layer_is_found_by_cell_and_history_through_the_checked_reader(tmp_path: Path) -> None:
    assert aot_layer(tmp_path / "none", "0123456789ab") is None  # no layout, no layer
    layout = OCILayout(tmp_path / "oci").init()
    layers = []
    for name in ("base", "aot"):
        writer = LayerWriter(layout.blobs, epoch=0)
        writer.add_bytes(f"{name}/x", name.encode())
        layers.append(writer.close())
    config = layout.put_config({"history": [{"created_by": "pinmatrix: base debian"},
                                            {"created_by": "pinmatrix: flashinfer-aot"}]})
    digest = layout.put_manifest("t/c:1", config, layers, {"io.pinmatrix.cell.id": "0123456789ab"})
    assert aot_layer(layout.root, "0123456789ab") == (digest, layers[1].digest, layers[1].media_type)
    assert aot_layer(layout.root, "ba9876543210") is None
    layout.put_manifest("t/c:2", config, layers[1:], {"io.pinmatrix.cell.id": "ba9876543210"})
    assert aot_layer(layout.root, "ba9876543210") is None  # the history does not pair with the layers
    manifest = layout.blob_path(digest)
    manifest.write_bytes(manifest.read_bytes().replace(b'"schemaVersion":2', b'"schemaVersion":2 '))
    with pytest.raises(LayoutError, match=f"manifest {digest} does not match its digest"):
        aot_layer(layout.root, "0123456789ab")
