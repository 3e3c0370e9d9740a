"""LayerWriter's progress on a fake clock: the tar bytes written so far with the rate, at most one line a second,
of the total `expect` announced (share and time left); the layer's bytes are the same with or without it."""

from __future__ import annotations

from pathlib import Path

from pinmatrix.oci.layer import LayerWriter

EPOCH = 1735689600
MIB = 1 << 20


class FakeClock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


class SlowStream:
    """``size`` bytes of a file, each MiB read taking ``seconds`` on ``clock``."""

    def __init__(self, size: int, clock: FakeClock, seconds: float) -> None:
        self.left, self.clock, self.seconds = size, clock, seconds

    def read(self, n: int = -1) -> bytes:
        take = min(self.left, MIB if n < 0 else n)
        self.left -= take
        self.clock.now += self.seconds * take / MIB
        return b"\0" * take


def _write(blobs: Path, clock: FakeClock, said: list[str] | None, expect: int | None = None) -> str:
    writer = LayerWriter(blobs, epoch=EPOCH, progress=said.append if said is not None else None,
                         what="layer wheel:big", clock=clock)
    if expect is not None:
        writer.expect(expect)
    writer.add_file("opt/venv/big.bin", SlowStream(8 * MIB, clock, 0.25), 8 * MIB)  # type: ignore[arg-type]
    return writer.close().digest


def test_a_layer_write_says_bytes_share_rate_and_time_left_once_a_second(tmp_path: Path) -> None:
    said: list[str] = []
    digest = _write(tmp_path / "a", FakeClock(), said, expect=8 * MIB)
    # 8 MiB at 4 MiB/s: a line at 1 s (4 MiB read, as the tar has written them) ... 2 s, never more often
    assert said == ["layer wheel:big: 4.0 MiB of 8.0 MiB (50%), 4.0 MiB/s, 0:01 left",
                    "layer wheel:big: 8.0 MiB of 8.0 MiB (100%), 4.0 MiB/s, 0:00 left"], said
    assert digest == _write(tmp_path / "b", FakeClock(), None)  # the same bytes without progress


def test_without_an_expected_total_only_bytes_and_rate(tmp_path: Path) -> None:
    said: list[str] = []
    _write(tmp_path, FakeClock(), said)
    assert said[0] == "layer wheel:big: 4.0 MiB, 4.0 MiB/s" and len(said) == 2, said
