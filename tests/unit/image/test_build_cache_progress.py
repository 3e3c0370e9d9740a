"""A layer fetched from the build cache says how its bytes come (issue 45's progress): at most one line a second,
``fetch WHAT from the build cache: bytes of size (share), rate, time left``; a blob already in the layout is not
fetched and says nothing; without a listener nothing is said and the blob still comes."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pinmatrix.image.build_cache import BuildCache, CacheTrust, Found
from pinmatrix.oci.layer import LayerDescriptor
from pinmatrix.oci.layout import OCILayout

REF = "127.0.0.1:5999/cache"
CHUNK = 1 << 20


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Reader:
    """A blob as the registry client streams it: chunks, the clock moving 0.6 s per chunk."""

    def __init__(self, data: bytes, clock: Clock) -> None:
        self.data, self.clock, self.read_bytes = data, clock, 0
        self.length: int | None = len(data)  # the Content-Length the registry declared

    def read(self, size: int = CHUNK) -> bytes:
        chunk = self.data[self.read_bytes:self.read_bytes + CHUNK]
        self.read_bytes += len(chunk)
        if chunk:
            self.clock.now += 0.6
        return chunk


class Registry:
    def __init__(self, data: bytes, clock: Clock) -> None:
        self.data, self.clock, self.opened = data, clock, 0

    @contextmanager
    def open_blob(self, repository: str, digest: str) -> Iterator[Reader]:
        self.opened += 1
        yield Reader(self.data, self.clock)


def _setup(tmp_path: Path) -> tuple[BuildCache, Registry, Found, OCILayout, Clock]:
    data = bytes(range(256)) * (4 * CHUNK // 256)  # 4 MiB
    clock = Clock()
    registry = Registry(data, clock)
    cache = BuildCache(CacheTrust(verify=lambda envelope: envelope), cache_from=REF,
                       registries={REF: registry})  # type: ignore[dict-item]
    layer = LayerDescriptor(media_type="application/vnd.oci.image.layer.v1.tar+gzip",
                            digest="sha256:" + hashlib.sha256(data).hexdigest(), size=len(data),
                            diff_id="sha256:" + "0" * 64)
    layout = OCILayout(tmp_path / "oci")
    layout.init()
    return cache, registry, Found("k" * 64, layer, {}, {}), layout, clock


def test_a_fetched_layer_says_its_bytes_at_most_once_a_second(tmp_path: Path) -> None:
    cache, registry, found, layout, clock = _setup(tmp_path)
    lines: list[str] = []
    assert cache.complete(found, "layer wheel:torch==2.15.0", layout, progress=lines.append, clock=clock)
    assert layout.blob_path(found.layer.digest).read_bytes() == registry.data
    assert lines == [
        "fetch layer wheel:torch==2.15.0 from the build cache: 2.0 MiB of 4.0 MiB (50%), 1.7 MiB/s, 0:01 left",
        "fetch layer wheel:torch==2.15.0 from the build cache: 4.0 MiB of 4.0 MiB (100%), 1.7 MiB/s, 0:00 left",
    ]
    assert cache.report.hits == 1


def test_a_blob_already_here_is_not_fetched_and_says_nothing(tmp_path: Path) -> None:
    cache, registry, found, layout, clock = _setup(tmp_path)
    assert cache.complete(found, "layer x", layout, clock=clock)  # no listener: silent, the blob still comes
    lines: list[str] = []
    assert cache.complete(found, "layer x", layout, progress=lines.append, clock=clock)
    assert registry.opened == 1 and lines == []
