"""Shared plumbing for pinmatrix smoke modules. Standard library only: it runs in the cell's Python
(an image, or the host's environment) where pinmatrix itself may not be installed.

A smoke module declares ``SMOKES = {name: {...}}`` as a plain literal (the runner reads it with
``ast.literal_eval`` without importing the module) and ends with ``main(SMOKES, globals())``. The runner
starts ``python -X faulthandler <module>.py <smoke-name>``; the smoke writes one JSON result to
``$PINMATRIX_SMOKE_RESULT`` (and prints it on a ``PINMATRIX-RESULT`` line).

Declared needs (all optional): ``gpu`` (bool), ``gpus`` (int), ``min_capability`` / ``max_capability``
("9.0"), ``native_fp4`` (FP4 tensor cores: sm_100 and newer), ``packages`` (distribution names), ``memory_gib``
(free GPU memory). The GPU needs are decided by the runner from its host probe before any process starts where
it can (``unmet_need``), and again inside the smoke.

Declared parameters (optional; ``pinmatrix bisect`` searches them): ``params`` ({name: {type, range, default}}),
``fixed`` (the other dimensions, held fixed), ``quantities`` ({label: [factors]}) and ``limits``; the smoke
reads this run's values from ``ctx.params`` (the defaults, unless a probe set $PINMATRIX_PARAMS).
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import importlib.metadata as _md
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from typing import Any, Callable

RESULT_ENV = "PINMATRIX_SMOKE_RESULT"
CELL_ENV = "PINMATRIX_CELL"
RESULT_PREFIX = "PINMATRIX-RESULT "
PARAMS_ENV = "PINMATRIX_PARAMS"
STACK_PACKAGES = ("torch", "triton", "xformers", "flashinfer-python", "vllm", "apache-tvm-ffi", "numpy")


class Skip(Exception):
    """The smoke cannot run here (no GPU, package absent, capability not supported)."""


class Fail(Exception):
    def __init__(self, reason: str, failure_class: str | None = None) -> None:
        super().__init__(reason)
        self.failure_class = failure_class


class Degraded(Exception):
    def __init__(self, reason: str, failure_class: str | None = "slow-path") -> None:
        super().__init__(reason)
        self.failure_class = failure_class


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def log(msg: str) -> None:
    print(msg, flush=True)


# --- the CUDA driver, through ctypes (no torch needed) ------------------------------------------------
class CudaDriver:
    def __init__(self) -> None:
        self.lib: Any = None
        self.error: str | None = None
        for name in ("libcuda.so.1", "libcuda.so"):
            try:
                self.lib = ctypes.CDLL(name)
                break
            except OSError as err:
                self.error = str(err)
        if self.lib is not None:
            rc = self.lib.cuInit(0)
            if rc != 0:
                self.error = f"cuInit returned {rc} ({self.error_name(rc)})"
                self.lib_ok = False
            else:
                self.lib_ok = True
        else:
            self.lib_ok = False

    def error_name(self, rc: int) -> str:
        if self.lib is None:
            return str(rc)
        s = ctypes.c_char_p()
        try:
            self.lib.cuGetErrorName(rc, ctypes.byref(s))
            return (s.value or b"").decode() or str(rc)
        except Exception:
            return str(rc)

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed: {self.error_name(rc)} ({rc})")

    def driver_api_version(self) -> str | None:
        if self.lib is None:
            return None
        v = ctypes.c_int()
        if self.lib.cuDriverGetVersion(ctypes.byref(v)) != 0:
            return None
        return f"{v.value // 1000}.{(v.value % 1000) // 10}"

    def device_count(self) -> int:
        if not self.lib_ok:
            return 0
        n = ctypes.c_int()
        if self.lib.cuDeviceGetCount(ctypes.byref(n)) != 0:
            return 0
        return n.value

    def device(self, ordinal: int) -> dict[str, Any]:
        dev = ctypes.c_int()
        self.check(self.lib.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
        name = ctypes.create_string_buffer(256)
        self.lib.cuDeviceGetName(name, 256, dev)
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.lib.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)  # COMPUTE_CAPABILITY_MAJOR
        self.lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)  # COMPUTE_CAPABILITY_MINOR
        total = ctypes.c_size_t()
        self.lib.cuDeviceTotalMem_v2(ctypes.byref(total), dev)
        return {
            "name": name.value.decode(errors="replace"),
            "capability": f"{major.value}.{minor.value}",
            "memory_gib": round(total.value / 2**30, 1),
        }


_DRIVER: CudaDriver | None = None


def cuda_driver() -> CudaDriver:
    global _DRIVER
    if _DRIVER is None:
        _DRIVER = CudaDriver()
    return _DRIVER


def nvidia_smi() -> list[dict[str, str]]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,driver_version,compute_cap,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=60, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_nvidia_smi(out.stdout)


def parse_nvidia_smi(text: str) -> list[dict[str, str]]:
    """Rows of ``--query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader``."""
    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4:
            rows.append({"name": parts[0], "driver": parts[1], "capability": parts[2], "memory": parts[3]})
    return rows


def gpus() -> list[dict[str, Any]]:
    drv = cuda_driver()
    return [drv.device(i) for i in range(drv.device_count())]


def version_of(dist: str) -> str | None:
    try:
        return _md.version(dist)
    except _md.PackageNotFoundError:
        return None


def cell() -> dict[str, Any]:
    raw = os.environ.get(CELL_ENV)
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return {}


def params(spec: dict[str, Any]) -> dict[str, Any]:
    """A smoke's parameter values: each declared parameter's default and the fixed dimensions (the spec's
    ``params`` / ``fixed``), overridden by $PINMATRIX_PARAMS (set by ``pinmatrix bisect`` for one probe)."""
    values: dict[str, Any] = {k: v.get("default") for k, v in (spec.get("params") or {}).items()}
    values.update(spec.get("fixed") or {})
    raw = os.environ.get(PARAMS_ENV)
    if raw:
        values.update(json.loads(raw))
    return values


def cap_tuple(cap: str) -> tuple[int, int]:
    major, _, minor = cap.partition(".")
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def environment() -> dict[str, Any]:
    """What this smoke saw: driver, CUDA versions, GPUs, package versions."""
    smi = nvidia_smi()
    drv = cuda_driver()
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "driver": smi[0]["driver"] if smi else None,
        "cuda_driver_api": drv.driver_api_version(),
        "gpus": [f"{g['name']} (sm_{g['capability'].replace('.', '')})" for g in smi],
        "versions": {d: v for d in STACK_PACKAGES if (v := version_of(d))},
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch_cuda_runtime"] = getattr(torch.version, "cuda", None)
    overlay = os.environ.get("PINMATRIX_OVERLAY")
    if overlay:
        env["overlay"] = overlay
    return env


# --- the smoke context ---------------------------------------------------------------------------
class Context:
    def __init__(self, name: str, spec: dict[str, Any]) -> None:
        self.name = name
        self.spec = spec
        self.metrics: dict[str, float | int | str] = {}
        self.summary = ""  # the reason shown for a pass
        self.cell = cell()
        self.params = params(spec)  # ctx.params["M"]: this run's value of a declared parameter

    def metric(self, key: str, value: float | int | str) -> None:
        if isinstance(value, float):
            value = float(f"{value:.6g}")
        self.metrics[key] = value
        log(f"[{self.name}] {key} = {value}")

    def torch(self) -> Any:
        try:
            import torch
        except ImportError as err:
            raise Skip(f"torch not installed ({err})") from None
        if not torch.cuda.is_available():
            raise Skip("no GPU")
        return torch


def cuda_seconds(torch: Any, fn: Callable[[], Any], reps: int, warmup: int = 1) -> float:
    """Seconds per call of ``fn`` on the GPU, timed with CUDA events after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000 / reps


