"""bundle/pack.write_parts' progress on a fake clock: each part written says the bytes of the whole bundle, the
share, the rate and the time left; within a long part a line about once a second says the same."""

from __future__ import annotations

from pathlib import Path

from pinmatrix.bundle import pack


def test_each_part_says_the_whole_bundles_bytes_rate_and_time_left(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    files = []
    for n in range(2):
        path = tmp_path / f"f{n}"
        path.write_bytes(bytes([n]) * (3 << 20))  # 6 MiB in all
        files.append(path)
    out = tmp_path / "parts"
    out.mkdir()
    clock = [0.0]
    monkeypatch.setattr(pack, "CHUNK", 1 << 20)  # a read of 1 MiB ...

    real_open = open

    class Timed:  # ... takes one second of the fake clock
        def __init__(self, handle) -> None:  # noqa: ANN001
            self.handle = handle

        def __enter__(self):  # noqa: ANN204
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()

        def read(self, size: int) -> bytes:
            data = self.handle.read(size)
            clock[0] += 1.0 if data else 0.0
            return data

    monkeypatch.setattr(pack, "open", lambda p, mode="r": Timed(real_open(p, mode)) if mode == "rb"
                        else real_open(p, mode), raising=False)
    lines: list[str] = []
    parts = pack.write_parts(files, 4 << 20, out, lines.append, clock=lambda: clock[0])
    assert [p.size for p in parts] == [4 << 20, 2 << 20]
    assert lines == [
        "writing part 1/2: 1.0 MiB of 6.0 MiB (16%), 1.0 MiB/s, 0:05 left",
        "writing part 1/2: 2.0 MiB of 6.0 MiB (33%), 1.0 MiB/s, 0:04 left",
        "writing part 1/2: 3.0 MiB of 6.0 MiB (50%), 1.0 MiB/s, 0:03 left",
        "part 1/2 part-001-of-002.bin: 4194304 bytes; 4.0 MiB of 6.0 MiB (66%), 1.0 MiB/s, 0:02 left",
        "writing part 2/2: 5.0 MiB of 6.0 MiB (83%), 1.0 MiB/s, 0:01 left",
        "writing part 2/2: 6.0 MiB of 6.0 MiB (100%), 1.0 MiB/s, 0:00 left",
        "part 2/2 part-002-of-002.bin: 2097152 bytes; 6.0 MiB of 6.0 MiB (100%), 1.0 MiB/s, 0:00 left"]
