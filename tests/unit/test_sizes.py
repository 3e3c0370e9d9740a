"""Byte counts on the command line (pinmatrix.sizes): units, bounds, one-line refusals naming the option; a file
read no further than its cap."""

from __future__ import annotations

from pathlib import Path

import pytest

from pinmatrix.errors import PinmatrixError
from pinmatrix.sizes import SizeError, parse_size, read_capped


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


def test_a_file_is_read_up_to_its_cap_and_refused_past_it_in_the_callers_error(tmp_path: Path) -> None:
    class _Refused(PinmatrixError):
        pass

    path = tmp_path / "list.txt"
    path.write_bytes(b"x" * 10)
    assert read_capped(path, 10, "a list", _Refused) == b"x" * 10
    path.write_bytes(b"x" * 11)
    with pytest.raises(_Refused) as err:
        read_capped(path, 10, "a list", _Refused)
    assert str(err.value) == f"{path}: larger than 10 bytes: not a list"
    with pytest.raises(_Refused) as err:
        read_capped(tmp_path / "gone.txt", 10, "a list", _Refused)
    assert str(err.value) == f"{tmp_path / 'gone.txt'}: cannot read a list: No such file or directory"
