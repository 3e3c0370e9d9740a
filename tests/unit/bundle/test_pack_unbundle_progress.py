"""The host unpacker's progress lines, in process on ``pinmatrix.shipped.unbundle`` itself (mutation testing runs a
mutant only in a module of that name: ``unbundle_module()``'s copy in test_pack_unpacker.py runs the original):
the bytes and times it says, the line against pinmatrix's own TransferMeter, and a line at most once a second."""

from __future__ import annotations

import pytest

from pinmatrix.shipped import unbundle
from pinmatrix.transfer import TransferMeter, human_bytes, human_seconds


class Clock:
    def __init__(self, now: float = 10.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("count", "said"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (1023.9, "1023 B"),
    ((1 << 20) - 1, "1024.0 KiB"), (3 << 20, "3.0 MiB"), (5 << 30, "5.0 GiB"), (7 << 40, "7.0 TiB"),
    (5 << 50, "5120.0 TiB"),  # no unit past TiB
])
def test_bytes_are_said_in_the_largest_unit_up_to_tib(count: float, said: str) -> None:
    assert unbundle._bytes(count) == said == human_bytes(count)


@pytest.mark.parametrize(("seconds", "said"), [
    (0, "0:00"), (9.4, "0:09"), (9.6, "0:10"), (59, "0:59"), (60, "1:00"), (3599, "59:59"), (3600, "1:00:00"),
    (3725, "1:02:05"), (36000 + 61, "10:01:01"),
])
def test_times_are_said_as_minutes_or_hours(seconds: float, said: str) -> None:
    assert unbundle._seconds(seconds) == said == human_seconds(seconds)


@pytest.mark.parametrize(("total", "steps"), [
    (48 << 20, [(12 << 20, 3.0), (36 << 20, 1.0)]), (10, [(3, 0.5), (7, 700.0)]), (100, [(0, 5.0), (150, 1.0)]),
    (7 << 40, [(5 << 30, 3.0), (1 << 40, 4000.0)]), (0, [(0, 2.0), (5, 1.0)]), (100, [(40, 0.0)]),
])
def test_a_line_is_transfer_meter_s_line(total: int, steps: list[tuple[int, float]]) -> None:
    clock = Clock()
    ours, theirs = TransferMeter(total, clock=clock), unbundle.Progress("x", total, print, clock)
    assert theirs.line() == ours.line()
    for count, seconds in steps:
        clock.now += seconds
        ours.advance(count)
        theirs.done += count
        assert theirs.line() == ours.line(), (total, count, seconds)


def test_the_lines_exact_words() -> None:
    clock = Clock()
    progress = unbundle.Progress("x", 48 << 20, print, clock)
    assert progress.line() == "0 B of 48.0 MiB (0%)"
    clock.now += 3.0
    progress.done = 12 << 20
    assert progress.line() == "12.0 MiB of 48.0 MiB (25%), 4.0 MiB/s, 0:09 left"
    progress.done = 60 << 20  # more than the total: 100%, nothing left
    assert progress.line() == "60.0 MiB of 48.0 MiB (100%), 20.0 MiB/s, 0:00 left"
    empty = unbundle.Progress("x", 0, print, clock)
    clock.now += 1.0
    empty.done = 5
    assert empty.line() == "5 B, 5 B/s, 0:00 left"
    third = unbundle.Progress("x", 3, print, clock)
    clock.now += 1.0
    third.done = 1  # one byte is a rate
    assert third.line() == "1 B of 3 B (33%), 1 B/s, 0:02 left"
    third.done = 2  # the share rounds down
    assert third.line() == "2 B of 3 B (66%), 2 B/s, 0:00 left"


def test_advance_counts_every_byte_and_says_a_line_at_most_once_a_second() -> None:
    clock, said = Clock(), []
    progress = unbundle.Progress("unpacking", 100, said.append, clock)
    clock.now = 10.5
    progress.advance(10)
    assert said == [] and progress.done == 10  # half a second: no line yet
    clock.now = 11.0
    progress.advance(10)  # a second exactly since the start
    assert said == ["unpacking: 20 B of 100 B (20%), 20 B/s, 0:04 left"]
    clock.now = 11.9
    progress.advance(30)
    assert len(said) == 1 and progress.done == 50  # 0.9 s since the last line
    clock.now = 12.0
    progress.advance(0)
    assert said[1:] == ["unpacking: 50 B of 100 B (50%), 25 B/s, 0:02 left"]
    clock.now = 13.5
    progress.advance(25)
    assert said[2:] == ["unpacking: 75 B of 100 B (75%), 21 B/s, 0:01 left"]
