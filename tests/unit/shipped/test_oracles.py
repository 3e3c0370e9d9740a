"""The smoke oracles (src/pinmatrix/shipped/_oracles.py) on the CPU with numpy: per-tile and per-row checks pass a correctly
rounded GEMM and fail every injected fault (a zeroed tile, a zeroed row, a skipped K block, two swapped NVFP4
block scales) that a whole-matrix norm lets through; the exact e2m1/e4m3 decoders and the 128x4 scale layout;
timing comparisons with a margin; the leak verdict; greedy tokens against reference logits; and that every
smoke module documents its oracle. The same functions run on CUDA tensors in the smokes (results/h200/oracles)."""

from __future__ import annotations

import ast
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "src" / "pinmatrix" / "shipped"
sys.path.insert(0, str(SHIPPED))
try:
    import _smokelib

    # by its package name (the smokes load it as a plain module): mutation testing only reaches it that way
    from pinmatrix.shipped import _oracles as o
finally:
    sys.path.remove(str(SHIPPED))

RNG = np.random.default_rng(20261130)
BF16 = o.tile_bound("bfloat16")


def to_bf16(x: np.ndarray) -> np.ndarray:
    """Round to bfloat16 (nearest, ties to even) and back to float32: what a bf16 kernel output holds."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def bf16_gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A correct bf16 GEMM: float32 accumulation, one rounding of the output."""
    return to_bf16(a.astype(np.float32) @ b.astype(np.float32))


# -------------------------------------------------------------------------------------------- tiles


def _gemm_case(m: int = 256, k: int = 1024, n: int = 512) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = to_bf16(RNG.standard_normal((m, k)).astype(np.float32))
    b = to_bf16(RNG.standard_normal((k, n)).astype(np.float32))
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def test_a_correct_bf16_gemm_passes_well_inside_the_bound() -> None:
    a, b, ref = _gemm_case()
    check = o.check_tiles(bf16_gemm(a, b), ref, BF16)
    assert check.ok, check.describe()
    assert check.worst_tile < BF16 / 4 and check.worst_row < BF16 / 3
    assert 0.3 * 2**-8 < check.overall < 0.6 * 2**-8  # the error model: ~0.42 u, as measured on the H200


@pytest.mark.parametrize("fault", ["zero-tile", "zero-row", "skip-k-block"])
def test_each_gemm_fault_fails_and_is_located(fault: str) -> None:
    a, b, ref = _gemm_case()
    if fault == "skip-k-block":
        out = bf16_gemm(o.zero_k_block(a, 3, 16), b)
    else:
        out = o.zero_tile(bf16_gemm(a, b)) if fault == "zero-tile" else o.zero_row(bf16_gemm(a, b))
    check = o.check_tiles(out, ref, BF16)
    assert not check.ok
    if fault == "zero-tile":
        assert check.tile_at == (1, 2) and check.worst_tile == pytest.approx(1.0)
        assert check.overall < 0.25  # the old whole-matrix bound of 0.25 let it through
    elif fault == "zero-row":
        assert check.row_at == 5 and check.worst_row == pytest.approx(1.0)
        assert check.overall < 0.1
    else:
        assert check.overall == pytest.approx(math.sqrt(16 / 1024), rel=0.2)  # 1 of 64 K blocks
    assert "tile" in check.describe() and "bound" in check.describe()


def test_faults_leave_their_input_untouched_and_batched_outputs_work() -> None:
    a, b, ref = _gemm_case(128, 256, 192)
    with pytest.raises(ValueError, match="outside"):
        o.zero_tile(np.zeros((128, 128)))
    with pytest.raises(ValueError, match="outside"):
        o.zero_k_block(a, 16, 16)
    before = a.copy()
    o.zero_k_block(a, 0, 16)
    out = bf16_gemm(a, b)
    o.zero_tile(out)
    o.zero_row(out)
    assert np.array_equal(a, before) and o.check_tiles(out, ref, BF16).ok
    batched = np.stack([out, out])
    refs = np.stack([ref, ref])
    assert o.check_tiles(batched, refs, BF16).ok
    broken = o.check_tiles(o.zero_tile(batched), refs, BF16)
    assert not broken.ok and broken.tile_at == (1, 2)  # the first matrix of the batch
    assert o.check_tiles(o.zero_row(batched), refs, BF16).row_at == 5


