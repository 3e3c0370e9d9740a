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

Batches (``"batch": "<group>"`` in a smoke's spec): the runner may start ``<module>.py --batch`` with
$PINMATRIX_BATCH_PLAN naming several smokes of one group (any modules of the catalogue). They run one after the
other in this one process (torch imported and CUDA initialised once), each with its own log file (stdout and
stderr point at it while it runs), its own result file, its own timeout (faulthandler ends the process when it
passes) and the device synchronised and its cached memory freed after it. The batch stops after the first smoke
that does not pass or skip: the runner runs the rest in a fresh process, so no failure, crash or hang can leave
state behind for another smoke or hide its result.

Autotune choices ($PINMATRIX_AUTOTUNE_DIR, set by the image runtimes' kernel cache): Triton keeps no autotune
result for a kernel whose configurations have a ``pre_hook`` (xformers' tiled matmul). Here the choice is kept
as the index of the chosen configuration in the kernel's own list, under a key of Triton's own cache ingredients
(Triton, backend, kernel source, cache-invalidating variables, tuning key, the configurations, the GPU), so the
next process runs the same configuration, pre_hook included, without benchmarking them all again.
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import faulthandler
import gc
import hashlib
import importlib.abc
import importlib.machinery
import importlib.metadata as _md
import importlib.util
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
BATCH_ENV = "PINMATRIX_BATCH_PLAN"
BATCH_ARG = "--batch"
AUTOTUNE_ENV = "PINMATRIX_AUTOTUNE_DIR"
MAX_BATCH_SPEC = 1 << 20
MAX_CHOICE_FILE = 4096
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


def run_smoke(name: str, spec: dict[str, Any], func: Callable[[Context], None]) -> dict[str, Any]:
    """Run one smoke in this process; its result (status, reason, failure class, metrics, times, environment)."""
    ctx = Context(name, spec)
    kept_before = dict(AUTOTUNE_KEPT)
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
    kept = {k: AUTOTUNE_KEPT[k] - kept_before[k] for k in AUTOTUNE_KEPT}
    if any(kept.values()):  # this smoke's autotunings: choices reused from the cache, and tuned and kept
        ctx.metrics["autotune_choices_reused"] = kept["reused"]
        ctx.metrics["autotune_choices_tuned"] = kept["tuned"]
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
    return result


def write_result(result: dict[str, Any], path: str | None) -> None:
    """The result into ``path`` (whole or not at all) and as the ``PINMATRIX-RESULT`` line of the log."""
    blob = json.dumps(result, sort_keys=True, default=str)
    if path:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as fh:
            fh.write(blob)
        os.replace(tmp, path)
    reason = result.get("reason")
    log(f"[{result['smoke']}] {result['status']}{': ' + reason if reason else ''}")
    print(RESULT_PREFIX + blob, flush=True)


def main(smokes: dict[str, dict[str, Any]], namespace: dict[str, Any]) -> None:
    if namespace.get("__name__") != "__main__":
        return  # imported by a batch (run_batch), which runs the smokes it was given
    keep_autotune_choices(os.environ.get(AUTOTUNE_ENV))
    if sys.argv[1:] == [BATCH_ARG]:
        run_batch(namespace)
    if len(sys.argv) != 2 or sys.argv[1] not in smokes:
        print(f"usage: {sys.argv[0]} {{{','.join(smokes)}}} | {BATCH_ARG}", file=sys.stderr)
        sys.exit(2)
    name = sys.argv[1]
    spec = smokes[name]
    write_result(run_smoke(name, spec, namespace[spec["func"]]), os.environ.get(RESULT_ENV))
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: CUDA libraries can hang or crash at exit after a device fault.
    os._exit(0)


# --- batches: several smokes of one group in one process ----------------------------------------------
def _batch_entries(raw: str | None) -> list[dict[str, Any]]:
    """$PINMATRIX_BATCH_PLAN: {"smokes": [{"module", "name", "result", "log", "timeout_s"}, ...]}, every file a
    plain name (results and logs go beside $PINMATRIX_SMOKE_RESULT, modules are the catalogue's)."""
    if not raw or len(raw) > MAX_BATCH_SPEC:
        raise ValueError(f"${BATCH_ENV} is missing or longer than {MAX_BATCH_SPEC} bytes")
    entries = json.loads(raw).get("smokes")
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"${BATCH_ENV} names no smoke")
    for entry in entries:
        names = [entry.get(k) for k in ("module", "result", "log")]
        if not all(isinstance(n, str) and n and "/" not in n and n not in (".", "..") for n in names):
            raise ValueError(f"${BATCH_ENV}: {entry!r} must name its module, result and log as plain file names")
        if not isinstance(entry.get("name"), str) or not isinstance(entry.get("timeout_s"), (int, float)):
            raise ValueError(f"${BATCH_ENV}: {entry!r} needs a name and a timeout_s")
    return entries


def _batch_module(file_name: str, folder: str, main_namespace: dict[str, Any]) -> dict[str, Any]:
    """The namespace of the catalogue module ``file_name``: this process's own script, or imported by its stem
    (its ``main`` then returns at once)."""
    if os.path.basename(str(main_namespace.get("__file__", ""))) == file_name:
        return main_namespace
    stem = file_name[:-3] if file_name.endswith(".py") else file_name
    if stem not in sys.modules:
        spec = importlib.util.spec_from_file_location(stem, os.path.join(folder, file_name))
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load smoke module {file_name}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[stem] = module
        spec.loader.exec_module(module)
    return vars(sys.modules[stem])


def _settle() -> None:
    """After a smoke: its device work finished (an asynchronous fault surfaces here, in its result), its objects
    collected and torch's cached device memory given back, so the next smoke starts from a quiet device."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _flush_native() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        ctypes.CDLL(None).fflush(None)  # C libraries' buffered output belongs to the smoke that wrote it
    except (OSError, AttributeError):
        pass


def run_batch(namespace: dict[str, Any]) -> None:
    """Run $PINMATRIX_BATCH_PLAN's smokes in order (module docstring); never returns."""
    out_dir = os.path.dirname(os.environ.get(RESULT_ENV, "")) or "."
    folder = os.path.dirname(os.path.abspath(str(namespace.get("__file__", ""))))
    try:
        entries = _batch_entries(os.environ.get(BATCH_ENV))
    except (ValueError, AttributeError) as err:
        print(f"batch: {err}", file=sys.stderr)
        os._exit(2)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # the smokes import their catalogue neighbours
    batch_out = os.dup(1)
    for entry in entries:
        name = entry["name"]
        print(f"[batch] {name} start {now()}", flush=True)
        _flush_native()
        log_fd = os.open(os.path.join(out_dir, entry["log"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        faulthandler.dump_traceback_later(max(1.0, float(entry["timeout_s"])), exit=True)
        try:
            module = _batch_module(entry["module"], folder, namespace)
            spec = module["SMOKES"][name]
            result = run_smoke(name, spec, module[spec["func"]])
        except Exception as err:  # the module would not load: this smoke fails, alone
            traceback.print_exc()
            result = {"smoke": name, "status": "fail", "reason": f"{type(err).__name__}: {err}"[:2000],
                      "failure_class": None, "metrics": {}, "started_at": now(), "finished_at": now(),
                      "duration_s": 0.0, "environment": {}}
        try:
            _settle()
        except Exception as err:
            traceback.print_exc()
            if result["status"] in ("pass", "skip"):
                result.update(status="fail", reason=f"after the smoke: {type(err).__name__}: {err}"[:2000])
        faulthandler.cancel_dump_traceback_later()
        write_result(result, os.path.join(out_dir, entry["result"]))
        _flush_native()
        os.dup2(batch_out, 1)
        os.dup2(batch_out, 2)
        print(f"[batch] {name} {result['status']} {now()}", flush=True)
        if result["status"] not in ("pass", "skip"):
            break  # the rest start in a fresh process: nothing this smoke left behind reaches them
    os._exit(0)


# --- autotune choices kept across processes -------------------------------------------------------
AUTOTUNE_KEPT = {"reused": 0, "tuned": 0}
AUTOTUNER_MODULE = "triton.runtime.autotuner"


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``then(module)`` once ``name`` has been imported, by whoever imports it; nothing is imported early."""

    def __init__(self, name: str, then: Callable[[Any], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, then = spec.loader, self.then

        class _Then(importlib.abc.Loader):
            def __getattr__(self, attr: str) -> Any:  # get_source, get_filename, ...: the real loader's
                return getattr(loader, attr)

            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: Any) -> None:
                loader.exec_module(module)
                then(module)

        spec.loader = _Then()
        return spec


def keep_autotune_choices(folder: str | None) -> None:
    """Keep Triton's autotune choices for kernels with pre_hooks under ``folder`` (module docstring)."""
    if not folder:
        return
    if AUTOTUNER_MODULE in sys.modules:
        _patch_autotuner(sys.modules[AUTOTUNER_MODULE], folder)
    else:
        sys.meta_path.insert(0, _AfterImport(AUTOTUNER_MODULE, lambda m: _patch_autotuner(m, folder)))


def _patch_autotuner(module: Any, folder: str) -> None:
    autotuner = getattr(module, "Autotuner", None)
    original = getattr(autotuner, "check_disk_cache", None)
    if autotuner is None or original is None or getattr(original, "_pinmatrix", False):
        return  # another Triton: it decides alone

    def check_disk_cache(self: Any, tuning_key: Any, configs: list[Any], bench_fn: Callable[[], None]) -> bool:
        if not tuning_key or not any(getattr(c, "pre_hook", None) for c in configs):
            return original(self, tuning_key, configs, bench_fn)  # Triton keeps these itself
        try:
            path = os.path.join(folder, f"{choice_key(self, tuning_key, configs)}.json")
        except Exception:  # this Triton lacks an ingredient of the key: no keeping, Triton's own way
            return original(self, tuning_key, configs, bench_fn)
        index = read_choice(path, [str(c) for c in configs])
        if index is not None:
            self.cache[tuning_key] = configs[index]
            AUTOTUNE_KEPT["reused"] += 1
            return True
        bench_fn()
        chosen = self.cache.get(tuning_key)
        index = next((i for i, c in enumerate(configs) if c is chosen), None)
        if index is not None:
            write_choice(path, index, str(chosen))
            AUTOTUNE_KEPT["tuned"] += 1
        return False

    check_disk_cache._pinmatrix = True  # type: ignore[attr-defined]
    autotuner.check_disk_cache = check_disk_cache


def choice_key(tuner: Any, tuning_key: Any, configs: list[Any]) -> str:
    """Triton's own autotune cache ingredients (its check_disk_cache), plus each configuration's pre_hook name and
    the GPU's name; raises where this Triton lacks one."""
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.compiler.compiler import make_backend
    from triton.runtime.cache import triton_key
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    fn = tuner.fn
    while not isinstance(fn, JITFunction):
        fn = fn.fn
    torch = sys.modules.get("torch")
    gpu = torch.cuda.get_device_name() if torch is not None and torch.cuda.is_available() else ""
    parts = [triton_key(), make_backend(driver.active.get_current_target()).hash(), fn.cache_key,
             str(sorted(get_cache_invalidating_env_vars().items())), str(tuning_key), gpu]
    parts += [f"{c} pre_hook={getattr(c.pre_hook, '__qualname__', c.pre_hook is not None)}" for c in configs]
    return f"{fn.__name__[:100]}-" + hashlib.sha256("-".join(parts).encode()).hexdigest()


def read_choice(path: str, configs: list[str]) -> int | None:
    """The kept index into ``configs`` (their ``str``), or None: a missing, large, malformed or mismatching file
    is a miss (the autotuner runs), never an error."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CHOICE_FILE + 1)
        data = json.loads(raw) if len(raw) <= MAX_CHOICE_FILE else None
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    index = data.get("index")
    if type(index) is not int or not 0 <= index < len(configs) or data.get("config") != configs[index]:
        return None
    return index


def write_choice(path: str, index: int, config: str) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            json.dump({"index": index, "config": config}, fh)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only or full cache: the next run tunes again
