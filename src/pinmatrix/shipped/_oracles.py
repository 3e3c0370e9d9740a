"""Oracles for the GPU smokes, and the faults that must make them fail. Standard library only: the array
functions take numpy arrays or torch tensors (CPU or CUDA) alike, so CI tests them on numpy and the smokes run
them on the GPU's own results.

Error model. When the reference is computed in float64 from the very inputs the kernel got (the quantised
FP8/NVFP4 values dequantised exactly, the rounded bf16/fp16 operands), the kernel differs from it only by its
fp32 accumulation and the rounding of its output type (unit roundoff u = 2**-8 for bf16, 2**-11 for fp16): on
the H200 the relative error of a whole 4096x4096 bf16 GEMM is 0.42 u. Every 64x64 tile and every row is
checked against ``TILE_BOUND_U`` u, so a zeroed tile (error 1), a zeroed row (1, and 1/8 of its tile), a
skipped 16-wide K block (~sqrt(16/K) = 0.125 at K=1024) or two swapped block scales (their row moves by
~|s1/s2 - 1| sqrt(2/64)) cannot hide in a whole-matrix norm.

Faults. ``PINMATRIX_FAULT`` names one deliberately broken variant of a smoke's kernel, inputs or cleanup
(``FAULTS``); the smoke must then fail. A smoke that has no such variant skips, saying so: a fault run never
records a pass.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass
from typing import Any

from _smokelib import Skip

FAULT_ENV = "PINMATRIX_FAULT"
FAULTS = {
    "skip-k-block": "one 16-wide block of the reduction dimension K is zeroed in the kernel's input",
    "swap-scales": "two different block scales of one row are swapped in the kernel's input",
    "zero-tile": "one 64x64 tile of the kernel's output is zeroed",
    "zero-row": "one row of the kernel's output is zeroed",
    "leak": "one allocation of every round is never freed",
    "slow": "the timed kernel runs twice per call",
    "perturb-expert": "one MoE expert's down projection is multiplied by -3 in the checkpoint the engine loads",
    "wrong-token": "one generated token is replaced by the reference's least likely token before the check",
}
UNIT_ROUNDOFF = {"bfloat16": 2.0**-8, "float16": 2.0**-11, "float32": 2.0**-24}
TILE_BOUND_U = 4.0  # bound on a tile's or a row's relative error, in units of the output's unit roundoff
TILE = 64


class FaultNotApplicable(Skip):
    """The requested fault has no variant in this smoke: the smoke skips (a fault run never passes)."""


def fault(applicable: tuple[str, ...] = ()) -> str | None:
    """The fault asked for through $PINMATRIX_FAULT (None when unset). An unknown name is an error; a known one
    this smoke has no variant for (not in ``applicable``) raises FaultNotApplicable."""
    name = os.environ.get(FAULT_ENV, "").strip()
    if not name:
        return None
    if name not in FAULTS:
        raise ValueError(f"${FAULT_ENV}={name!r}: not a fault (faults: {', '.join(FAULTS)})")
    if name not in applicable:
        raise FaultNotApplicable(f"fault {name!r} has no variant in this smoke (it has: {', '.join(applicable) or 'none'})")
    return name


def tile_bound(dtype: str) -> float:
    """The per-tile / per-row relative error bound for a kernel whose output has ``dtype``."""
    return TILE_BOUND_U * UNIT_ROUNDOFF[dtype]


# --------------------------------------------------------------------------------------- array backend
def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _f64(x: Any) -> Any:
    return x.double() if _is_torch(x) else x.astype("float64")


def copy(x: Any) -> Any:
    return x.clone() if _is_torch(x) else x.copy()


def _sum(x: Any, axes: tuple[int, ...]) -> Any:
    return x.sum(dim=axes) if _is_torch(x) else x.sum(axis=axes)


def _tolist(x: Any) -> Any:
    return x.detach().cpu().tolist() if _is_torch(x) else x.tolist()


def _like(values: list[Any], like: Any, dtype: str) -> Any:
    """``values`` as an array of the same library (and device) as ``like``."""
    if _is_torch(like):
        import torch

        return torch.tensor(values, dtype=getattr(torch, dtype), device=like.device)
    import numpy

    return numpy.asarray(values, dtype=dtype)


def _stack_last(parts: tuple[Any, ...]) -> Any:
    if _is_torch(parts[0]):
        import torch

        return torch.stack(parts, dim=-1)
    import numpy

    return numpy.stack(parts, axis=-1)


def _as_index(x: Any) -> Any:
    return x.long() if _is_torch(x) else x.astype("int64")


# --------------------------------------------------------------------------------------- per-tile check
@dataclass(frozen=True)
class TileCheck:
    """The worst 64x64 tile and the worst row of ``out`` against ``ref``, as relative Frobenius errors."""

    bound: float
    worst_tile: float
    tile_at: tuple[int, int]  # (tile row, tile column)
    worst_row: float
    row_at: int
    overall: float

    @property
    def ok(self) -> bool:
        return self.worst_tile <= self.bound and self.worst_row <= self.bound

    def describe(self) -> str:
        i, j = self.tile_at
        return (f"worst {TILE}x{TILE} tile ({i},{j}) relative error {self.worst_tile:.3g}, worst row {self.row_at} "
                f"{self.worst_row:.3g}, whole matrix {self.overall:.3g} (bound {self.bound:.3g} per tile and row)")


def _finite(v: float) -> float:
    return v if v == v and v != math.inf else math.inf


def _rel(err: float, ref: float) -> float:
    if err == 0:
        return 0.0
    return _finite(math.sqrt(err / ref)) if ref > 0 else math.inf


def check_tiles(out: Any, ref: Any, bound: float, tile: int = TILE) -> TileCheck:
    """Compare ``out`` with ``ref`` (same shape; 2-D, or batched 3-D read as stacked rows) tile by tile and
    row by row. Rows and columns must be multiples of ``tile``."""
    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(f"shapes differ: {tuple(out.shape)} vs {tuple(ref.shape)}")
    o, r = _f64(out), _f64(ref)
    if len(o.shape) == 3:
        o, r = o.reshape(o.shape[0] * o.shape[1], o.shape[2]), r.reshape(r.shape[0] * r.shape[1], r.shape[2])
    m, n = o.shape
    if m % tile or n % tile:
        raise ValueError(f"a {m}x{n} matrix is not made of {tile}x{tile} tiles")
    d2, r2 = (o - r) * (o - r), r * r
    tile_err = _tolist(_sum(d2.reshape(m // tile, tile, n // tile, tile), (1, 3)))
    tile_ref = _tolist(_sum(r2.reshape(m // tile, tile, n // tile, tile), (1, 3)))
    row_err, row_ref = _tolist(_sum(d2, (1,))), _tolist(_sum(r2, (1,)))
    tiles = [(_rel(e, q), (i, j)) for i, (er, qr) in enumerate(zip(tile_err, tile_ref))
             for j, (e, q) in enumerate(zip(er, qr))]
    worst_tile, tile_at = max(tiles, key=lambda t: t[0])
    rows = [(_rel(e, q), i) for i, (e, q) in enumerate(zip(row_err, row_ref))]
    worst_row, row_at = max(rows, key=lambda t: t[0])
    overall = _rel(_finite(sum(row_err)), sum(row_ref))
    return TileCheck(bound=bound, worst_tile=worst_tile, tile_at=tile_at, worst_row=worst_row, row_at=row_at,
                     overall=overall)


def max_abs_diff(out: Any, ref: Any) -> float:
    """The largest |out - ref| (inf when either holds a NaN or inf)."""
    d = _f64(out) - _f64(ref)
    d = d * d
    worst = _tolist(d.max()) if len(d.shape) else _tolist(d)
    return math.sqrt(_finite(float(worst)))


# ------------------------------------------------------------------------------------ exact decoders
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def e4m3_value(byte: int) -> float:
    """The float8 e4m3fn value of a byte (OCP FP8: bias 7, no infinities, S.1111.111 is NaN)."""
    sign = -1.0 if byte & 0x80 else 1.0
    exp, man = (byte >> 3) & 0xF, byte & 0x7
    if exp == 0xF and man == 0x7:
        return math.nan
    if exp == 0:
        return sign * man / 8 * 2.0**-6
    return sign * (1 + man / 8) * 2.0 ** (exp - 7)


E4M3 = tuple(e4m3_value(b) for b in range(256))


def decode_e4m3(raw: Any) -> Any:
    """float64 values of float8 e4m3fn data given as its bytes (a uint8 view), decoded by table."""
    return _like(list(E4M3), raw, "float64")[_as_index(raw)]


def unpack_e2m1(packed: Any) -> Any:
    """float64 values of packed FP4 (e2m1) data, two per byte, the first element in the low nibble
    (flashinfer/TensorRT-LLM order): (rows, k/2) bytes -> (rows, k) values."""
    codes = _stack_last((packed & 0xF, (packed >> 4) & 0xF))
    rows, half = packed.shape
    return _like(list(E2M1), packed, "float64")[_as_index(codes.reshape(rows, 2 * half))]


def sf_offset_128x4(row: int, block: int, blocks: int) -> int:
    """Byte offset of (row, K-block) in the 128x4-swizzled scale layout of CUTLASS/flashinfer: tiles of 128
    rows x 4 blocks stored [row tile][block tile][row % 32][row % 128 // 32][block % 4]."""
    block_tiles = (blocks + 3) // 4
    return ((((row // 128) * block_tiles + block // 4) * 32 + row % 32) * 4 + (row % 128) // 32) * 4 + block % 4


def sf_offsets(rows: int, blocks: int) -> list[list[int]]:
    return [[sf_offset_128x4(r, b, blocks) for b in range(blocks)] for r in range(rows)]


def unswizzle_scales(sf: Any, rows: int, blocks: int) -> Any:
    """(rows, blocks) scale bytes from a 128x4-swizzled buffer (any shape; read flat)."""
    flat = sf.reshape(-1)
    return flat[_as_index(_like(sf_offsets(rows, blocks), flat, "int64"))]


def dequantize_nvfp4(packed: Any, sf_swizzled: Any, global_scale: float, block: int = 16) -> Any:
    """The exact float64 values an NVFP4 kernel reads: e2m1 x e4m3 block scale / global scale."""
    values = unpack_e2m1(packed)
    rows, k = values.shape
    scales = decode_e4m3(unswizzle_scales(sf_swizzled, rows, k // block))
    return (values.reshape(rows, k // block, block) * scales.reshape(rows, k // block, 1)).reshape(rows, k) \
        / float(global_scale)


# ------------------------------------------------------------------------------------------- faults
def zero_k_block(x: Any, block: int, width: int) -> Any:
    """A copy of ``x`` with elements [block*width, (block+1)*width) of its last dimension zeroed. For FP8 or
    packed FP4 data pass the bytes (a uint8 view): byte 0 is +0 in both (8 bytes = a 16-wide FP4 block)."""
    if (block + 1) * width > x.shape[-1]:
        raise ValueError(f"K block {block} of width {width} is outside a last dimension of {x.shape[-1]}")
    y = copy(x)
    y[..., block * width:(block + 1) * width] = 0
    return y


def swap_block_scales(sf_swizzled: Any, row: int, rows: int, blocks: int) -> tuple[Any, tuple[int, int]]:
    """A copy of a 128x4-swizzled scale buffer with the two most different block scales of ``row`` swapped,
    and which blocks they were. Raises ValueError when every block of the row has the same scale."""
    flat = copy(sf_swizzled).reshape(-1)
    offsets = [sf_offset_128x4(row, b, blocks) for b in range(blocks)]
    raw = [int(v) for v in _tolist(flat[_as_index(_like(offsets, flat, "int64"))])]
    vals = [abs(E4M3[v]) for v in raw]
    lo = min(range(blocks), key=lambda b: vals[b])
    hi = max(range(blocks), key=lambda b: vals[b])
    if vals[lo] == vals[hi]:
        raise ValueError(f"row {row}: every block scale is {vals[lo]}; swapping two changes nothing")
    flat[offsets[lo]], flat[offsets[hi]] = raw[hi], raw[lo]
    return flat.reshape(sf_swizzled.shape), (lo, hi)


def zero_tile(out: Any, i: int = 1, j: int = 2, tile: int = TILE) -> Any:
    """A copy of ``out`` (2-D, or batched: the first matrix) with tile (i, j) zeroed."""
    y = copy(out)
    target = y[0] if len(y.shape) == 3 else y
    if (i + 1) * tile > target.shape[0] or (j + 1) * tile > target.shape[1]:
        raise ValueError(f"tile ({i},{j}) is outside a {target.shape[0]}x{target.shape[1]} matrix")
    target[i * tile:(i + 1) * tile, j * tile:(j + 1) * tile] = 0
    return y


def zero_row(out: Any, row: int = 5) -> Any:
    """A copy of ``out`` (2-D, or batched: the first matrix) with one row zeroed."""
    y = copy(out)
    target = y[0] if len(y.shape) == 3 else y
    target[row] = 0
    return y


# ------------------------------------------------------------------ elementwise tolerance and its control
ATOL, RTOL = 1e-2, 2e-2  # |out - ref| <= ATOL + RTOL |ref|: the element check of the tiled-matmul smokes


def count_outside(out: Any, ref: Any, atol: float = ATOL, rtol: float = RTOL) -> int:
    """How many elements of ``out`` are outside ``|out - ref| <= atol + rtol |ref|`` (a NaN counts)."""
    o, r = _f64(out), _f64(ref)
    d = o - r
    d = d * d
    limit = atol + rtol * (r * r) ** 0.5
    return int(_tolist((~(d <= limit * limit)).sum()))


def planted_probe(ref_rows: Any) -> Any:
    """The negative control's input: a copy of the REFERENCE's rows (never the kernel's output, so a kernel
    wrong there cannot disturb the control) whose last element is moved by 1 + 4|ref|, outside the tolerance
    whatever its value (ref + 2 ref + 1 was not, at ref = -1). Compared with ``ref_rows`` it must count 1."""
    probe = copy(ref_rows)
    target = probe.reshape(-1) if not _is_torch(probe) else probe.view(-1)
    value = target[-1]
    target[-1] = value + 1 + 4 * abs(value)
    return probe


def comparison_failure(bad: int, total: int, control_count: int, what: str) -> tuple[str, str] | None:
    """(failure class, reason) of an elementwise comparison, or None when it passed. A wrong output is
    ``wrong-result`` and is reported first; only a correct-looking output whose control was not counted
    exactly once (the comparison could not have failed) is ``harness-error``."""
    if bad:
        return "wrong-result", f"{what}: {bad} of {total} output elements wrong"
    if control_count != 1:
        return "harness-error", f"comparison self-check: a planted wrong element was counted {control_count} times"
    return None


# ------------------------------------------------------------------------------------------- timings
@dataclass(frozen=True)
class TimingVerdict:
    """Medians of repeated timings of A and B; a verdict only outside the margin."""

    a_median: float
    b_median: float
    samples: int
    margin: float

    @property
    def ratio(self) -> float:
        return self.a_median / self.b_median

    @property
    def verdict(self) -> str:
        if self.ratio > 1 + self.margin:
            return "slower"
        if self.ratio < 1 / (1 + self.margin):
            return "faster"
        return "within-margin"


def compare_timings(a: list[float], b: list[float], margin: float) -> TimingVerdict:
    """A against B from N samples each (N >= 5): the median of each, so one noisy sample cannot flip it."""
    if min(len(a), len(b)) < 5:
        raise ValueError("a timing comparison needs at least 5 samples of each side")
    if not all(t > 0 for t in a + b):
        raise ValueError("timings must be positive")
    return TimingVerdict(statistics.median(a), statistics.median(b), min(len(a), len(b)), margin)


# ----------------------------------------------------------------------------------------------- leaks
@dataclass(frozen=True)
class MemorySample:
    """What memory a process and the machine use: the process's resident set, the GPU memory in use
    (device-wide, cuMemGetInfo) and the system's MemAvailable (unified-memory machines show the driver's
    leak only there)."""

    rss: int
    gpu_used: int
    mem_available: int


def leak_problems(before: MemorySample, after: MemorySample, allocation: int) -> list[str]:
    """What grew by more than half of one allocation between ``before`` and ``after`` (the allocate/free cycles
    ran in between): a leak of even one allocation is above that, allocator noise is far below it."""
    limit = allocation // 2
    grown = {
        "process RSS": after.rss - before.rss,
        "GPU memory in use": after.gpu_used - before.gpu_used,
        "MemAvailable (system)": before.mem_available - after.mem_available,
    }
    return [f"{what} grew {delta / 2**20:.1f} MiB (limit {limit / 2**20:.1f} MiB = half of one "
            f"{allocation / 2**20:.0f} MiB allocation)" for what, delta in grown.items() if delta > limit]


# ----------------------------------------------------------------------------------------- generation
def greedy_mismatch(tokens: list[int], logits: list[list[float]], tolerance: float) -> str | None:
    """Check greedy tokens against a reference model's logits, teacher-forced on the same prefix (row t: the
    logits after the prompt and tokens[:t]). Token t is right when its logit is within ``tolerance`` of the
    row's maximum (two implementations may break a near-tie differently). None when every token is right."""
    if len(tokens) != len(logits):
        return f"{len(tokens)} tokens but {len(logits)} reference rows"
    for t, (tok, row) in enumerate(zip(tokens, logits)):
        if not 0 <= tok < len(row):
            return f"token {t} = {tok} is outside the vocabulary of {len(row)}"
        best = max(range(len(row)), key=lambda i: row[i])
        if row[tok] < row[best] - tolerance:
            return (f"token {t} = {tok} (reference logit {row[tok]:.4g}) but the reference's greedy choice is "
                    f"{best} ({row[best]:.4g}), beyond the tolerance {tolerance:g}")
    return None
