"""Which wheel layers share one layer: by the wheels' sizes (``--merge-below``), and past ``max_layers`` by the
blobs' sizes (image/assembly/merge.py)."""

from __future__ import annotations

import pytest

from pinmatrix.image.assembly import merge


def test_by_size_takes_the_wheels_strictly_below_the_bound_and_only_two_or_more() -> None:
    sizes = {"wheel:torch==2": 900, "wheel:six==1": 10, "wheel:idna==3": 99, "wheel:odd==1": None, "wheel:at==1": 100}
    assert merge.by_size(sizes, 100) == ["wheel:idna==3", "wheel:six==1"]  # 100 is not below 100; None not merged
    assert merge.by_size(sizes, 101) == ["wheel:at==1", "wheel:idna==3", "wheel:six==1"]
    assert merge.by_size(sizes, 50) == []  # one small wheel: its own layer already
    assert merge.by_size(sizes, 0) == [] and merge.by_size(sizes, -1) == []  # off
    assert merge.by_size({}, 1 << 30) == []


def test_parts_to_merge_past_the_bound_takes_the_smallest_blobs_as_before() -> None:
    blobs = {"wheel:a==1": 5, "wheel:b==1": 1, "wheel:c==1": 3, "wheel:d==1": 3}
    # 7 layers (base, venv, 4 wheels, smoke): within 7 nothing; at 6 the two smallest make one; at 5, three
    assert merge.parts_to_merge(7, blobs, [], 7) == []
    # ties: the later name goes first, as the merge always chose (the gb10 images past 100 layers keep their digests)
    assert merge.parts_to_merge(7, blobs, [], 6) == ["wheel:b==1", "wheel:d==1"]
    assert merge.parts_to_merge(7, blobs, [], 5) == ["wheel:b==1", "wheel:c==1", "wheel:d==1"]
    assert merge.parts_to_merge(7, blobs, [], 1) == sorted(blobs)  # never more than the wheels


def test_parts_to_merge_keeps_the_plans_choice_and_adds_to_it_only_past_the_bound() -> None:
    blobs = {"wheel:a==1": 5, "wheel:b==1": 1, "wheel:c==1": 3, "wheel:d==1": 9}
    chosen = ["wheel:a==1", "wheel:b==1"]
    assert merge.parts_to_merge(7, blobs, chosen, 100) == chosen  # by size, whatever the blobs' sizes
    assert merge.parts_to_merge(7, blobs, chosen, 6) == chosen  # 7 - 2 + 1 = 6 layers: within the bound
    assert merge.parts_to_merge(7, blobs, chosen, 5) == ["wheel:a==1", "wheel:b==1", "wheel:c==1"]
    assert merge.parts_to_merge(7, blobs, ["wheel:a==1"], 100) == []  # one alone is no merge
    # one alone is not a choice: past the bound the smallest two are merged, not it and the smallest
    assert merge.parts_to_merge(7, blobs, ["wheel:d==1"], 6) == ["wheel:b==1", "wheel:c==1"]
    assert merge.parts_to_merge(7, blobs, ["wheel:a==1", "wheel:gone==1"], 100) == []  # only layers it has


@pytest.mark.parametrize(("names", "at"), [
    (["base", "venv", "wheel:a==1", "patch:p", "smoke"], 3), (["base", "venv", "wheel:a==1", "smoke", "ca"], 3),
    (["base", "venv", "wheel:a==1", "cuda-link"], 3), (["base", "venv"], 2),
    (["base", "venv", "wheel:a==1", "wheel:b==1", "cuda-link", "flashinfer-aot", "patch:p", "smoke"], 4),
    (["base", "venv", "cuda-link", "smoke"], 2), (["base", "smoke"], 2),
])
def test_the_merged_layer_goes_right_after_the_wheels_before_link_aot_patches_smoke_and_ca(names: list[str],
                                                                                         at: int) -> None:
    assert merge.insert_position(names) == at


def test_merged_name_lists_each_part() -> None:
    assert merge.merged_name(["wheel:a==1", "wheel:b-c==2.0"]) == "wheels:a==1,b-c==2.0"