def no_native_fp4(capability: str) -> str | None:
    """Why a GPU of ``capability`` ("9.0") has no FP4 tensor-core instructions, or None (sm_100 and newer)."""
    if cap_tuple(capability) >= (10, 0):
        return None
    return (f"no native FP4 tensor-core instructions on sm_{capability.replace('.', '')} (needs sm_100/sm_103/"
            "sm_110 or sm_120a/sm_121a)")


def unmet_need(needs: dict[str, Any], gpu_count: int, capability: str, memory_gib: float | None = None) -> str | None:
    """The first GPU need of ``needs`` that GPU 0 (of ``capability``) and ``gpu_count`` GPUs do not meet, or None.
    The runner asks it with its host probe before it starts a process; the smoke asks it again inside."""
    if gpu_count == 0:
        return "no GPU"
    want = int(needs.get("gpus", 1))
    if gpu_count < want:
        return f"needs {want} GPUs, {gpu_count} visible"
    cap = cap_tuple(capability)
    if "min_capability" in needs and cap < cap_tuple(needs["min_capability"]):
        return f"needs compute capability >= {needs['min_capability']}, device is {capability}"
    if "max_capability" in needs and cap > cap_tuple(needs["max_capability"]):
        return f"needs compute capability <= {needs['max_capability']}, device is {capability}"
    if needs.get("native_fp4") and no_native_fp4(capability):
        return no_native_fp4(capability)
    if memory_gib is not None and "memory_gib" in needs and memory_gib < float(needs["memory_gib"]):
        return f"needs {needs['memory_gib']} GiB of GPU memory, device has {memory_gib}"
    return None


