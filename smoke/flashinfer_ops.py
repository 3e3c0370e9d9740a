"""FlashInfer smokes: decode attention, FP8 GEMM, NVFP4 GEMM, and NVFP4-vs-FP8 speed on one shape.

FlashInfer JIT-compiles its kernels on first use with the host's nvcc (FLASHINFER_CUDA_ARCH_LIST, when
set, chooses the targets); the first call's seconds are reported as ``first_call_s``.
"""

from __future__ import annotations

import time

from _smokelib import Context, Degraded, Fail, Skip, cuda_seconds, main

SMOKES = {
    "flashinfer-decode": {
        "func": "decode",
        "description": "single_decode_with_kv_cache (GQA 32/8 heads, head_dim 128, 4096 keys, fp16) against an "
        "fp32 softmax-attention reference.",
        "needs": {"gpu": True, "packages": ["torch", "flashinfer-python"], "min_capability": "8.0"},
        "timeout_s": 600,
    },
    "flashinfer-fp8-gemm": {
        "func": "fp8_gemm",
        "description": "bmm_fp8 (e4m3, per-tensor scales) against an fp32 GEMM of the same dequantised inputs.",
        "needs": {"gpu": True, "packages": ["torch", "flashinfer-python"], "min_capability": "8.9"},
        "timeout_s": 600,
    },
    "flashinfer-nvfp4-gemm": {
        "func": "nvfp4_gemm",
        "description": "mm_fp4 (NVFP4, 16-element blocks) against an fp32 GEMM of the dequantised inputs; "
        "skipped on GPUs without native FP4 (below sm_100).",
        "needs": {"gpu": True, "packages": ["torch", "flashinfer-python"]},
        "timeout_s": 600,
    },
    "flashinfer-nvfp4-vs-fp8": {
        "func": "nvfp4_vs_fp8",
        "description": "NVFP4 GEMM must not be slower than FP8 GEMM on the same shape (slower = degraded, the "
        "GB10 slow path); runs only where both run.",
        "needs": {"gpu": True, "packages": ["torch", "flashinfer-python"]},
        "timeout_s": 600,
    },
}


def _rel(torch, out, ref) -> float:
    return ((out.float() - ref.float()).norm() / ref.float().norm().clamp(min=1e-30)).item()


def decode(ctx: Context) -> None:
    torch = ctx.torch()
    import flashinfer

    qo_heads, kv_heads, dim, kv_len = 32, 8, 128, 4096
    q = torch.randn(qo_heads, dim, device="cuda", dtype=torch.float16)
    k = torch.randn(kv_len, kv_heads, dim, device="cuda", dtype=torch.float16)
    v = torch.randn(kv_len, kv_heads, dim, device="cuda", dtype=torch.float16)
    t0 = time.monotonic()
    out = flashinfer.single_decode_with_kv_cache(q, k, v)
    torch.cuda.synchronize()
    ctx.metric("first_call_s", time.monotonic() - t0)
    group = qo_heads // kv_heads
    kf = k.float().repeat_interleave(group, dim=1)  # [kv_len, qo_heads, dim]
    vf = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("hd,lhd->hl", q.float(), kf) / dim**0.5
    ref = torch.einsum("hl,lhd->hd", scores.softmax(dim=-1), vf)
    rel = _rel(torch, out, ref)
    ctx.metric("rel_error", rel)
    if not rel < 1e-2:
        raise Fail(f"decode attention wrong: relative error {rel:.3g} >= 1e-2", "wrong-result")
    t0 = time.monotonic()
    for _ in range(20):
        flashinfer.single_decode_with_kv_cache(q, k, v)
    torch.cuda.synchronize()
    ctx.metric("call_us", (time.monotonic() - t0) / 20 * 1e6)
    ctx.summary = f"decode correct (rel error {rel:.2g}), first call {ctx.metrics['first_call_s']} s"


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
    import flashinfer

    a8, a_inv, w8, w_inv = _fp8_setup(torch, 4, 256, 1024, 1024)
    t0 = time.monotonic()
    out = flashinfer.bmm_fp8(a8, w8, a_inv, w_inv, torch.bfloat16)
    torch.cuda.synchronize()
    ctx.metric("first_call_s", time.monotonic() - t0)
    ref = torch.bmm(a8.float() * a_inv, w8.float() * w_inv)
    rel = _rel(torch, out, ref)
    ctx.metric("rel_error", rel)
    if not rel < 2e-2:
        raise Fail(f"FP8 GEMM wrong: relative error {rel:.3g} >= 2e-2", "wrong-result")
    ctx.summary = f"bmm_fp8 correct (rel error {rel:.2g}), first call {ctx.metrics['first_call_s']} s"


