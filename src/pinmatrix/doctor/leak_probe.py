"""The child of ``pinmatrix doctor --leak-check``: a few seconds of allocate / touch / free rounds through torch or
cupy, with the memory the system has left (MemAvailable) and what accounts for it (this process's RSS, the CUDA
allocator's reserved and allocated bytes, AnonPages and Slab) sampled before and
after. It runs in the host's Python as a file (``python leak_probe.py SECONDS``), so it imports the standard
library only at module level and torch or cupy inside functions; it prints one ``PINMATRIX-LEAK {json}`` line of
raw samples, and the parent (leak_check.py) reads it as data and judges it. Each round: one 32 MiB buffer from the
library's allocator and one managed buffer (cudaMallocManaged), both written on the device, the managed one also
written on the host, then both freed and the allocator's cache emptied: after the rounds nothing is held, so a
drop of MemAvailable that nothing accounts for is the driver's (590.48.01 on a GB10: AnonPages and Slab flat)."""

from __future__ import annotations

import ctypes
import json
import sys
import time
from pathlib import Path
from typing import Any

RESULT_PREFIX = "PINMATRIX-LEAK "
BUFFER = 32 << 20
MIN_ROUNDS, MAX_ROUNDS = 3, 100_000
MEMINFO_KEYS = {"MemAvailable": "mem_available", "AnonPages": "anon_pages", "Slab": "slab"}


def meminfo(text: str) -> dict[str, int]:
    """The /proc/meminfo fields the measurement reads, in bytes."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if key in MEMINFO_KEYS and parts and parts[0].isdigit():
            out[MEMINFO_KEYS[key]] = int(parts[0]) * 1024
    return out


def rss(status: str) -> int:
    """VmRSS of /proc/self/status, in bytes."""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class TorchBackend:
    """torch's caching allocator, and managed buffers from the CUDA driver in torch's own context."""

    def __init__(self) -> None:
        import torch  # noqa: PLC0415 - the host's torch, where there is one

        if not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} sees no CUDA device")
        self.torch = torch
        self.name = f"torch {torch.__version__}"
        torch.zeros(1, device="cuda")  # the primary context, current on this thread
        self.driver = ctypes.CDLL("libcuda.so.1")

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} returned {rc}")

    def round(self) -> None:
        buf = self.torch.empty(BUFFER, dtype=self.torch.uint8, device="cuda")
        buf.fill_(0xA5)
        ptr = ctypes.c_uint64()
        self._check(self.driver.cuMemAllocManaged(ctypes.byref(ptr), ctypes.c_size_t(BUFFER), 1), "cuMemAllocManaged")
        self._check(self.driver.cuMemsetD8_v2(ptr, 0xA5, ctypes.c_size_t(BUFFER)), "cuMemsetD8")
        self.torch.cuda.synchronize()
        ctypes.memset(ptr.value, 0x5A, BUFFER)
        self._check(self.driver.cuMemFree_v2(ptr), "cuMemFree")
        del buf
        self.torch.cuda.empty_cache()

    def accounting(self) -> dict[str, int]:
        free, total = self.torch.cuda.mem_get_info()
        return {"reserved": int(self.torch.cuda.memory_reserved()), "allocated": int(self.torch.cuda.memory_allocated()),
                "gpu_used": int(total - free)}


class CupyBackend:
    """cupy's memory pool, and managed buffers from cupy.cuda.malloc_managed."""

    def __init__(self) -> None:
        import cupy  # type: ignore[import-not-found]  # noqa: PLC0415 - the host's cupy, where there is one

        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError(f"cupy {cupy.__version__} sees no CUDA device")
        self.cupy = cupy
        self.name = f"cupy {cupy.__version__}"

    def round(self) -> None:
        cp = self.cupy
        buf = cp.empty(BUFFER, dtype=cp.uint8)
        buf.fill(0xA5)
        managed = cp.cuda.malloc_managed(BUFFER)
        cp.cuda.runtime.memset(managed.ptr, 0xA5, BUFFER)
        cp.cuda.runtime.deviceSynchronize()
        ctypes.memset(managed.ptr, 0x5A, BUFFER)
        del buf, managed
        cp.get_default_memory_pool().free_all_blocks()

    def accounting(self) -> dict[str, int]:
        pool = self.cupy.get_default_memory_pool()
        free, total = self.cupy.cuda.runtime.memGetInfo()
        return {"reserved": int(pool.total_bytes()), "allocated": int(pool.used_bytes()), "gpu_used": int(total - free)}


def backend() -> Any:
    """torch, else cupy; None when neither imports (a broken one: RuntimeError with why)."""
    for kind in (TorchBackend, CupyBackend):
        try:
            return kind()
        except ImportError:
            continue
    return None


def sample(lib: Any) -> dict[str, int]:
    """The system's and this process's memory now (each round has freed its managed buffer before)."""
    found = meminfo(Path("/proc/meminfo").read_text())
    found["rss"] = rss(Path("/proc/self/status").read_text())
    return {**found, **lib.accounting()}


def measure(lib: Any, seconds: float, clock: Any = time.monotonic) -> dict[str, Any]:
    lib.round()  # warm-up: the allocator's and the driver's own pools settle here
    before = sample(lib)
    started, rounds = clock(), 0
    while rounds < MAX_ROUNDS and (rounds < MIN_ROUNDS or clock() - started < seconds):
        lib.round()
        rounds += 1
    elapsed = clock() - started
    return {"backend": lib.name, "rounds": rounds, "buffer_bytes": BUFFER, "seconds": round(elapsed, 3),
            "before": before, "after": sample(lib)}


def main(argv: list[str]) -> int:
    seconds = float(argv[1]) if len(argv) > 1 else 3.0
    try:
        lib = backend()
    except Exception as err:  # a torch or cupy that imports but cannot reach the GPU
        print(RESULT_PREFIX + json.dumps({"backend": None, "why": f"{type(err).__name__}: {err}"[:300]}))
        return 0
    if lib is None:
        print(RESULT_PREFIX + json.dumps({"backend": None}))
        return 0
    print(RESULT_PREFIX + json.dumps(measure(lib, seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