def check_needs(spec: dict[str, Any]) -> None:
    needs = spec.get("needs", {})
    if needs.get("gpu"):
        drv = cuda_driver()
        count = drv.device_count()
        dev: dict[str, Any] = drv.device(0) if count else {"capability": "0.0", "memory_gib": 0.0}
        reason = unmet_need(needs, count, str(dev["capability"]), float(dev["memory_gib"]))
        if reason:
            raise Skip(reason)
    for dist in needs.get("packages", []):
        if version_of(dist) is None:
            raise Skip(f"{dist} not installed")


def main(smokes: dict[str, dict[str, Any]], namespace: dict[str, Any]) -> None:
    if len(sys.argv) != 2 or sys.argv[1] not in smokes:
        print(f"usage: {sys.argv[0]} {{{','.join(smokes)}}}", file=sys.stderr)
        sys.exit(2)
    name = sys.argv[1]
    spec = smokes[name]
    func: Callable[[Context], None] = namespace[spec["func"]]
    ctx = Context(name, spec)
    started, t0 = now(), time.monotonic()
    status, reason, failure_class = "pass", "", None
    log(f"[{name}] start {started}")
    if os.environ.get("PINMATRIX_FAULT"):  # a deliberately broken variant (see _oracles.py): never a real result
        ctx.metric("fault", os.environ["PINMATRIX_FAULT"])
    try:
        check_needs(spec)
        func(ctx)
        reason = ctx.summary
    except Skip as err:
        status, reason = "skip", str(err)
    except Degraded as err:
        status, reason, failure_class = "degraded", str(err), err.failure_class
    except Fail as err:
        status, reason, failure_class = "fail", str(err), err.failure_class
    except Exception as err:  # an unexpected error is a failure; the runner classifies the log
        traceback.print_exc()
        status, reason = "fail", f"{type(err).__name__}: {err}".strip()[:2000]
    result = {
        "smoke": name,
        "status": status,
        "reason": reason,
        "failure_class": failure_class,
        "metrics": ctx.metrics,
        "started_at": started,
        "finished_at": now(),
        "duration_s": round(time.monotonic() - t0, 3),
    }
    try:
        result["environment"] = environment()
    except Exception as err:  # never lose the result over the environment report
        result["environment"] = {"error": str(err)}
    blob = json.dumps(result, sort_keys=True, default=str)
    path = os.environ.get(RESULT_ENV)
    if path:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as fh:
            fh.write(blob)
        os.replace(tmp, path)
    log(f"[{name}] {status}{': ' + reason if reason else ''}")
    print(RESULT_PREFIX + blob, flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: CUDA libraries can hang or crash at exit after a device fault.
    os._exit(0)
