"""xFormers tiled matmul smokes (stack A): the int32 offset overflow past 2**31 elements.

Each boundary smoke runs a shape just below 2**31 elements of one tensor (output, first operand,
second operand) and then one just above it, in that order: a device fault kills the CUDA context, so
the case that is expected to survive runs first. Results are checked against torch.matmul (cuBLAS)
in row chunks; inputs are fresh random bf16, never zeros.

Oracle (two lines, every smoke of this module):
  torch.matmul (cuBLAS, no bf16 split-K) on the same bf16 inputs, element by element within 1e-2 + 2e-2 |ref|
  (bit for bit on the H200); one wrong element planted in a copy of the reference must count once (self-check).
"""

from __future__ import annotations

import os
import time

from _oracles import comparison_failure, planted_probe
from _smokelib import Context, Fail, Skip, main

LIMIT = 2**31
SMOKES = {
    "xformers-tiled-matmul-boundary-output": {
        "func": "boundary_output",
        "description": "output M x N just below / above 2**31 elements (K=2048, N=64512; M=33280 / 33344).",
        "needs": {"gpu": True, "packages": ["torch", "triton", "xformers"], "min_capability": "8.0", "memory_gib": 24},
        "timeout_s": 600,
        "batch": "xformers-tiled",
    },
    "xformers-tiled-matmul-boundary-a": {
        "func": "boundary_a",
        "description": "first operand M x K just below / above 2**31 elements (K=65536, N=256; "
        "M=32704 / 32832).",
        "needs": {"gpu": True, "packages": ["torch", "triton", "xformers"], "min_capability": "8.0", "memory_gib": 24},
        "timeout_s": 600,
        "batch": "xformers-tiled",
    },
    "xformers-tiled-matmul-boundary-b": {
        "func": "boundary_b",
        "description": "second operand K x N just below / above 2**31 elements (N=65536, M=256; "
        "K=32704 / 32832).",
        "needs": {"gpu": True, "packages": ["torch", "triton", "xformers"], "min_capability": "8.0", "memory_gib": 24},
        "timeout_s": 600,
        "batch": "xformers-tiled",
    },
    "xformers-tiled-matmul-large-vocab": {
        "func": "large_vocab",
        "description": "the original report's shape on one GPU: M=131072, K=2048, N=64512, bf16 forward.",
        "needs": {"gpu": True, "packages": ["torch", "triton", "xformers"], "min_capability": "8.0", "memory_gib": 60},
        "timeout_s": 600,
        "batch": "xformers-tiled",
    },
    "xformers-tiled-matmul-fwd-bwd": {
        "func": "fwd_bwd",
        "description": "forward + backward of tiled_matmul at M=131072, K=2048, N=64512 with a random output "
        "gradient; y, dx and dw checked against cuBLAS.",
        "needs": {"gpu": True, "packages": ["torch", "triton", "xformers"], "min_capability": "8.0", "memory_gib": 100},
        "timeout_s": 600,
        "batch": "xformers-tiled",
    },
    "xformers-tiled-matmul-shape": {
        "func": "shape",
        "description": "one tiled_matmul of M x K by K x N (M a parameter; K=2048, N=64512, bf16) checked "
        "against cuBLAS: `pinmatrix bisect` searches M for the first fault",
        "needs": {"gpu": True, "packages": ["torch", "triton", "xformers"], "min_capability": "8.0", "memory_gib": 48},
        "params": {"M": {"type": "int", "range": [1, 131072], "default": 33280}},
        "fixed": {"K": 2048, "N": 64512, "dtype": "bfloat16"},
        "quantities": {"output elements M*N": ["M", "N"], "operand a elements M*K": ["M", "K"],
                       "operand b elements K*N": ["K", "N"]},
        "timeout_s": 300,
    },
    "xformers-seqpar-2gpu": {
        "func": "seqpar_2gpu",
        "description": "sequence_parallel_leading_matmul(fuse=True) over 2 GPUs (NCCL), seq 131072, 2048 -> "
        "64512, y.mean().backward(), as in xformers issue #1347.",
        "needs": {"gpu": True, "gpus": 2, "packages": ["torch", "triton", "xformers"], "min_capability": "8.0", "memory_gib": 60},
        "timeout_s": 600,
    },
}


