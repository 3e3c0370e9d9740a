"""The 120f known issue's evidence from the image's flashinfer-aot layer counts only its FP4 modules
(data/arch_rules.toml ``aot_fp4_modules``): a 12.0f cell's cross-compiled decode module holds sm_120f too
(results/arch-scan/gb10-aot/), and is no FP4 kernel."""

from __future__ import annotations

from pathlib import Path

from pinmatrix.archscan.binary import BinaryTargets
from pinmatrix.archscan.scan import _evidence
from pinmatrix.matrix.selection import load

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
