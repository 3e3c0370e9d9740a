"""The host's unpack script's progress (src/pinmatrix/shipped/unbundle.py, which cannot import pinmatrix): on a
fake clock, the parts hashed and the files reassembled each say, at most once a second, the bytes done of the
whole with the share, rate and time left, ending at 100%; its lines are the ones pinmatrix.transfer writes for the
same bytes and times, so the two copies of the format cannot drift apart."""

from __future__ import annotations

from pathlib import Path

from test_pack import Project, make_wheels_bundle, project, unbundle_module  # noqa: F401 - the fixture

from pinmatrix.transfer import TransferMeter


class Clock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def test_the_scripts_lines_are_pinmatrix_s_own() -> None:
    shipped = unbundle_module()
    for total, steps in ((48 << 20, [(12 << 20, 3.0), (36 << 20, 1.0)]), (10, [(3, 0.5), (7, 700.0)]),
                         (7 << 40, [(5 << 30, 3.0), (1 << 40, 4000.0)]), (0, [(0, 2.0)]), (100, [(0, 5.0)])):
        clock = Clock()
        ours, theirs = TransferMeter(total, clock=clock), shipped.Progress("x", total, print, clock)
        assert theirs.line() == ours.line()
        for count, seconds in steps:
            clock.now += seconds
            ours.advance(count)
            theirs.done += count
            assert theirs.line() == ours.line(), (total, count)


def test_unpacking_says_the_bytes_of_the_whole_once_a_second(project: Project, tmp_path: Path) -> None:  # noqa: F811
    manifest = make_wheels_bundle(project, tmp_path / "b")
    shipped = unbundle_module()
    ticks = iter(range(0, 10**6, 2))  # every read of the clock two seconds on: every chunk is worth a line
    said: list[str] = []
    shipped.unpack(tmp_path / "b", tmp_path / "dest", None, said.append, clock=lambda: float(next(ticks)))
    parts = [line for line in said if line.startswith("checking the parts: ")]
    files = [line for line in said if line.startswith("unpacking: ")]
    assert len(parts) == len(manifest.parts) and len(files) >= len(manifest.wheels), said  # a line a read
    whole = f"{sum(p.size for p in manifest.parts) / 1024:.1f} KiB"
    assert parts[-1].startswith(f"checking the parts: {whole} of {whole} (100%), ") and parts[-1].endswith("0:00 left")
    assert files[-1].startswith(f"unpacking: {whole} of {whole} (100%), ") and files[-1].endswith("0:00 left")
    assert said.index(parts[-1]) < said.index(files[0])  # every part is checked before a file is written
