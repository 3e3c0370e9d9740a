"""transfer.TransferMeter on a fake clock: bytes done of the total with the share, the rate so far and the time
left; nothing said of a rate before time passed or of a time left without a total; a line at most once per
``every`` seconds; the units people read (KiB, MiB, GiB; m:ss and h:mm:ss); a copy whose bytes cannot be
watched said with its total as it starts and with time and rate once it ended, never as done when it failed."""

from __future__ import annotations

import pytest

from pinmatrix.transfer import TransferMeter, human_bytes, human_seconds, opaque_copy


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bytes_rate_and_time_left_on_a_fake_clock() -> None:
    clock = FakeClock()
    meter = TransferMeter(48 << 20, clock=clock)
    assert meter.line() == "0 B of 48.0 MiB (0%)"  # no rate and no time left before any byte or second
    meter.advance(12 << 20)
    clock.now += 3
    assert meter.line() == "12.0 MiB of 48.0 MiB (25%), 4.0 MiB/s, 0:09 left"
    meter.advance(36 << 20)
    clock.now += 1
    assert meter.line() == "48.0 MiB of 48.0 MiB (100%), 12.0 MiB/s, 0:00 left"


def test_without_a_total_only_bytes_and_rate() -> None:
    clock = FakeClock()
    meter = TransferMeter(None, clock=clock)
    meter.advance(3 << 30)
    clock.now += 2
    assert meter.line() == "3.0 GiB, 1.5 GiB/s" and meter.left() is None


def test_a_line_is_due_once_a_second() -> None:
    clock = FakeClock()
    meter = TransferMeter(10, clock=clock)
    assert not meter.due()
    clock.now += 0.6
    assert not meter.due()
    clock.now += 0.5
    assert meter.due() and not meter.due()


def test_units() -> None:
    assert [human_bytes(n) for n in (0, 1023, 1536, 5 << 20, 3 * (1 << 40))] == [
        "0 B", "1023 B", "1.5 KiB", "5.0 MiB", "3.0 TiB"]
    assert [human_seconds(s) for s in (0, 9.4, 725, 3723)] == ["0:00", "0:09", "12:05", "1:02:03"]


def test_summary_says_the_bytes_the_time_and_the_rate() -> None:
    clock = FakeClock()
    meter = TransferMeter(None, clock=clock)
    assert meter.summary() == "0 B in 0:00"
    meter.advance(96 << 20)
    clock.now += 8
    assert meter.summary() == "96.0 MiB in 0:08, 12.0 MiB/s"


def test_an_opaque_copy_is_said_as_it_starts_and_once_it_ended() -> None:
    clock, said = FakeClock(), []
    with opaque_copy("pull r", 30 << 20, said.append, tool="podman", clock=clock):
        clock.now += 10
    assert said == ["pull r: 30.0 MiB (podman; no progress until it ends)", "pull r: done, 30.0 MiB in 0:10, 3.0 MiB/s"]
    said.clear()
    with opaque_copy("pull r", None, said.append, tool="docker", clock=clock):
        clock.now += 65
    assert said == ["pull r: size not known (docker; no progress until it ends)", "pull r: done in 1:05"]
    said.clear()
    with pytest.raises(OSError), opaque_copy("pull r", 1, said.append, tool="podman", clock=clock):
        raise OSError("refused")
    assert said == ["pull r: 1 B (podman; no progress until it ends)"]
