"""WheelFetcher.fetch's progress: a download says, about once a second of the (fake) clock, the bytes of the
wheel's declared size, the rate and the time left; a cached wheel says nothing."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

from pinmatrix.index.wheel_index import WheelFetcher, WheelFile


class SlowBody(io.BytesIO):
    """An index's response whose every read takes one second of ``clock``."""

    def __init__(self, data: bytes, clock: list[float]) -> None:
        super().__init__(data)
        self.clock = clock

    def read(self, size: int | None = -1) -> bytes:
        self.clock[0] += 1.0
        return super().read(1 << 20 if size is None or size < 0 else min(size, 1 << 20))


def test_a_download_says_bytes_rate_and_time_left(tmp_path: Path) -> None:
    data = bytes(range(256)) * (4 << 12)  # 4 MiB: four reads of 1 MiB
    wheel = WheelFile("tiny", "1.0", "tiny-1.0-py3-none-any.whl", "https://index.test/tiny.whl",
                      hashlib.sha256(data).hexdigest(), len(data))
    clock = [0.0]
    fetcher = WheelFetcher(tmp_path / "cache")
    fetcher.clock = lambda: clock[0]
    fetcher._open = lambda url, accept=None: SlowBody(data, clock)  # type: ignore[method-assign]
    lines: list[str] = []
    path = fetcher.fetch(wheel, progress=lines.append)
    assert path.read_bytes() == data
    assert lines == ["fetch tiny-1.0-py3-none-any.whl: 1.0 MiB of 4.0 MiB (25%), 1.0 MiB/s, 0:03 left",
                     "fetch tiny-1.0-py3-none-any.whl: 2.0 MiB of 4.0 MiB (50%), 1.0 MiB/s, 0:02 left",
                     "fetch tiny-1.0-py3-none-any.whl: 3.0 MiB of 4.0 MiB (75%), 1.0 MiB/s, 0:01 left",
                     "fetch tiny-1.0-py3-none-any.whl: 4.0 MiB of 4.0 MiB (100%), 1.0 MiB/s, 0:00 left"]
    lines.clear()
    assert fetcher.fetch(wheel, progress=lines.append) == path and lines == []  # cached: no transfer
