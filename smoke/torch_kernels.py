"""PyTorch and Triton smokes: a GEMM against an fp32 reference, a device-to-device copy, a JIT kernel."""

from __future__ import annotations

import time

from _smokelib import Context, Fail, cuda_seconds, main

try:  # Triton resolves a kernel's names through its module's globals, so the kernel lives at module level.
    import triton
    import triton.language as tl
except Exception as err:  # noqa: BLE001 - any import failure is reported by the smoke
    triton = None
    TRITON_IMPORT_ERROR = f"{type(err).__name__}: {err}"
else:
    TRITON_IMPORT_ERROR = ""

    @triton.jit
    def _axpy(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, alpha * x + y, mask=mask)

SMOKES = {
    "torch-gemm": {
        "func": "gemm",
        "description": "bf16 and fp16 GEMM (4096^3, fresh random inputs) within a relative error bound of an "
        "fp32 reference; reports TFLOP/s.",
        "needs": {"gpu": True, "packages": ["torch"], "min_capability": "7.0"},
        "timeout_s": 300,
    },
    "torch-d2d-copy": {
        "func": "d2d_copy",
        "description": "device-to-device copy of 1 GiB of random bytes; compares and reports GB/s.",
        "needs": {"gpu": True, "packages": ["torch"]},
        "timeout_s": 300,
    },
    "triton-jit": {
        "func": "triton_jit",
        "description": "a Triton kernel JIT-compiled here (fused a*x+y) runs and matches torch.",
        "needs": {"gpu": True, "packages": ["torch", "triton"]},
        "timeout_s": 600,
    },
}


def gemm(ctx: Context) -> None:
    torch = ctx.torch()
    n = 4096
    gen = torch.Generator(device="cuda")
    gen.seed()  # fresh inputs every run
    a32 = torch.randn(n, n, device="cuda", generator=gen) / n**0.25
    b32 = torch.randn(n, n, device="cuda", generator=gen) / n**0.25
    bad = []
    for dtype, bound in ((torch.bfloat16, 2e-2), (torch.float16, 5e-3)):
        a, b = a32.to(dtype), b32.to(dtype)
        ref = a.float() @ b.float()  # the same rounded inputs, fp32 math
        out = a @ b
        torch.cuda.synchronize()
        rel = ((out.float() - ref).norm() / ref.norm()).item()
        name = str(dtype).replace("torch.", "")
        ctx.metric(f"{name}.rel_error", rel)
        secs = cuda_seconds(torch, lambda: a @ b, 10)
        ctx.metric(f"{name}.tflops", 2 * n**3 / secs / 1e12)
        if not rel < bound or ref.abs().max().item() == 0:
            bad.append(f"{name} relative error {rel:.3g} > {bound}")
    if bad:
        raise Fail("GEMM result wrong: " + "; ".join(bad), "wrong-result")
    ctx.summary = f"bf16 {ctx.metrics['bfloat16.tflops']} TFLOP/s, fp16 {ctx.metrics['float16.tflops']} TFLOP/s"


def d2d_copy(ctx: Context) -> None:
    torch = ctx.torch()
    nbytes = 1 << 30
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    secs = cuda_seconds(torch, lambda: dst.copy_(src), 10)
    if not torch.equal(src, dst):
        raise Fail("device-to-device copy corrupted data", "wrong-result")
    ctx.metric("gb_per_s_read_plus_write", 2 * nbytes / secs / 1e9)
    ctx.summary = f"{ctx.metrics['gb_per_s_read_plus_write']} GB/s (read + write)"


def triton_jit(ctx: Context) -> None:
    torch = ctx.torch()
    if triton is None:
        raise Fail(f"import triton failed: {TRITON_IMPORT_ERROR}", "import-error")

    n = (1 << 24) + 17  # not a multiple of the block: the mask matters
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    t0 = time.monotonic()
    _axpy[(triton.cdiv(n, 1024),)](x, y, out, 0.5, n, BLOCK=1024)
    torch.cuda.synchronize()
    ctx.metric("first_call_s", time.monotonic() - t0)
    err = (out - (0.5 * x + y)).abs().max().item()
    ctx.metric("max_abs_error", err)
    if err > 1e-5:
        raise Fail(f"Triton kernel result wrong: max abs error {err}", "wrong-result")
    ctx.metric("triton", triton.__version__)
    ctx.summary = f"Triton {triton.__version__} kernel compiled and correct"


if __name__ == "__main__":
    main(SMOKES, globals())
