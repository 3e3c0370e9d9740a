"""FlashInfer smokes: decode attention, FP8 GEMM, NVFP4 GEMM, and NVFP4-vs-FP8 speed on one shape.

FlashInfer JIT-compiles its kernels on first use with the host's nvcc (FLASHINFER_CUDA_ARCH_LIST, when
set, chooses the targets); the first call's seconds are reported as ``first_call_s``.

Oracles (two lines each; the error model is in _oracles.py):
- flashinfer-decode: float64 softmax attention of the same fp16 q/k/v, checked head by head (each output row)
  with the fp16 bound 4 u; faults: 16 keys zeroed in the kernel's cache (skip-k-block), one head zeroed.
- flashinfer-fp8-gemm: float64 product of the e4m3 inputs decoded by table (not by torch) times their scales,
  checked per 64x64 tile and per row with the bf16 bound 4 u; faults: skip-k-block, zero-tile, zero-row.
- flashinfer-nvfp4-gemm: float64 product of the inputs dequantised from the packed e2m1 codes and the swizzled
  e4m3 block scales (bound 4 u per tile and row), not the unquantised inputs; faults add swap-scales.
- flashinfer-nvfp4-vs-fp8: medians of 15 interleaved timings each; degraded only when NVFP4 is more than 10%
  slower than FP8, "within margin" otherwise; fault slow runs the NVFP4 kernel twice per call.
"""

from __future__ import annotations

import time

from _oracles import (
    check_tiles,
    compare_timings,
    copy,
    decode_e4m3,
    dequantize_nvfp4,
    fault,
    swap_block_scales,
    tile_bound,
    zero_k_block,
    zero_row,
    zero_tile,
)
from _smokelib import Context, Degraded, Fail, cuda_seconds, main

SMOKES = {
    "flashinfer-decode": {
        "func": "decode",
        "description": "single_decode_with_kv_cache (GQA 32/8 heads, head_dim 128, 4096 keys, fp16) against a "
        "float64 softmax-attention reference, head by head.",
        "needs": {"gpu": True, "packages": ["torch", "flashinfer-python"], "min_capability": "8.0"},
        "timeout_s": 600,
        "batch": "kernels",
    },
    "flashinfer-fp8-gemm": {
        "func": "fp8_gemm",
        "description": "bmm_fp8 (e4m3, per-tensor scales) against a float64 GEMM of the same dequantised inputs, "
        "per 64x64 tile and per row.",
        "needs": {"gpu": True, "packages": ["torch", "flashinfer-python"], "min_capability": "8.9"},
        "timeout_s": 600,
        "batch": "kernels",
    },
    "flashinfer-nvfp4-gemm": {
        "func": "nvfp4_gemm",
        "description": "mm_fp4 (NVFP4, 16-element blocks) against a float64 GEMM of the dequantised inputs, per "
        "64x64 tile and per row; skipped on GPUs without native FP4 (below sm_100).",
        "needs": {"gpu": True, "native_fp4": True, "packages": ["torch", "flashinfer-python"]},
        "timeout_s": 600,
        "batch": "kernels",
    },
    "flashinfer-nvfp4-vs-fp8": {
        "func": "nvfp4_vs_fp8",
        "description": "NVFP4 GEMM must not be more than 10% slower than FP8 GEMM on the same shape (medians of "
        "15 timings; slower = degraded, the GB10 slow path); runs only where both run.",
        "needs": {"gpu": True, "native_fp4": True, "packages": ["torch", "flashinfer-python"]},
        "timeout_s": 600,
        "batch": "kernels",
    },
}


def _rel(torch, out, ref) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm().clamp(min=1e-300)).item()


def _broken_output(out, injected: str | None):  # noqa: ANN001, ANN202
    if injected == "zero-tile":
        return zero_tile(out)
    if injected == "zero-row":
        return zero_row(out)
    return out


def _fail_unless(ctx: Context, check, what: str) -> None:  # noqa: ANN001
    ctx.metric("rel_error", check.overall)
    ctx.metric("worst_tile_rel_error", check.worst_tile)
    ctx.metric("worst_row_rel_error", check.worst_row)
    if not check.ok:
        raise Fail(f"{what} wrong: {check.describe()}", "wrong-result")