def test_nan_inf_shape_and_tile_errors() -> None:
    _, _, ref = _gemm_case(64, 64, 64)
    out = ref.copy()
    out[3, 4] = np.nan
    check = o.check_tiles(out, ref, BF16)
    assert not check.ok and check.worst_tile == math.inf and check.row_at == 3
    assert o.check_tiles(np.zeros((64, 64)), np.zeros((64, 64)), BF16).ok  # 0 vs 0 is exact
    with pytest.raises(ValueError, match="shapes differ"):
        o.check_tiles(np.zeros((64, 64)), np.zeros((64, 128)), BF16)
    with pytest.raises(ValueError, match="not made of 64x64 tiles"):
        o.check_tiles(np.zeros((64, 96)), np.zeros((64, 96)), BF16)
    assert o.max_abs_diff(np.ones(3), np.ones(3)) == 0 and o.max_abs_diff(np.array([1.0]), np.array([4.0])) == 3
    assert o.max_abs_diff(np.array([np.nan]), np.array([1.0])) == math.inf


def test_bounds_follow_the_output_type() -> None:
    assert o.tile_bound("bfloat16") == 4 * 2**-8 and o.tile_bound("float16") == 4 * 2**-11
    assert o.tile_bound("float32") == 4 * 2**-24


# --------------------------------------------------------------------------------------------- NVFP4


def test_e4m3_and_e2m1_decoding() -> None:
    assert [o.e4m3_value(b) for b in (0x38, 0x7E, 0x01, 0x08, 0x00, 0xB8)] == [1.0, 448.0, 2.0**-9, 2.0**-6, 0.0,
                                                                              -1.0]
    assert math.isnan(o.e4m3_value(0x7F)) and math.isnan(o.e4m3_value(0xFF))
    assert math.copysign(1, o.e4m3_value(0x80)) == -1
    assert o.e4m3_value(0x3C) == 1.5 and o.e4m3_value(0x07) == 7 / 8 * 2**-6
    raw = np.array([[0x38, 0x7E], [0x01, 0xB8]], dtype=np.uint8)
    assert o.decode_e4m3(raw).tolist() == [[1.0, 448.0], [2.0**-9, -1.0]]
    # two e2m1 values per byte, the FIRST element in the LOW nibble (flashinfer / TensorRT-LLM order)
    packed = np.array([[0x21, 0x9F]], dtype=np.uint8)
    assert o.unpack_e2m1(packed).tolist() == [[0.5, 1.0, -6.0, -0.5]]
    assert o.E2M1[7] == 6.0 and o.E2M1[15] == -6.0


def test_128x4_scale_layout() -> None:
    # [row tile][block tile][row % 32][row % 128 // 32][block % 4]
    assert o.sf_offset_128x4(0, 0, 8) == 0 and o.sf_offset_128x4(0, 3, 8) == 3
    assert o.sf_offset_128x4(32, 0, 8) == 4 and o.sf_offset_128x4(1, 0, 8) == 16
    assert o.sf_offset_128x4(0, 4, 8) == 512 and o.sf_offset_128x4(128, 0, 8) == 1024
    assert o.sf_offset_128x4(33, 2, 4) == 16 + 4 + 2
    offsets = [x for row in o.sf_offsets(256, 8) for x in row]
    assert sorted(offsets) == list(range(256 * 8))  # a permutation: every byte read once
    flat = np.arange(256 * 8, dtype=np.int64)
    assert o.unswizzle_scales(flat, 256, 8).tolist() == o.sf_offsets(256, 8)


def swizzle(linear: np.ndarray) -> np.ndarray:
    rows, blocks = linear.shape
    out = np.zeros(rows * blocks, dtype=linear.dtype)
    for r in range(rows):
        for blk in range(blocks):
            out[o.sf_offset_128x4(r, blk, blocks)] = linear[r, blk]
    return out.reshape(rows, blocks)


