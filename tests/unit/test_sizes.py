"""Byte counts on the command line (pinmatrix.sizes): units, bounds, one-line refusals naming the option."""

from __future__ import annotations

import pytest

from pinmatrix.sizes import SizeError, parse_size


@pytest.mark.parametrize(("text", "size"), [
    ("56MB", 56_000_000), ("60MiB", 60 << 20), ("4096", 4096), (" 1.5 KiB ", 1536), ("2gib", 2 << 30), ("7B", 7),
])
def test_sizes_in_decimal_and_binary_units(text: str, size: int) -> None:
    assert parse_size(text, "--x") == size


def test_the_floor_and_bad_text_are_refused_naming_the_option() -> None:
    assert parse_size("0", "--merge-below", minimum=0) == 0
    with pytest.raises(SizeError, match=r"^--part-size '0': at least 1 byte$"):
        parse_size("0", "--part-size")
    with pytest.raises(SizeError, match=r"^--x '10': at least 64 bytes$"):
        parse_size("10", "--x", minimum=64)
    for bad in ("-1MB", "1 XB", "", "1e9", "9" * 16):
        with pytest.raises(SizeError, match=r"expected a size such as 56MB, 60MiB or 1000000"):
            parse_size(bad, "--x")
