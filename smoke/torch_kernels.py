"""PyTorch and Triton smokes: GEMMs against exact and float64 references, a device-to-device copy, a JIT kernel.

Oracles (two lines each; the error model is in _oracles.py):
- torch-gemm: {-1,0,1} integer GEMMs (K=1024) must equal their exact sums; Gaussian bf16/fp16 GEMMs are checked
  per 64x64 tile and per row against a float64 product of the same rounded inputs, bound 4 u of the output type.
- torch-d2d-copy: after timed copies of 1 GiB of random bytes the destination must equal its source byte for
  byte (torch.equal); a 64 KiB block zeroed after the copy (fault zero-tile) fails it.
- triton-jit: a*x+y on integer-valued float32 data with a = 0.5 is exact, so the kernel's output must equal the
  exact result bit for bit (max abs error 0), over a length that is not a multiple of the block.
"""

from __future__ import annotations

import time

from _oracles import check_tiles, fault, tile_bound, zero_k_block, zero_row, zero_tile
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
        "description": "bf16 and fp16 GEMMs: {-1,0,1} integers (exact), then Gaussian 4096^3 checked per 64x64 "
        "tile and per row against float64; reports TFLOP/s.",
        "needs": {"gpu": True, "packages": ["torch"], "min_capability": "7.0"},
        "timeout_s": 300,
        "batch": "kernels",
    },
    "torch-d2d-copy": {
        "func": "d2d_copy",
        "description": "device-to-device copy of 1 GiB of random bytes; equal byte for byte; reports GB/s.",
        "needs": {"gpu": True, "packages": ["torch"]},
        "timeout_s": 300,
        "batch": "kernels",
    },
    "triton-jit": {
        "func": "triton_jit",
        "description": "a Triton kernel JIT-compiled here (fused a*x+y) is exact on integer-valued data.",
        "needs": {"gpu": True, "packages": ["torch", "triton"]},
        "timeout_s": 600,
        "batch": "kernels",
    },
}


def _broken_output(out, injected: str | None):  # noqa: ANN001, ANN202
    if injected == "zero-tile":
        return zero_tile(out)
    if injected == "zero-row":
        return zero_row(out)
    return out


def gemm(ctx: Context) -> None:
    torch = ctx.torch()
    injected = fault(("skip-k-block", "zero-tile", "zero-row"))
    gen = torch.Generator(device="cuda")
    gen.seed()  # fresh inputs every run
    bad = []

    def product(a, b):  # noqa: ANN001, ANN202 - the kernel under test, with the injected fault if any
        a_in = zero_k_block(a, 3, 16) if injected == "skip-k-block" else a
        return _broken_output(a_in @ b, injected)

    # 1. Exact: entries in {-1, 0, 1} and K = 1024 keep every partial sum an integer far below 256 in magnitude,
    #    exactly representable in bf16 and fp16 whatever the accumulation order or split: out must equal the sum.
    m, k = 4096, 1024
    ai = torch.randint(-1, 2, (m, k), device="cuda", generator=gen)
    bi = torch.randint(-1, 2, (k, m), device="cuda", generator=gen)
    exact = ai.double() @ bi.double()
    for dtype in (torch.bfloat16, torch.float16):
        name = str(dtype).replace("torch.", "")
        out = product(ai.to(dtype), bi.to(dtype))
        wrong = int((out.double() != exact).sum().item())
        ctx.metric(f"{name}.int_wrong_elements", wrong)
        if wrong:
            bad.append(f"{name} integer GEMM: {wrong} of {m * m} elements differ from the exact sums")

    # 2. Gaussian inputs against float64 of the same rounded inputs, tile by tile and row by row.
    n = 4096
    a32 = torch.randn(n, n, device="cuda", generator=gen) / n**0.25
    b32 = torch.randn(n, n, device="cuda", generator=gen) / n**0.25
    for dtype in (torch.bfloat16, torch.float16):
        name = str(dtype).replace("torch.", "")
        a, b = a32.to(dtype), b32.to(dtype)
        ref = a.double() @ b.double()
        out = product(a, b)
        torch.cuda.synchronize()
        check = check_tiles(out, ref, tile_bound(name))
        ctx.metric(f"{name}.rel_error", check.overall)
        ctx.metric(f"{name}.worst_tile_rel_error", check.worst_tile)
        ctx.metric(f"{name}.worst_row_rel_error", check.worst_row)
        if not check.ok:
            bad.append(f"{name}: {check.describe()}")
        if injected is None:
            secs = cuda_seconds(torch, lambda a=a, b=b: a @ b, 10)
            ctx.metric(f"{name}.tflops", 2 * n**3 / secs / 1e12)
    if bad:
        raise Fail("GEMM result wrong: " + "; ".join(bad), "wrong-result")
    ctx.summary = (f"exact on integers; worst tile {ctx.metrics['bfloat16.worst_tile_rel_error']} (bf16), "
                   f"{ctx.metrics['float16.worst_tile_rel_error']} (fp16); bf16 {ctx.metrics['bfloat16.tflops']} "
                   f"TFLOP/s, fp16 {ctx.metrics['float16.tflops']} TFLOP/s")


def d2d_copy(ctx: Context) -> None:
    torch = ctx.torch()
    injected = fault(("zero-tile",))
    nbytes = 1 << 30
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    secs = cuda_seconds(torch, lambda: dst.copy_(src), 10)
    if injected == "zero-tile":
        dst[1 << 20:(1 << 20) + (1 << 16)] = 0
    if not torch.equal(src, dst):
        differ = int((src != dst).sum().item())
        raise Fail(f"device-to-device copy corrupted data: {differ} of {nbytes} bytes differ", "wrong-result")
    ctx.metric("gb_per_s_read_plus_write", 2 * nbytes / secs / 1e9)
    ctx.summary = f"{ctx.metrics['gb_per_s_read_plus_write']} GB/s (read + write), copy identical"


def triton_jit(ctx: Context) -> None:
    torch = ctx.torch()
    injected = fault(("zero-tile",))
    if triton is None:
        raise Fail(f"import triton failed: {TRITON_IMPORT_ERROR}", "import-error")

    n = (1 << 24) + 17  # not a multiple of the block: the mask matters
    gen = torch.Generator(device="cuda")
    gen.seed()
    # Integers below 2**22: 0.5 * x + y is exact in float32, so the exact result is the only right one.
    x = torch.randint(-(1 << 22), 1 << 22, (n,), device="cuda", generator=gen).float()
    y = torch.randint(-(1 << 22), 1 << 22, (n,), device="cuda", generator=gen).float()
    out = torch.empty_like(x)
    t0 = time.monotonic()
    _axpy[(triton.cdiv(n, 1024),)](x, y, out, 0.5, n, BLOCK=1024)
    torch.cuda.synchronize()
    ctx.metric("first_call_s", time.monotonic() - t0)
    if injected == "zero-tile":
        out[1024:2048] = 0  # one program's block
    exact = 0.5 * x.double() + y.double()
    wrong = int((out.double() != exact).sum().item())
    ctx.metric("wrong_elements", wrong)
    if wrong:
        err = (out.double() - exact).abs().max().item()
        raise Fail(f"Triton kernel result wrong: {wrong} of {n} elements differ from the exact result "
                   f"(max abs error {err})", "wrong-result")
    ctx.metric("triton", triton.__version__)
    ctx.summary = f"Triton {triton.__version__} kernel compiled and exact on {n} elements"


if __name__ == "__main__":
    main(SMOKES, globals())