def decode(ctx: Context) -> None:
    torch = ctx.torch()
    injected = fault(("skip-k-block", "zero-row"))
    import flashinfer

    qo_heads, kv_heads, dim, kv_len = 32, 8, 128, 4096
    q = torch.randn(qo_heads, dim, device="cuda", dtype=torch.float16)
    k = torch.randn(kv_len, kv_heads, dim, device="cuda", dtype=torch.float16)
    v = torch.randn(kv_len, kv_heads, dim, device="cuda", dtype=torch.float16)
    k_in, v_in = k, v
    if injected == "skip-k-block":  # the kernel sees 16 keys (and their values) zeroed
        k_in, v_in = copy(k), copy(v)
        k_in[16:32], v_in[16:32] = 0, 0
    t0 = time.monotonic()
    out = flashinfer.single_decode_with_kv_cache(q, k_in, v_in)
    torch.cuda.synchronize()
    ctx.metric("first_call_s", time.monotonic() - t0)
    if injected == "zero-row":
        out = zero_row(out, 3)
    group = qo_heads // kv_heads
    kf = k.double().repeat_interleave(group, dim=1)  # [kv_len, qo_heads, dim]
    vf = v.double().repeat_interleave(group, dim=1)
    scores = torch.einsum("hd,lhd->hl", q.double(), kf) / dim**0.5
    ref = torch.einsum("hl,lhd->hd", scores.softmax(dim=-1), vf)
    _fail_unless(ctx, check_tiles(out, ref, tile_bound("float16"), tile=32), "decode attention")
    if injected is None:
        t0 = time.monotonic()
        for _ in range(20):
            flashinfer.single_decode_with_kv_cache(q, k, v)
        torch.cuda.synchronize()
        ctx.metric("call_us", (time.monotonic() - t0) / 20 * 1e6)
    ctx.summary = (f"decode correct (worst head {ctx.metrics['worst_row_rel_error']:.2g}, bound "
                   f"{tile_bound('float16'):.2g}), first call {ctx.metrics['first_call_s']} s")


def _to_fp8(torch, x):
    finfo = torch.finfo(torch.float8_e4m3fn)
    scale = finfo.max / x.abs().max().clamp(min=1e-12)
    q = (x * scale).clamp(min=finfo.min, max=finfo.max).to(torch.float8_e4m3fn)
    return q, scale.float().reciprocal()


