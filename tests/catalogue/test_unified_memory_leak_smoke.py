"""The unified-memory-leak smoke (smoke/host.py) on this machine's CPU: a fake CUDA driver whose managed
allocations are host memory, and a /proc/meminfo that the test moves. It reports AnonPages, Slab, the managed bytes
it still holds and the unexplained drop beside its verdict (MemAvailable against the process's own accounting), and
its verdict rules stand: a drop only MemAvailable shows (590.48.01) fails with the drop named unexplained; a leak
of the process's own (the fault) fails too, explained by what it holds; a steady host passes."""

from __future__ import annotations

import ctypes
import importlib.util
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from conftest import REPO

MiB = 2**20


class FakeCudaLib:
    """The driver calls the smoke makes; a managed allocation is a host buffer kept alive until freed."""

    def __init__(self) -> None:
        self.live: dict[int, Any] = {}

    def cuDeviceGet(self, *_: object) -> int:  # noqa: N802 - the driver's own names
        return 0

    cuDevicePrimaryCtxRetain = cuCtxSetCurrent = cuCtxSynchronize = cuDeviceGet  # noqa: N815

    def cuMemAllocManaged(self, ref: Any, size: ctypes.c_size_t, _flags: int) -> int:  # noqa: N802
        buf = ctypes.create_string_buffer(size.value)
        ref._obj.value = ctypes.addressof(buf)
        self.live[ref._obj.value] = buf
        return 0

    def cuMemsetD8_v2(self, ptr: ctypes.c_uint64, value: int, size: ctypes.c_size_t) -> int:  # noqa: N802
        ctypes.memset(ptr.value, value, size.value)
        return 0

    def cuMemFree_v2(self, ptr: ctypes.c_uint64) -> int:  # noqa: N802
        del self.live[ptr.value]
        return 0

    def cuMemGetInfo_v2(self, free: Any, total: Any) -> int:  # noqa: N802
        total._obj.value = 96 * 1024 * MiB
        free._obj.value = total._obj.value - 1000 * MiB - sum(len(b) for b in self.live.values())
        return 0


class FakeDriver:
    def __init__(self) -> None:
        self.lib = FakeCudaLib()

    def check(self, rc: int, what: str) -> None:
        assert rc == 0, what


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.syspath_prepend(str(REPO / "src" / "pinmatrix" / "shipped"))
    spec = importlib.util.spec_from_file_location("pinmatrix_test_host_smoke_leak", REPO / "smoke" / "host.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    driver = FakeDriver()
    monkeypatch.setattr(module, "cuda_driver", lambda: driver)
    monkeypatch.setattr(module, "_rss", lambda: 900 * MiB)
    monkeypatch.delenv("PINMATRIX_FAULT", raising=False)
    yield module


def _meminfo(monkeypatch: pytest.MonkeyPatch, host: ModuleType, *readings: dict[str, int]) -> None:
    """The readings /proc/meminfo gives, one per call, in MiB."""
    left = [{k: v * MiB for k, v in r.items()} for r in readings]
    monkeypatch.setattr(host, "_meminfo", lambda: left.pop(0))


STEADY = {"MemAvailable": 100_000, "AnonPages": 2_000, "Slab": 500}


def test_a_steady_host_passes_and_reports_the_accounting(monkeypatch: pytest.MonkeyPatch, host: ModuleType) -> None:
    _meminfo(monkeypatch, host, STEADY, {"MemAvailable": 99_988, "AnonPages": 2_010, "Slab": 500})
    ctx = host.Context("unified-memory-leak", host.SMOKES["unified-memory-leak"])
    host.um_leak(ctx)
    assert (ctx.metrics["anon_pages_growth_mib"], ctx.metrics["slab_growth_mib"], ctx.metrics["held_mib"],
            ctx.metrics["unexplained_drop_mib"]) == (10, 0, 0, 2)  # 10 of the 12 MiB: pages of the host's
    assert ctx.summary.endswith("MemAvailable -12.0 MiB (limit 16 MiB each), unexplained drop 2.0 MiB")


def test_a_drop_only_memavailable_shows_fails_as_unexplained(monkeypatch: pytest.MonkeyPatch,
                                                              host: ModuleType) -> None:
    _meminfo(monkeypatch, host, STEADY, {"MemAvailable": 99_808, "AnonPages": 2_001, "Slab": 500})
    ctx = host.Context("unified-memory-leak", host.SMOKES["unified-memory-leak"])
    with pytest.raises(host.Fail) as failed:
        host.um_leak(ctx)
    assert failed.value.failure_class == "memory-leak"
    assert str(failed.value).endswith("; 191.0 MiB of MemAvailable's drop explained by neither RSS, AnonPages, "
                                      "Slab nor the managed bytes still held")
    assert ctx.metrics["unexplained_drop_mib"] == 191 and ctx.metrics["anon_pages_growth_mib"] == 1


def test_the_processs_own_leak_is_explained_by_what_it_holds(monkeypatch: pytest.MonkeyPatch,
                                                             host: ModuleType) -> None:
    monkeypatch.setenv("PINMATRIX_FAULT", "leak")  # one 32 MiB buffer kept per round, 6 rounds
    _meminfo(monkeypatch, host, STEADY, {"MemAvailable": 99_808, "AnonPages": 2_000, "Slab": 500})
    ctx = host.Context("unified-memory-leak", host.SMOKES["unified-memory-leak"])
    with pytest.raises(host.Fail, match="GPU memory in use grew 192.0 MiB"):
        host.um_leak(ctx)
    assert ctx.metrics["held_mib"] == 192 and ctx.metrics["unexplained_drop_mib"] == 0


def test_what_explains_a_drop(host: ModuleType) -> None:
    before = {"MemAvailable": 1000 * MiB, "AnonPages": 100 * MiB, "Slab": 50 * MiB, "rss": 80 * MiB}
    grown = {"MemAvailable": 900 * MiB, "AnonPages": 140 * MiB, "Slab": 60 * MiB, "rss": 120 * MiB}
    assert host.unexplained_drop(before, grown, 0) == 50 * MiB  # RSS and AnonPages are the same 40 MiB, once
    assert host.unexplained_drop(before, grown, 50 * MiB) == 0
    shrunk = {**before, "MemAvailable": 900 * MiB, "AnonPages": 0, "rss": 0}
    assert host.unexplained_drop(before, shrunk, 0) == 100 * MiB  # a shrinking counter explains nothing