def _fp4_supported(torch) -> None:
    major, minor = torch.cuda.get_device_capability()
    if major < 10:
        raise Skip(
            f"NVFP4 GEMM unsupported on sm_{major}{minor}: no native FP4 tensor-core instructions "
            "(needs sm_100/sm_103/sm_110 or sm_120a/sm_121a)"
        )


def _nvfp4_setup(torch, flashinfer, m: int, n: int, k: int):
    from flashinfer import SfLayout, nvfp4_quantize

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a_gsf = (448 * 6) / a.float().abs().max()
    b_gsf = (448 * 6) / b.float().abs().max()
    a4, a_sf = nvfp4_quantize(a, a_gsf, sfLayout=SfLayout.layout_128x4, do_shuffle=False)
    b4, b_sf = nvfp4_quantize(b, b_gsf, sfLayout=SfLayout.layout_128x4, do_shuffle=False)
    alpha = 1.0 / (a_gsf * b_gsf)
    return a, b, a4, a_sf, b4, b_sf, alpha


def nvfp4_gemm(ctx: Context) -> None:
    torch = ctx.torch()
    _fp4_supported(torch)
    import flashinfer

    a, b, a4, a_sf, b4, b_sf, alpha = _nvfp4_setup(torch, flashinfer, 256, 1024, 1024)
    t0 = time.monotonic()
    out = flashinfer.mm_fp4(a4, b4.T, a_sf, b_sf.T, alpha, torch.bfloat16, None, backend="cutlass")
    torch.cuda.synchronize()
    ctx.metric("first_call_s", time.monotonic() - t0)
    ref = a.float() @ b.float().T
    rel = _rel(torch, out, ref)
    ctx.metric("rel_error", rel)
    # 4-bit values with 16-element FP8 block scales: about 10% relative error on Gaussian data.
    if not rel < 0.25:
        raise Fail(f"NVFP4 GEMM wrong: relative error {rel:.3g} >= 0.25", "wrong-result")
    ctx.summary = f"mm_fp4 ran (rel error {rel:.2g} vs bf16 inputs)"


def nvfp4_vs_fp8(ctx: Context) -> None:
    torch = ctx.torch()
    _fp4_supported(torch)
    import flashinfer

    m, n, k = 64, 8192, 8192  # decode-like: weight-bandwidth bound, where FP4's half bytes must pay
    _, _, a4, a_sf, b4, b_sf, alpha = _nvfp4_setup(torch, flashinfer, m, n, k)
    a8, a_inv, w8, w_inv = _fp8_setup(torch, 1, m, n, k)
    def fp4() -> object:
        return flashinfer.mm_fp4(a4, b4.T, a_sf, b_sf.T, alpha, torch.bfloat16, None, backend="cutlass")

    def fp8() -> object:
        return flashinfer.bmm_fp8(a8, w8, a_inv, w_inv, torch.bfloat16)

    fp4_us = 1e6 * cuda_seconds(torch, fp4, 50, warmup=3)
    fp8_us = 1e6 * cuda_seconds(torch, fp8, 50, warmup=3)
    ctx.metric("nvfp4_us", fp4_us)
    ctx.metric("fp8_us", fp8_us)
    ctx.metric("nvfp4_over_fp8", fp4_us / fp8_us)
    if fp4_us > fp8_us:
        raise Degraded(f"NVFP4 GEMM slower than FP8 on {m}x{n}x{k}: {fp4_us:.1f} us vs {fp8_us:.1f} us "
                       "(software FP4 path?)", "slow-path")
    ctx.summary = f"NVFP4 {fp4_us:.1f} us <= FP8 {fp8_us:.1f} us on {m}x{n}x{k}"


if __name__ == "__main__":
    main(SMOKES, globals())