def _setup(ctx: Context):
    torch = ctx.torch()
    import xformers
    from xformers.ops import tiled_matmul
    from xformers.ops.tiled_matmul import _should_use_triton

    ctx.metric("xformers", xformers.__version__)
    if not _should_use_triton(torch.device("cuda"), torch.bfloat16):
        raise Skip("xformers would not use its Triton kernel here (XFORMERS_TILED_MATMUL_ENABLE_TRITON=0 "
                   "or capability < 8.0): nothing to test")
    # The reference must not reduce in bf16 (cuBLAS split-K), or it is the less exact of the two.
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    from xformers.ops._triton import tiled_matmul_kernels as kernels

    ctx.metric("int64_patch", "yes" if hasattr(kernels, "_needs_int64_offsets") else "no")
    return torch, tiled_matmul


def _compare(torch, out, ref, what: str) -> tuple[int, float]:
    """Count elements outside |out - ref| <= 1e-2 + 2e-2 |ref| (NaN counts), chunked by rows. On the H200
    the Triton kernel and cuBLAS agreed bit for bit in every case measured (max abs error 0), hence the
    self-check: it shows the comparison can fail."""
    bad, worst = 0, 0.0
    rows = out.shape[0]
    chunk = max(1, (1 << 28) // max(1, out.shape[1]))
    for i in range(0, rows, chunk):
        o = out[i:i + chunk].float()
        r = ref[i:i + chunk].float()
        d = (o - r).abs()
        bad += int((~(d <= 1e-2 + 2e-2 * r.abs())).sum().item())
        worst = max(worst, float(d.max().item()))
        del o, r, d
    if bad:
        print(f"{what}: {bad} element(s) out of tolerance, max abs error {worst}")
    return bad, worst


def _control(ctx: Context, torch, ref) -> int:
    """Negative control: the same comparison must flag one wrong element planted in a copy of the
    reference's last row (not the kernel's output: a kernel wrong there must read as wrong-result)."""
    bad, _ = _compare(torch, planted_probe(ref[-1:]), ref[-1:], "self-check")
    if bad == 1:
        ctx.metric("checker_self_test", "caught")
    return bad


def _judge(ctx: Context, torch, out, ref, what: str, detail: str) -> tuple[int, float]:
    """Compare, run the control, and fail wrong-result first, harness-error only for a correct output."""
    bad, worst = _compare(torch, out, ref, what)
    ctx.metric(f"{what}.bad_elements", bad)
    failure = comparison_failure(bad, out.numel(), _control(ctx, torch, ref), what)
    if failure is not None:
        cls, why = failure
        raise Fail(f"{why} (max abs error {worst:.3g}){detail}", cls)
    return bad, worst


def _randn(torch, *shape, scale: float, dtype: str = "bfloat16"):
    return torch.randn(*shape, device="cuda", dtype=getattr(torch, dtype)).mul_(scale)


def _is_fault(err: BaseException) -> str | None:
    msg = str(err).lower()
    if "illegal memory access" in msg:
        return "illegal-memory-access"
    if "misaligned address" in msg or "unspecified launch failure" in msg:
        return "device-fault"
    if "out of memory" in msg:
        return "out-of-memory"
    return None


def _one_case(ctx: Context, torch, tiled_matmul, label: str, m: int, k: int, n: int, watched: str,
              dtype: str = "bfloat16") -> None:
    sizes = {"output": m * n, "a": m * k, "b": k * n}
    ctx.metric(f"{label}.shape", f"M={m} K={k} N={n}")
    ctx.metric(f"{label}.{watched}_elements", sizes[watched])
    a = _randn(torch, m, k, scale=k**-0.25, dtype=dtype)
    b = _randn(torch, k, n, scale=k**-0.25, dtype=dtype)
    t0 = time.monotonic()
    try:
        (out,), = tiled_matmul([[a]], [[b]])
        torch.cuda.synchronize()
    except Exception as err:
        cls = _is_fault(err)
        ctx.metric(f"{label}.status", "fail")
        if cls is None:
            raise
        over = "above" if sizes[watched] > LIMIT - 1 else "below"
        raise Fail(
            f"{label}: tiled_matmul with {watched} of {sizes[watched]} elements ({over} 2^31): "
            f"{type(err).__name__}: {str(err).splitlines()[0]}", cls,
        ) from None
    ctx.metric(f"{label}.seconds", time.monotonic() - t0)
    ref = a @ b
    ctx.metric(f"{label}.status", "fail")
    _, worst = _judge(ctx, torch, out, ref, label, f" with {watched} of {sizes[watched]} elements")
    ctx.metric(f"{label}.max_abs_error", worst)
    ctx.metric(f"{label}.status", "pass")
    del a, b, out, ref
    torch.cuda.empty_cache()


def _boundary(ctx: Context, watched: str, below: tuple[int, int, int], above: tuple[int, int, int]) -> None:
    torch, tiled_matmul = _setup(ctx)
    _one_case(ctx, torch, tiled_matmul, "below", *below, watched)
    _one_case(ctx, torch, tiled_matmul, "above", *above, watched)
    ctx.summary = (f"{watched}: {ctx.metrics[f'below.{watched}_elements']} and "
                   f"{ctx.metrics[f'above.{watched}_elements']} elements both correct")


def boundary_output(ctx: Context) -> None:
    _boundary(ctx, "output", (33280, 2048, 64512), (33344, 2048, 64512))


def boundary_a(ctx: Context) -> None:
    _boundary(ctx, "a", (32704, 65536, 256), (32832, 65536, 256))


def boundary_b(ctx: Context) -> None:
    _boundary(ctx, "b", (256, 32704, 65536), (256, 32832, 65536))


def shape(ctx: Context) -> None:
    """One shape, from ctx.params: the tensor watched is the largest of output, a and b."""
    torch, tiled_matmul = _setup(ctx)
    m, k, n, dtype = (int(ctx.params["M"]), int(ctx.params["K"]), int(ctx.params["N"]),
                      str(ctx.params["dtype"]))
    if dtype not in ("bfloat16", "float16"):
        raise Fail(f"dtype {dtype!r}: the tiled matmul smoke runs bfloat16 or float16", "bad-input")
    sizes = {"output": m * n, "a": m * k, "b": k * n}
    watched = max(sizes, key=sizes.__getitem__)
    _one_case(ctx, torch, tiled_matmul, "case", m, k, n, watched, dtype)
    ctx.summary = f"M={m} K={k} N={n} {dtype}: correct ({sizes[watched]} {watched} elements)"


M, K, N = 131072, 2048, 64512


def large_vocab(ctx: Context) -> None:
    torch, tiled_matmul = _setup(ctx)
    _one_case(ctx, torch, tiled_matmul, "large_vocab", M, K, N, "output")
    ctx.summary = f"M={M} K={K} N={N} bf16 forward correct ({M * N} output elements)"


def fwd_bwd(ctx: Context) -> None:
    torch, tiled_matmul = _setup(ctx)
    x = _randn(torch, M, K, scale=K**-0.25).requires_grad_()
    w = _randn(torch, K, N, scale=K**-0.25).requires_grad_()
    stage = "forward"
    try:
        t0 = time.monotonic()
        (y,), = tiled_matmul([[x]], [[w]])
        torch.cuda.synchronize()
        ctx.metric("forward_s", time.monotonic() - t0)
        with torch.no_grad():
            ref = x @ w
            _, worst = _judge(ctx, torch, y, ref, "y", "")
            del ref
        ctx.metric("y.max_abs_error", worst)
        g = _randn(torch, M, N, scale=1.0)
        stage = "backward"
        t0 = time.monotonic()
        y.backward(g)
        torch.cuda.synchronize()
        ctx.metric("backward_s", time.monotonic() - t0)
    except Fail:
        raise
    except Exception as err:
        cls = _is_fault(err)
        if cls is None:
            raise
        raise Fail(f"{stage}: {type(err).__name__}: {str(err).splitlines()[0]}", cls) from None
    del y
    with torch.no_grad():
        bad_x, worst_x = _compare(torch, x.grad, g @ w.t(), "dx")
        bad_w, worst_w = _compare(torch, w.grad, x.t() @ g, "dw")
    ctx.metric("dx.max_abs_error", worst_x)
    ctx.metric("dw.max_abs_error", worst_w)
    if bad_x or bad_w:
        raise Fail(f"backward: {bad_x} element(s) of dx and {bad_w} of dw wrong", "wrong-result")
    ctx.summary = f"forward and backward correct at M={M} K={K} N={N} (y, dx, dw)"


# --- two GPUs: the original report -------------------------------------------------------------------
def _seqpar_worker(rank: int, world: int, init_file: str, result_file: str) -> None:
    import json

    import torch
    import torch.distributed as dist
    from xformers.ops import sequence_parallel_leading_matmul

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    outcome: dict[str, object] = {"rank": rank}
    try:
        gen = torch.Generator(device="cuda")
        gen.manual_seed(1234 + rank)
        x = (torch.randn(M // world, K, device="cuda", generator=gen) * K**-0.25).bfloat16().requires_grad_()
        gen.manual_seed(99)  # the same weight on every rank
        w = (torch.randn(K, N, device="cuda", generator=gen) * K**-0.25).bfloat16().requires_grad_()
        (y,) = sequence_parallel_leading_matmul(x, [w], fuse=True, process_group=dist.group.WORLD)
        y.mean().backward()
        torch.cuda.synchronize()
        with torch.no_grad():
            gathered = [torch.empty_like(x) for _ in range(world)]
            dist.all_gather(gathered, x.detach())
            xg = torch.cat(gathered)
            g = torch.full((M // world, N), 1.0 / (M * N), device="cuda", dtype=torch.bfloat16)
            # Every rank's loss is the mean of the whole gathered y, and the backward reduce-scatters the
            # input gradient: each row of x collects the same contribution from every rank.
            dx_ref = world * (g.float() @ w.float().t())
            dw_ref = x.detach().float().t() @ g.float()
            dist.all_reduce(dw_ref)
            outcome["y_rel"] = ((y.float() - (xg @ w).float()).norm() / (xg @ w).float().norm()).item()
            outcome["dx_rel"] = ((x.grad.float() - dx_ref).norm() / dx_ref.norm()).item()
            outcome["dw_rel"] = ((w.grad.float() - dw_ref).norm() / dw_ref.norm()).item()
        outcome["ok"] = True
    except Exception as err:
        outcome["ok"] = False
        outcome["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        print(f"rank {rank}: {outcome['error']}", flush=True)
    with open(f"{result_file}.{rank}", "w") as fh:
        json.dump(outcome, fh)
    os._exit(0)


def seqpar_2gpu(ctx: Context) -> None:
    import json
    import tempfile

    torch, _ = _setup(ctx)
    import torch.multiprocessing as mp

    world = 2
    # NVLink multicast off in NCCL, torch symmetric memory and NVSHMEM: the fused ops do not need it, and on
    # shared multi-GPU hosts a program that uses it can take the GPUs out of service.
    os.environ.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    tmp = tempfile.mkdtemp(prefix="pinmatrix-seqpar-")
    init_file, result_file = os.path.join(tmp, "init"), os.path.join(tmp, "result")
    procs = [mp.get_context("spawn").Process(target=_seqpar_worker, args=(r, world, init_file, result_file))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=480)
    outcomes = []
    for r, p in enumerate(procs):
        if p.is_alive():
            p.kill()
            raise Fail(f"rank {r} hung", "timeout")
        try:
            with open(f"{result_file}.{r}") as fh:
                outcomes.append(json.load(fh))
        except OSError:
            raise Fail(f"rank {r} died with exit code {p.exitcode} before reporting", "crash") from None
    errors = [o["error"] for o in outcomes if not o.get("ok")]
    if errors:
        cls = None
        for e in errors:
            cls = cls or ("illegal-memory-access" if "illegal memory access" in e.lower() else None)
        raise Fail("; ".join(f"rank {o['rank']}: {o.get('error')}" for o in outcomes if not o.get("ok")), cls)
    for key in ("y_rel", "dx_rel", "dw_rel"):
        ctx.metric(key, max(float(o[key]) for o in outcomes))
    worst = max(ctx.metrics[k] for k in ("y_rel", "dx_rel", "dw_rel"))  # type: ignore[type-var]
    if not worst < 2e-2:
        raise Fail(f"seqpar results wrong: worst relative error {worst:.3g}", "wrong-result")
    ctx.summary = f"2-GPU seqpar forward + backward correct (worst relative error {worst:.2g})"


if __name__ == "__main__":
    main(SMOKES, globals())
