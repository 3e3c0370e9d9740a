"""The timing oracle of flashinfer-nvfp4-vs-fp8 exercised on the H200, which has no NVFP4 (sm_90): the FP8 GEMM
of that smoke (bmm_fp8, 64x8192x8192) against itself must come out within the margin, three times over, and
against itself run twice per call (the smoke's fault `slow`) must come out slower. Run from the repository root."""

from __future__ import annotations

import json
import sys

sys.path.insert(0, "smoke")

import flashinfer  # noqa: E402
import torch  # noqa: E402
from _oracles import compare_timings  # noqa: E402
from _smokelib import cuda_seconds  # noqa: E402
from flashinfer_ops import TIMING_MARGIN, TIMING_SAMPLES, _fp8_setup  # noqa: E402

a8, a_inv, w8, w_inv = _fp8_setup(torch, 1, 64, 8192, 8192)


def fp8() -> object:
    return flashinfer.bmm_fp8(a8, w8, a_inv, w_inv, torch.bfloat16)


def fp8_twice() -> object:
    fp8()
    return fp8()


def compare(a, b) -> dict:  # noqa: ANN001
    cuda_seconds(torch, a, 1, warmup=3)
    cuda_seconds(torch, b, 1, warmup=3)
    sa, sb = [], []
    for _ in range(TIMING_SAMPLES):
        sa.append(cuda_seconds(torch, a, 10, warmup=0))
        sb.append(cuda_seconds(torch, b, 10, warmup=0))
    t = compare_timings(sa, sb, TIMING_MARGIN)
    return {"a_median_us": t.a_median * 1e6, "b_median_us": t.b_median * 1e6, "ratio": t.ratio,
            "verdict": t.verdict, "samples": t.samples, "margin": t.margin,
            "a_spread_us": [min(sa) * 1e6, max(sa) * 1e6], "b_spread_us": [min(sb) * 1e6, max(sb) * 1e6]}


out = {"same_kernel": [compare(fp8, fp8) for _ in range(3)], "kernel_run_twice": compare(fp8_twice, fp8)}
ok = all(c["verdict"] == "within-margin" for c in out["same_kernel"]) and out["kernel_run_twice"]["verdict"] == "slower"
out["ok"] = ok
print(json.dumps(out, indent=2))
json.dump(out, open(sys.argv[1], "w"), indent=2, sort_keys=True)
sys.exit(0 if ok else 1)
