"""The smoke oracles (src/pinmatrix/shipped/_oracles.py) at their edges, on numpy: a fault's messages, the bounds of
zero_k_block and zero_tile (a block or tile that just fits, one just outside, in 3-D inputs), which two block
scales are swapped, the 128x4 layout past four block tiles, the tolerance's own boundary, timings under a second,
the leak message's sizes and a greedy token 0."""

from __future__ import annotations

import numpy as np
import pytest
from test_oracles import o, swizzle

MiB = 2**20


def test_a_faults_messages_name_the_faults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(o.FAULT_ENV, "bogus")
    with pytest.raises(ValueError) as err:
        o.fault(("zero-tile",))
    assert str(err.value) == f"${o.FAULT_ENV}='bogus': not a fault (faults: {', '.join(o.FAULTS)})"
    monkeypatch.setenv(o.FAULT_ENV, "leak")
    with pytest.raises(o.FaultNotApplicable) as skip:
        o.fault(("zero-tile", "zero-row"))
    assert str(skip.value) == "fault 'leak' has no variant in this smoke (it has: zero-tile, zero-row)"
    with pytest.raises(o.FaultNotApplicable) as skip:
        o.fault()
    assert str(skip.value) == "fault 'leak' has no variant in this smoke (it has: none)"


def test_a_k_block_that_just_fits_is_zeroed_and_one_outside_is_refused_in_any_rank() -> None:
    x = np.ones((2, 64, 128))
    y = o.zero_k_block(x, 7, 16)  # elements 112..127: the last block of the last dimension
    assert (y[..., 112:] == 0).all() and (y[..., :112] == 1).all() and (x == 1).all()
    assert (o.zero_k_block(x, 4, 16)[..., 64:80] == 0).all()  # beyond the middle dimension's 64: still inside
    with pytest.raises(ValueError) as err:
        o.zero_k_block(x, 8, 16)
    assert str(err.value) == "K block 8 of width 16 is outside a last dimension of 128"


def test_a_tile_that_just_fits_is_zeroed_and_one_outside_is_refused() -> None:
    m = np.ones((128, 256))
    assert (o.zero_tile(m, 1, 3)[64:, 192:] == 0).all()
    for i, j in ((2, 0), (0, 4)):
        with pytest.raises(ValueError) as err:
            o.zero_tile(m, i, j)
        assert str(err.value) == f"tile ({i},{j}) is outside a 128x256 matrix"


def test_the_two_most_different_scales_are_swapped_wherever_they_are() -> None:
    linear = np.full((128, 8), 0x38, dtype=np.uint8)  # 1.0
    linear[0, 2], linear[0, 5] = 0x30, 0x48  # 0.5 and 4.0, in the middle of the row
    sf = swizzle(linear)
    swapped, blocks = o.swap_block_scales(sf, 0, 128, 8)
    assert blocks == (2, 5) and swapped.shape == sf.shape
    back = swapped.reshape(-1)[[o.sf_offset_128x4(0, b, 8) for b in range(8)]]
    assert back.tolist() == [0x38, 0x38, 0x48, 0x38, 0x38, 0x30, 0x38, 0x38]


def test_the_scale_layout_past_four_block_tiles_is_a_permutation() -> None:
    offsets = [x for row in o.sf_offsets(256, 16) for x in row]
    assert sorted(offsets) == list(range(256 * 16))
    assert o.sf_offset_128x4(128, 0, 16) == 4 * 512  # row tile 1 starts after the 4 block tiles of row tile 0


def test_an_element_exactly_at_the_tolerance_is_inside() -> None:
    assert o.count_outside(np.array([0.5, 0.75]), np.array([0.0, 0.0]), atol=0.5, rtol=0.0) == 1
    assert o.max_abs_diff(np.array(2.0), np.array(-1.0)) == 3.0  # 0-d inputs


def test_timings_under_a_second_compare_and_the_refusals_say_why() -> None:
    fast = [0.001, 0.0011, 0.0009, 0.001, 0.001]
    assert o.compare_timings(fast, [t * 2 for t in fast], 0.1).verdict == "faster"
    with pytest.raises(ValueError) as err:
        o.compare_timings(fast[:4], fast, 0.1)
    assert str(err.value) == "a timing comparison needs at least 5 samples of each side"
    with pytest.raises(ValueError) as err:
        o.compare_timings([-1.0] * 5, fast, 0.1)
    assert str(err.value) == "timings must be positive"


def test_the_leak_message_gives_the_growth_the_limit_and_the_allocation() -> None:
    before = o.MemorySample(rss=500 * MiB, gpu_used=0, mem_available=0)
    after = o.MemorySample(rss=before.rss + 40 * MiB, gpu_used=0, mem_available=0)
    assert o.leak_problems(before, after, 32 * MiB) == [
        "process RSS grew 40.0 MiB (limit 16.0 MiB = half of one 32 MiB allocation)"]


def test_a_greedy_token_0_is_inside_the_vocabulary() -> None:
    logits = [[5.0, 1.0, 0.0], [0.0, 2.0, 9.0]]
    assert o.greedy_mismatch([0, 2], logits, 0.0) is None
    assert o.greedy_mismatch([-1, 2], logits, 0.0) == "token 0 = -1 is outside the vocabulary of 3"


def test_the_planted_probe_moves_the_last_element_by_its_own_value() -> None:
    ref = np.array([[1.0, -3.0, 2.0]])
    assert o.planted_probe(ref).tolist() == [[1.0, -3.0, 2.0 + 1 + 4 * 2.0]]


def test_of_equally_bad_tiles_the_first_is_named() -> None:
    out = o.zero_tile(o.zero_tile(np.ones((128, 128)), 0, 1), 1, 0)
    assert o.check_tiles(out, np.ones((128, 128)), 0.01).tile_at == (0, 1)


def test_a_small_reference_has_a_relative_error_and_a_zero_one_an_infinite_one() -> None:
    ref = np.full((64, 64), 1e-3)
    check = o.check_tiles(ref * 1.01, ref, 0.02)
    assert check.ok and check.worst_tile == pytest.approx(0.01)  # a tile's squared norm of 0.004: still relative
    assert o.check_tiles(np.ones((64, 64)), np.zeros((64, 64)), 0.02).worst_tile == float("inf")