def nvfp4_operand(rows: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random packed e2m1 codes and e4m3 block scales (exponents spread over 2**-4..2**4): (packed, swizzled
    scales, the exact values they stand for, computed here element by element from the tables)."""
    codes = RNG.integers(0, 16, size=(rows, k), dtype=np.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    exps = RNG.integers(3, 12, size=(rows, k // 16))
    mans = RNG.integers(0, 8, size=(rows, k // 16))
    scales = ((exps << 3) | mans).astype(np.uint8)
    values = np.array([[o.E2M1[c] for c in row] for row in codes]) * \
        np.repeat(np.array([[o.E4M3[s] for s in row] for row in scales]), 16, axis=1)
    return packed, swizzle(scales), values


def test_dequantise_nvfp4_gives_the_exact_values() -> None:
    packed, sf, values = nvfp4_operand(128, 256)
    deq = o.dequantize_nvfp4(packed, sf, 4.0)
    assert np.array_equal(deq, values / 4.0)


def _nvfp4_case():  # noqa: ANN202
    m, n, k = 256, 256, 1024
    a4, a_sf, _ = nvfp4_operand(m, k)
    b4, b_sf, _ = nvfp4_operand(n, k)
    ref = o.dequantize_nvfp4(a4, a_sf, 1.0) @ o.dequantize_nvfp4(b4, b_sf, 1.0).T

    def kernel(a4_in: np.ndarray, a_sf_in: np.ndarray) -> np.ndarray:  # an emulated mm_fp4: exact inputs, bf16 out
        return to_bf16(o.dequantize_nvfp4(a4_in, a_sf_in, 1.0) @ o.dequantize_nvfp4(b4, b_sf, 1.0).T)

    return a4, a_sf, m, k, ref, kernel


@pytest.mark.parametrize("fault", [None, "skip-k-block", "swap-scales", "zero-tile", "zero-row"])
def test_nvfp4_oracle_catches_each_fault(fault: str | None) -> None:
    a4, a_sf, m, k, ref, kernel = _nvfp4_case()
    if fault == "skip-k-block":  # 1 of 64 K blocks: 8 bytes of two values each
        out = kernel(o.zero_k_block(a4, 3, 8), a_sf)
    elif fault == "swap-scales":
        swapped, (lo, hi) = o.swap_block_scales(a_sf, 0, m, k // 16)
        assert lo != hi and not np.array_equal(swapped, a_sf) and np.array_equal(np.sort(swapped, None),
                                                                                np.sort(a_sf, None))
        out = kernel(a4, swapped)
    else:
        out = kernel(a4, a_sf)
        out = {None: out, "zero-tile": o.zero_tile(out), "zero-row": o.zero_row(out)}[fault]
    check = o.check_tiles(out, ref, BF16)
    assert check.ok is (fault is None), (fault, check.describe())
    if fault == "swap-scales":
        assert check.row_at == 0
        assert check.overall < check.worst_row / 10  # one row of 256: a whole-matrix norm dilutes it 16x
    if fault == "skip-k-block":
        assert check.overall > 2e-2


def test_swap_scales_refuses_a_row_of_equal_scales() -> None:
    sf = swizzle(np.full((128, 8), 0x38, dtype=np.uint8))
    with pytest.raises(ValueError, match="every block scale is 1.0"):
        o.swap_block_scales(sf, 0, 128, 8)


# ------------------------------------------------------------------------------------------ timings


def test_timing_verdict_needs_the_margin_and_the_median() -> None:
    base = [10.0, 10.2, 9.9, 10.1, 10.0, 9.8, 10.3]
    noisy = [10.0, 10.1, 9.9, 30.0, 10.2, 9.8, 10.0]  # one sample 3x slower: the median does not move
    assert o.compare_timings(noisy, base, 0.10).verdict == "within-margin"
    assert o.compare_timings([t * 1.05 for t in base], base, 0.10).verdict == "within-margin"
    slow = o.compare_timings([t * 2 for t in base], base, 0.10)
    assert slow.verdict == "slower" and slow.ratio == pytest.approx(2.0)
    assert o.compare_timings([t * 0.8 for t in base], base, 0.10).verdict == "faster"
    edge = o.compare_timings([11.5] * 5, [10.0] * 5, 0.10)
    assert (edge.verdict, edge.samples, edge.a_median) == ("slower", 5, 11.5)
    assert o.compare_timings([10.9] * 5, [10.0] * 5, 0.10).verdict == "within-margin"
    assert o.compare_timings([9.0] * 5, [10.0] * 5, 0.10).verdict == "faster"
    assert o.compare_timings([9.2] * 5, [10.0] * 5, 0.10).verdict == "within-margin"
    with pytest.raises(ValueError, match="at least 5"):
        o.compare_timings(base[:4], base, 0.1)
    with pytest.raises(ValueError, match="positive"):
        o.compare_timings([0.0] * 5, base, 0.1)


# --------------------------------------------------------------------------------------------- leaks

MiB = 2**20


def test_leak_verdict_is_tied_to_the_allocation_size() -> None:
    before = o.MemorySample(rss=500 * MiB, gpu_used=1000 * MiB, mem_available=20000 * MiB)
    assert o.leak_problems(before, before, 32 * MiB) == []
    noise = o.MemorySample(rss=before.rss + 15 * MiB, gpu_used=before.gpu_used + 2 * MiB,
                           mem_available=before.mem_available - 16 * MiB)
    assert o.leak_problems(before, noise, 32 * MiB) == []
    one_leak = o.MemorySample(rss=before.rss + 32 * MiB, gpu_used=before.gpu_used,
                              mem_available=before.mem_available)
    (problem,) = o.leak_problems(before, one_leak, 32 * MiB)
    assert problem.startswith("process RSS grew 32.0 MiB (limit 16.0 MiB")
    invisible = o.MemorySample(rss=before.rss, gpu_used=before.gpu_used + 64 * MiB,
                               mem_available=before.mem_available - 192 * MiB)
    assert [p.split(" grew")[0] for p in o.leak_problems(before, invisible, 32 * MiB)] == [
        "GPU memory in use", "MemAvailable (system)"]
    # the old check needed a 2 GiB drop after 512 MiB of churn; this one sees one 32 MiB buffer
    assert o.leak_problems(before, o.MemorySample(before.rss, before.gpu_used, before.mem_available - 17 * MiB),
                           32 * MiB)


# ---------------------------------------------------------------------------------------- generation


def test_greedy_tokens_against_reference_logits() -> None:
    logits = RNG.standard_normal((8, 512))
    greedy = [int(np.argmax(row)) for row in logits]
    rows = logits.tolist()
    assert o.greedy_mismatch(greedy, rows, 0.0) is None
    # a near-tie broken the other way is within the tolerance
    tied = logits.copy()
    second = int(np.argsort(tied[2])[-2])
    tied[2, second] = tied[2, greedy[2]] - 0.01
    other = list(greedy)
    other[2] = second
    assert o.greedy_mismatch(other, tied.tolist(), 0.05) is None
    assert "token 2" in o.greedy_mismatch(other, tied.tolist(), 0.001)
    wrong = list(greedy)
    wrong[5] = int(np.argmin(logits[5]))
    assert o.greedy_mismatch(wrong, rows, 0.05).startswith(f"token 5 = {wrong[5]}")
    assert "outside the vocabulary" in o.greedy_mismatch([512] + greedy[1:], rows, 0.05)
    assert o.greedy_mismatch(greedy[:7], rows, 0.05) == "7 tokens but 8 reference rows"


# -------------------------------------------------------------------------------------------- faults


def test_fault_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(o.FAULT_ENV, raising=False)
    assert o.fault(("zero-tile",)) is None
    monkeypatch.setenv(o.FAULT_ENV, "zero-tile")
    assert o.fault(("zero-tile", "zero-row")) == "zero-tile"
    with pytest.raises(o.FaultNotApplicable, match="has no variant in this smoke") as err:
        o.fault(("leak",))
    assert isinstance(err.value, _smokelib.Skip)  # a fault a smoke cannot apply skips: it never passes
    monkeypatch.setenv(o.FAULT_ENV, "bogus")
    with pytest.raises(ValueError, match="not a fault"):
        o.fault(("zero-tile",))


def test_nvidia_smi_rows_in_the_smoke_library() -> None:
    line = (ROOT / "tests" / "data" / "nvidia-smi" / "h200-query-memory.csv").read_text()  # results/h200/log.txt
    assert _smokelib.parse_nvidia_smi(line) == [
        {"name": "NVIDIA H200", "driver": "580.159.04", "capability": "9.0", "memory": "143771 MiB"}]


def _smokes_of(path: Path) -> dict:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "SMOKES" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


@pytest.mark.parametrize("module", sorted(p.name for p in (ROOT / "smoke").glob("*.py") if not p.name.startswith("_")))
def test_each_gpu_smoke_documents_its_oracle_in_two_lines(module: str) -> None:
    path = ROOT / "smoke" / module
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    lines = doc.splitlines()
    gpu = [name for name, spec in _smokes_of(path).items() if spec.get("needs", {}).get("gpu")]
    if not gpu:
        return
    shared = [i for i, ln in enumerate(lines) if ln.startswith("Oracle (two lines, every smoke")]
    if shared:  # one oracle for every smoke of the module: exactly two indented lines
        i = shared[0]
        assert [ln.startswith("  ") for ln in lines[i + 1:i + 4]] in ([True, True], [True, True, False]), module
        return
    for name in gpu:
        at = [i for i, ln in enumerate(lines) if ln.startswith(f"- {name}:")]
        assert at, f"{module}: no oracle line for {name}"
        i = at[0]
        assert lines[i + 1].startswith("  "), f"{module}: {name}'s oracle needs its second line"
        assert i + 2 >= len(lines) or not lines[i + 2].startswith("  "), f"{module}: {name}: two lines, not more"


# ------------------------------------------------------------------ the elementwise check's negative control

def test_the_planted_probe_counts_once_whatever_the_reference() -> None:
    for value in (-1.0, 0.0, 1.0, -1e6, 3e-8, 65504.0):
        ref = np.full((1, 64), value, dtype=np.float32)
        probe = o.planted_probe(ref)
        assert o.count_outside(probe, ref) == 1, value
        assert (ref == value).all() and probe[0, -1] != value  # a copy: the reference is untouched
    ref = np.array([[1.0, np.nan]], dtype=np.float32)
    assert o.count_outside(ref, ref) == 1  # a NaN is outside
    assert o.count_outside(np.array([1.0 + 2.9e-2]), np.array([1.0])) == 0  # just inside the bound
    assert o.count_outside(np.array([1.0 + 1.1e-2 + 2e-2]), np.array([1.0])) == 1


def _judge(out: np.ndarray, ref: np.ndarray, count=o.count_outside):  # noqa: ANN001, ANN202
    """What the tiled-matmul smokes do: compare, then the control on the reference's last row."""
    return o.comparison_failure(count(out, ref), out.size, count(o.planted_probe(ref[-1:]), ref[-1:]), "case")


def test_a_kernel_wrong_only_in_its_last_row_is_a_wrong_result_not_a_harness_error() -> None:
    a = to_bf16(RNG.standard_normal((128, 256)).astype(np.float32) * 256**-0.25)
    b = to_bf16(RNG.standard_normal((256, 128)).astype(np.float32) * 256**-0.25)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    out = bf16_gemm(a, b)
    assert _judge(out, ref) is None
    wrong = out.copy()
    wrong[-1] += 1.0  # every element of the last row off
    assert _judge(wrong, ref) == ("wrong-result", "case: 128 of 16384 output elements wrong")
    # the old control planted into the kernel's own last row: there it counts 128, not 1
    old_probe = wrong[-1:].copy()
    old_probe[0, -1] = ref[-1, -1] + 1 + 4 * abs(ref[-1, -1])
    assert o.count_outside(old_probe, ref[-1:]) == 128
    nan = out.copy()
    nan[-1, -1] = np.nan
    assert _judge(nan, ref) == ("wrong-result", "case: 1 of 16384 output elements wrong")


def test_a_comparison_that_cannot_fail_is_a_harness_error() -> None:
    ref = np.ones((64, 64))
    assert _judge(ref.copy(), ref, count=lambda out, r: 0) == (
        "harness-error", "comparison self-check: a planted wrong element was counted 0 times")
    assert _judge(ref.copy(), ref, count=lambda out, r: out.size) == ("wrong-result",
                                                                     "case: 4096 of 4096 output elements wrong")
    assert o.comparison_failure(0, 10, 2, "x") == ("harness-error",
                                                   "comparison self-check: a planted wrong element was counted 2 times")
    assert o.comparison_failure(0, 10, 1, "x") is None


def test_the_tiled_matmul_smoke_uses_the_independent_control() -> None:
    source = (ROOT / "smoke" / "xformers_tiled.py").read_text()
    tree = ast.parse(source)
    judge = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_control")
    calls = {c.func.id for c in ast.walk(judge) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
    assert "planted_probe" in calls
    assert "out[-1:]" not in source  # nothing is planted into the kernel's output