def _fp8_setup(torch, b: int, m: int, n: int, k: int):
    a = torch.randn(b, m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(b, n, k, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)  # column-major (b, k, n)
    a8, a_inv = _to_fp8(torch, a)
    w8, w_inv = _to_fp8(torch, w)
    return a8, a_inv, w8, w_inv


def fp8_gemm(ctx: Context) -> None:
    torch = ctx.torch()
    injected = fault(("skip-k-block", "zero-tile", "zero-row"))
    import flashinfer

    a8, a_inv, w8, w_inv = _fp8_setup(torch, 4, 256, 1024, 1024)
    a_in = a8
    if injected == "skip-k-block":  # K block 3 (16 values) of the first operand zeroed: byte 0 is +0 in e4m3
        a_in = zero_k_block(a8.view(torch.uint8), 3, 16).view(torch.float8_e4m3fn)
    t0 = time.monotonic()
    out = flashinfer.bmm_fp8(a_in, w8, a_inv, w_inv, torch.bfloat16)
    torch.cuda.synchronize()
    ctx.metric("first_call_s", time.monotonic() - t0)
    out = _broken_output(out, injected)
    a_ref = decode_e4m3(a8.view(torch.uint8)) * a_inv.double()
    w_ref = decode_e4m3(w8.view(torch.uint8)) * w_inv.double()
    _fail_unless(ctx, check_tiles(out, torch.bmm(a_ref, w_ref), tile_bound("bfloat16")), "FP8 GEMM")
    ctx.summary = (f"bmm_fp8 correct (worst tile {ctx.metrics['worst_tile_rel_error']:.2g}, bound "
                   f"{tile_bound('bfloat16'):.2g}), first call {ctx.metrics['first_call_s']} s")


def _nvfp4_setup(torch, flashinfer, m: int, n: int, k: int):
    from flashinfer import SfLayout, nvfp4_quantize

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a_gsf = (448 * 6) / a.float().abs().max()
    b_gsf = (448 * 6) / b.float().abs().max()
    a4, a_sf = nvfp4_quantize(a, a_gsf, sfLayout=SfLayout.layout_128x4, do_shuffle=False)
    b4, b_sf = nvfp4_quantize(b, b_gsf, sfLayout=SfLayout.layout_128x4, do_shuffle=False)
    alpha = 1.0 / (a_gsf * b_gsf)
    return a, b, a4, a_sf, b4, b_sf, alpha, a_gsf, b_gsf


def nvfp4_gemm(ctx: Context) -> None:
    torch = ctx.torch()
    injected = fault(("skip-k-block", "swap-scales", "zero-tile", "zero-row"))
    import flashinfer

    m, n, k = 256, 1024, 1024
    a, b, a4, a_sf, b4, b_sf, alpha, a_gsf, b_gsf = _nvfp4_setup(torch, flashinfer, m, n, k)
    deq_a = dequantize_nvfp4(a4.view(torch.uint8), a_sf.view(torch.uint8), a_gsf.item())
    deq_b = dequantize_nvfp4(b4.view(torch.uint8), b_sf.view(torch.uint8), b_gsf.item())
    # The oracle's own check: NVFP4 keeps ~10% of Gaussian data; a misread layout would be off by ~100%.
    quant_err = max(_rel(torch, deq_a, a), _rel(torch, deq_b, b))
    ctx.metric("quantisation_rel_error", quant_err)
    if not quant_err < 0.2:
        raise Fail(f"the dequantised reference is {quant_err:.3g} away from the inputs: the oracle misreads the "
                   "packed e2m1 / swizzled scale layout", "harness-error")
    a4_in, a_sf_in = a4, a_sf
    if injected == "skip-k-block":  # K block 3 = bytes 24..31 of every row (two e2m1 values per byte)
        a4_in = zero_k_block(a4.view(torch.uint8), 3, 8).view(a4.dtype)
    elif injected == "swap-scales":
        swapped, blocks = swap_block_scales(a_sf.view(torch.uint8), 0, m, k // 16)
        a_sf_in = swapped.view(a_sf.dtype)
        ctx.metric("swapped_blocks", f"row 0 blocks {blocks[0]} and {blocks[1]}")
    t0 = time.monotonic()
    out = flashinfer.mm_fp4(a4_in, b4.T, a_sf_in, b_sf.T, alpha, torch.bfloat16, None, backend="cutlass")
    torch.cuda.synchronize()
    ctx.metric("first_call_s", time.monotonic() - t0)
    out = _broken_output(out, injected)
    _fail_unless(ctx, check_tiles(out, deq_a @ deq_b.T, tile_bound("bfloat16")), "NVFP4 GEMM")
    ctx.summary = (f"mm_fp4 matches the dequantised inputs (worst tile {ctx.metrics['worst_tile_rel_error']:.2g}, "
                   f"bound {tile_bound('bfloat16'):.2g})")


TIMING_SAMPLES, TIMING_MARGIN = 15, 0.10


def nvfp4_vs_fp8(ctx: Context) -> None:
    torch = ctx.torch()
    injected = fault(("slow",))
    import flashinfer

    m, n, k = 64, 8192, 8192  # decode-like: weight-bandwidth bound, where FP4's half bytes must pay
    _, _, a4, a_sf, b4, b_sf, alpha, _, _ = _nvfp4_setup(torch, flashinfer, m, n, k)
    a8, a_inv, w8, w_inv = _fp8_setup(torch, 1, m, n, k)

    def fp4() -> object:
        out = flashinfer.mm_fp4(a4, b4.T, a_sf, b_sf.T, alpha, torch.bfloat16, None, backend="cutlass")
        if injected == "slow":
            out = flashinfer.mm_fp4(a4, b4.T, a_sf, b_sf.T, alpha, torch.bfloat16, None, backend="cutlass")
        return out

    def fp8() -> object:
        return flashinfer.bmm_fp8(a8, w8, a_inv, w_inv, torch.bfloat16)

    fp4_s, fp8_s = [], []
    cuda_seconds(torch, fp4, 1, warmup=3)
    cuda_seconds(torch, fp8, 1, warmup=3)
    for _ in range(TIMING_SAMPLES):  # interleaved, so a drift of the clock or the neighbours hits both alike
        fp4_s.append(cuda_seconds(torch, fp4, 10, warmup=0))
        fp8_s.append(cuda_seconds(torch, fp8, 10, warmup=0))
    t = compare_timings(fp4_s, fp8_s, TIMING_MARGIN)
    ctx.metric("nvfp4_us", t.a_median * 1e6)
    ctx.metric("fp8_us", t.b_median * 1e6)
    ctx.metric("nvfp4_over_fp8", t.ratio)
    ctx.metric("verdict", t.verdict)
    shape = f"{m}x{n}x{k}, median of {t.samples}"
    if t.verdict == "slower":
        raise Degraded(f"NVFP4 GEMM slower than FP8 on {shape}: {t.a_median * 1e6:.1f} us vs "
                       f"{t.b_median * 1e6:.1f} us, beyond the {TIMING_MARGIN:.0%} margin (software FP4 path?)",
                       "slow-path")
    ctx.summary = (f"NVFP4 {t.a_median * 1e6:.1f} us vs FP8 {t.b_median * 1e6:.1f} us on {shape}: "
                   f"{t.verdict} ({TIMING_MARGIN:.0%} margin)")


if __name__ == "__main__":
    main(SMOKES, globals())
