"""Host-level smokes: what the machine and the environment are, before any kernel runs.

Oracles (two lines each; host-probe, python-imports and arch-coverage compare facts, not kernel results):
- unified-memory-leak: process RSS, GPU memory in use and the system's MemAvailable, sampled around allocate /
  touch / free cycles of 32 MiB managed buffers, may not grow by half a buffer; fault leak keeps one per round.

Reported beside that verdict: the unexplained drop, MemAvailable's fall less the growth of RSS or AnonPages, of
Slab and the managed bytes the process still holds (590.48.01's leak showed in MemAvailable only; doctor
--leak-check measures the same through torch or cupy).
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.metadata as md
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _oracles import MemorySample, fault, leak_problems
from _smokelib import Context, Fail, Skip, cuda_driver, main, nvidia_smi, version_of

SMOKES = {
    "host-probe": {
        "func": "host_probe",
        "description": "driver, CUDA driver API, GPUs and capabilities, nvcc; the environment's CUDA runtime "
        "must not be newer than the driver supports. No GPU: passes and reports gpu_count 0.",
        "needs": {},
        "phase": 0,
        "timeout_s": 120,
        "batch": "kernels",
    },
    "python-imports": {
        "func": "python_imports",
        "description": "every pinned distribution is installed at its pinned version and its modules import.",
        "needs": {},
        "phase": 0,
        "timeout_s": 300,
        "batch": "kernels",
    },
    "unified-memory-leak": {
        "func": "um_leak",
        "description": "allocate / touch on host and device / free cycles of 32 MiB managed buffers "
        "(cuMemAllocManaged) must not grow RSS, GPU memory in use or MemAvailable by half a buffer (the driver "
        "590.48.01 class of fault); reports how much of MemAvailable's drop neither RSS, AnonPages, Slab nor the "
        "managed bytes still held explain.",
        "needs": {"gpu": True},
        "timeout_s": 300,
        "batch": "kernels",
    },
    "arch-coverage": {
        "func": "arch_coverage",
        "description": "exact SASS/PTX targets of the environment's CUDA binaries (torch, flashinfer JIT cache, "
        "vllm _C, xformers _C) per kernel group, judged for the cell's GPU (pinmatrix.archscan); fails when kernel "
        "groups cannot run there or a cell-built module lacks the cell's arch flag; runs without a GPU.",
        "needs": {},
        "phase": 9,
        "timeout_s": 600,
        "batch": "kernels",
    },
}

# Minimum driver per CUDA toolkit (NVIDIA CUDA toolkit release notes), for the report's message.
MIN_DRIVER = {
    "12.2": "535.54.03", "12.4": "550.54.14", "12.6": "560.28.03", "12.8": "570.26", "12.9": "575.51.03",
    "13.0": "580.65.06", "13.1": "590.44.01", "13.2": "595.45.04", "13.3": "610.43.02",
}


def _ver(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def nvcc_version() -> str | None:
    exe = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None


def runtime_cuda() -> str | None:
    """The CUDA runtime the environment's frameworks were built against (torch's, when present)."""
    if version_of("torch") is None:
        return None
    try:
        import torch
    except Exception as err:  # an import failure is python-imports' to report
        print(f"torch import failed: {err}", file=sys.stderr)
        return None
    return getattr(torch.version, "cuda", None)


def host_probe(ctx: Context) -> None:
    smi = nvidia_smi()
    drv = cuda_driver()
    api = drv.driver_api_version()
    ctx.metric("gpu_count", len(smi) if smi else drv.device_count())
    if smi:
        ctx.metric("driver", smi[0]["driver"])
        ctx.metric("gpu_names", ", ".join(sorted({g["name"] for g in smi})))
        ctx.metric("capabilities", ", ".join(sorted({g["capability"] for g in smi})))
    if api:
        ctx.metric("cuda_driver_api", api)
    nvcc = nvcc_version()
    if nvcc:
        ctx.metric("nvcc", nvcc)
    rt = runtime_cuda()
    if rt:
        ctx.metric("cuda_runtime", rt)
    want = ctx.cell.get("compute_capability")
    if want and smi:
        got = sorted({g["capability"] for g in smi})
        ctx.metric("cell_capability", want)
        ctx.metric("capability_matches_cell", "yes" if want in got else "no")
    if not smi and not api:
        ctx.summary = "no GPU visible: probed the host CPU-only"
        return
    problems = []
    if rt and api and _ver(rt)[:2] > _ver(api)[:2]:
        need = MIN_DRIVER.get(".".join(rt.split(".")[:2]), "a newer driver")
        problems.append(
            f"CUDA driver too old: the environment's CUDA runtime {rt} needs driver >= {need}, "
            f"the driver supports CUDA {api}"
        )
    if nvcc and api and _ver(nvcc)[:2] > _ver(api)[:2]:
        ctx.metric("nvcc_newer_than_driver", "yes")
    min_driver = ctx.cell.get("min_driver")
    if min_driver and smi and _ver(smi[0]["driver"]) < _ver(min_driver):
        problems.append(f"CUDA driver too old: driver {smi[0]['driver']} < the cell's minimum {min_driver}")
    if problems:
        raise Fail("; ".join(problems), "driver-too-old")
    ctx.summary = f"{len(smi)} GPU(s), driver {smi[0]['driver'] if smi else '?'}, CUDA driver API {api}"


# --- python-imports ------------------------------------------------------------------------------
_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?:==\s*([^\s;,]+))?")
DEFAULT_DISTS = ("torch", "triton", "xformers", "flashinfer-python", "vllm")


def _top_level_modules(dist: md.Distribution) -> list[str]:
    text = dist.read_text("top_level.txt")
    if text:
        names = [n.strip() for n in text.split() if n.strip() and not n.startswith("_")]
        if names:
            return names
    names = set()
    for f in dist.files or []:
        parts = f.parts
        if len(parts) >= 2 and parts[1] == "__init__.py" and not parts[0].endswith((".dist-info", ".data")):
            names.add(parts[0])
        elif len(parts) == 1 and parts[0].endswith(".py") and not parts[0].startswith("_"):
            names.add(parts[0][:-3])
    return sorted(n for n in names if not n.startswith("_") and n.isidentifier())


def python_imports(ctx: Context) -> None:
    reqs = ctx.cell.get("requirements") or []
    wanted: list[tuple[str, str | None]] = []
    for line in reqs:
        m = _REQ_NAME.match(line)
        if m:
            wanted.append((m.group(1), m.group(2)))
    if not wanted:  # host mode without a cell: whatever of the stack is installed
        wanted = [(d, None) for d in DEFAULT_DISTS if version_of(d) is not None]
        if not wanted:
            raise Skip("no cell requirements and none of the stack's packages installed")
    problems: list[tuple[str, str]] = []
    imported = 0
    for name, pin in wanted:
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            problems.append(("missing-package", f"{name} is not installed"))
            continue
        if pin and dist.version != pin:
            problems.append(("pin-mismatch", f"{name} is {dist.version}, the cell pins {pin}"))
        for module in _top_level_modules(dist):
            t0 = time.monotonic()
            try:
                importlib.import_module(module)
            except Exception as err:  # ImportError, OSError from a shared library, ...
                problems.append(("import-error", f"import {module} ({name} {dist.version}) failed: "
                                 f"{type(err).__name__}: {err}"))
                print(f"import {module} failed: {type(err).__name__}: {err}", file=sys.stderr)
                continue
            imported += 1
            ctx.metric(f"import_s.{module}", time.monotonic() - t0)
    ctx.metric("distributions", len(wanted))
    ctx.metric("modules_imported", imported)
    if problems:
        classes = {c for c, _ in problems}
        cls = "import-error" if "import-error" in classes else sorted(classes)[0]
        raise Fail("; ".join(msg for _, msg in problems), cls)
    ctx.summary = f"{len(wanted)} distribution(s) at their pins, {imported} module(s) imported"


# --- unified memory leak -------------------------------------------------------------------------
def _meminfo() -> dict[str, int]:
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            out[key] = int(parts[0]) * 1024
    return out


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _gpu_used(drv) -> int:  # noqa: ANN001
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    drv.check(drv.lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
    return total.value - free.value


def _memory(drv) -> tuple[MemorySample, dict[str, int]]:  # noqa: ANN001
    """The sample the verdict reads, and the /proc/meminfo reading (with this process's "rss") it came from."""
    info = {**_meminfo(), "rss": _rss()}
    return MemorySample(rss=info["rss"], gpu_used=_gpu_used(drv), mem_available=info.get("MemAvailable", 0)), info


def unexplained_drop(before: dict[str, int], after: dict[str, int], held: int) -> int:
    """How far MemAvailable fell between two /proc/meminfo readings (with "rss" added) beyond what accounts for
    memory: the growth of this process's RSS or of AnonPages (the larger: its pages are in both), of Slab, and the
    ``held`` bytes the process still has allocated. Only growth explains a drop."""
    def grew(key: str) -> int:
        return after.get(key, 0) - before.get(key, 0)

    explained = max(0, grew("rss"), grew("AnonPages")) + max(0, grew("Slab")) + max(0, held)
    return -grew("MemAvailable") - explained


UM_BUFFER = 32 << 20  # each managed allocation; a leak of one is 32 MiB, twice the 16 MiB limit
UM_PER_ROUND, UM_ROUNDS = 2, 6


def um_leak(ctx: Context) -> None:
    injected = fault(("leak",))
    drv = cuda_driver()
    lib = drv.lib
    ctxh = ctypes.c_void_p()
    dev = ctypes.c_int()
    drv.check(lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    drv.check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctxh), dev), "cuDevicePrimaryCtxRetain")
    drv.check(lib.cuCtxSetCurrent(ctxh), "cuCtxSetCurrent")
    size = UM_BUFFER
    kept: list[int] = []  # what the leak fault did not free

    def one_round(leak: bool) -> None:
        ptrs = []
        for _ in range(UM_PER_ROUND):
            p = ctypes.c_uint64()
            drv.check(lib.cuMemAllocManaged(ctypes.byref(p), ctypes.c_size_t(size), 1), "cuMemAllocManaged")
            ptrs.append(p.value)
        for p in ptrs:
            ctypes.memset(p, 0x5A, size)  # touch on the host
            drv.check(lib.cuMemsetD8_v2(ctypes.c_uint64(p), 0xA5, ctypes.c_size_t(size)), "cuMemsetD8")
        drv.check(lib.cuCtxSynchronize(), "cuCtxSynchronize")
        chunk = 1 << 20  # read it all back on the host in 1 MiB pieces (no large Python buffer to skew RSS):
        for p in ptrs:   # every page migrates back, and the device write must show in every byte
            for off in range(0, size, chunk):
                if ctypes.string_at(p + off, chunk).count(0xA5) != chunk:
                    raise Fail("managed memory: the device write is not visible on the host", "wrong-result")
        for i, p in enumerate(ptrs):
            if leak and i == 0:
                kept.append(p)
                continue
            drv.check(lib.cuMemFree_v2(ctypes.c_uint64(p)), "cuMemFree")

    one_round(False)  # warm-up: the driver's own pools settle here
    before, info_before = _memory(drv)
    for _ in range(UM_ROUNDS):
        one_round(injected == "leak")
    after, info_after = _memory(drv)
    unexplained = unexplained_drop(info_before, info_after, len(kept) * size)
    for p in kept:
        drv.check(lib.cuMemFree_v2(ctypes.c_uint64(p)), "cuMemFree")
    ctx.metric("allocations", UM_ROUNDS * UM_PER_ROUND)
    ctx.metric("allocation_mib", size // 2**20)
    ctx.metric("allocated_mib_total", UM_ROUNDS * UM_PER_ROUND * size // 2**20)
    ctx.metric("rss_growth_mib", (after.rss - before.rss) / 2**20)
    ctx.metric("gpu_used_growth_mib", (after.gpu_used - before.gpu_used) / 2**20)
    ctx.metric("mem_available_drop_mib", (before.mem_available - after.mem_available) / 2**20)
    for key, label in (("AnonPages", "anon_pages"), ("Slab", "slab")):
        ctx.metric(f"{label}_growth_mib", (info_after.get(key, 0) - info_before.get(key, 0)) / 2**20)
    ctx.metric("held_mib", len(kept) * size / 2**20)
    ctx.metric("unexplained_drop_mib", unexplained / 2**20)
    if kept:
        ctx.metric("leaked_by_fault_mib", len(kept) * size // 2**20)
    problems = leak_problems(before, after, size)
    if problems:
        raise Fail(f"unified memory leak over {UM_ROUNDS * UM_PER_ROUND} freed {size >> 20} MiB managed "
                   f"allocations: " + "; ".join(problems) + f"; {unexplained / 2**20:.1f} MiB of MemAvailable's "
                   "drop explained by neither RSS, AnonPages, Slab nor the managed bytes still held", "memory-leak")
    ctx.summary = (f"{UM_ROUNDS * UM_PER_ROUND} managed {size >> 20} MiB allocations freed; RSS "
                   f"{ctx.metrics['rss_growth_mib']:+.1f} MiB, GPU {ctx.metrics['gpu_used_growth_mib']:+.1f} MiB, "
                   f"MemAvailable {-ctx.metrics['mem_available_drop_mib']:+.1f} MiB (limit 16 MiB each), "
                   f"unexplained drop {unexplained / 2**20:.1f} MiB")


# --- arch coverage -------------------------------------------------------------------------------
# The analysis is pinmatrix's own (pinmatrix.archscan: exact targets with cuobjdump, per kernel group, the
# cited rules of data/arch_rules.toml). The runner points PINMATRIX_LIB at a folder that holds only the
# pinmatrix package (mounted read-only in containers) and PINMATRIX_CUOBJDUMP at cuobjdump from its wheel.


def _archscan():  # returns three modules
    lib = os.environ.get("PINMATRIX_LIB")
    if lib and lib not in sys.path:
        sys.path.append(lib)
    try:
        from pinmatrix.archflag import ArchFlag
        from pinmatrix.archscan import binary, verdict
    except ImportError as err:
        raise Skip(f"pinmatrix's arch analysis is not importable here ({err}); the runner sets PINMATRIX_LIB") from None
    return ArchFlag, binary, verdict


def _cuobjdump() -> str | None:
    given = os.environ.get("PINMATRIX_CUOBJDUMP")
    if given is not None:  # "" turns the tool off: the fatbin header parser alone
        return given if given and os.access(given, os.X_OK) else None
    return shutil.which("cuobjdump") or (
        "/usr/local/cuda/bin/cuobjdump" if os.path.exists("/usr/local/cuda/bin/cuobjdump") else None)


def _gpu(ctx: Context, flags: list) -> str:
    """The capability the binaries must run on: the cell's GPU, else the device's, else the newest arch flag's."""
    cap = ctx.cell.get("compute_capability")
    if cap:
        return str(cap)
    devs = nvidia_smi()
    if devs and devs[0]["capability"]:
        return devs[0]["capability"]
    if flags:
        return max(flags, key=lambda f: f.capability).base
    raise Skip("no target GPU: the cell names none, has no arch flags and no GPU is visible")


def _cuda_binaries() -> list[tuple[str, Path]]:
    """(module label, path) of the CUDA binaries of the environment's stack packages."""
    out: list[tuple[str, Path]] = []

    def add_dist(dist_name: str, patterns: tuple[str, ...]) -> None:
        try:
            dist = md.distribution(dist_name)
        except md.PackageNotFoundError:
            return
        for f in dist.files or []:
            s = str(f)
            if s.endswith(".so") or ".so." in s:
                if any(re.search(p, s) for p in patterns):
                    out.append((f"{dist_name}:{s}", Path(dist.locate_file(f))))

    add_dist("torch", (r"libtorch_cuda\.so$", r"libc10_cuda\.so$"))
    add_dist("vllm", (r"_C\..*so$", r"_moe_C\..*so$"))
    add_dist("xformers", (r"_C\..*so$",))
    add_dist("flashinfer-jit-cache", (r"\.so$",))
    try:  # FlashInfer's AOT folder: the modules pinmatrix compiled at build time (image/assembly/aot_plan.py)
        aot = Path(md.distribution("flashinfer-python").locate_file("flashinfer/data/aot"))
    except md.PackageNotFoundError:
        aot = None
    if aot is not None and aot.is_dir():
        for so in sorted(aot.rglob("*.so")):
            out.append((f"flashinfer-aot:{so.relative_to(aot)}", so))
    cache = Path(os.environ.get("FLASHINFER_WORKSPACE_BASE", Path.home())) / ".cache" / "flashinfer"
    if cache.is_dir():
        for so in sorted(cache.rglob("*.so")):
            out.append((f"flashinfer-jit:{so.relative_to(cache)}", so))
    extra = os.environ.get("PINMATRIX_ARCH_BINARIES")
    if extra:
        for p in extra.split(os.pathsep):
            if p:
                out.append((f"extra:{p}", Path(p)))
    return out


# Modules built for the cell's own arch list (JIT caches, source builds): they must carry the exact target of
# each arch flag, since a family or PTX fallback is the slow path (the GB10's compute_120f NVFP4 story).
CELL_BUILT = ("flashinfer-jit", "flashinfer-jit-cache", "flashinfer-aot", "vllm", "extra")


def arch_coverage(ctx: Context) -> None:
    ArchFlag, binary, verdict = _archscan()
    flags = [ArchFlag.parse(f) for f in ctx.cell.get("arch_flags") or [] if f and not f.startswith("+")]
    cap = verdict.parse_gpu(_gpu(ctx, flags))
    if not flags:  # host mode without a cell: the device's own capability, plain
        flags = [ArchFlag(cap[0], cap[1], "", False)]
    binaries = _cuda_binaries()
    if not binaries:
        raise Skip("no CUDA binaries in the environment (torch/vllm/xformers/flashinfer absent)")
    exe = _cuobjdump()
    ctx.metric("tool", "cuobjdump" if exe else "fatbin parser")
    ctx.metric("gpu", f"{cap[0]}.{cap[1]}")
    problems: list[str] = []
    scanned = jit_groups = 0
    for label, path in binaries:
        found = binary.read_binary(path, exe, label=label)
        if found is None:
            continue  # no device code in this library
        scanned += 1
        judged = verdict.binary_verdict(found, cap)
        print(f"{label}: SASS {' '.join(found.sass) or '-'} | PTX {' '.join(found.ptx) or '-'} | {judged.summary}")
        for note in found.notes:
            print(f"  note: {note}")
        ctx.metric(f"targets.{label}", " ".join(found.sass + found.ptx)[:500])
        ctx.metric(f"verdict.{label}", judged.verdict)
        jit_groups += judged.counts.get(verdict.JIT, 0)
        if judged.verdict in (verdict.CANNOT, verdict.PARTIAL):
            problems.append(f"{label}: {judged.summary}")
        if label.split(":", 1)[0] in CELL_BUILT:
            for flag in flags:
                if verdict.honours(found, flag) is False:
                    problems.append(f"{label} lacks {flag.sass_name} (has {' '.join(found.sass) or 'PTX only'})")
    ctx.metric("binaries_scanned", scanned)
    ctx.metric("ptx_jit_groups", jit_groups)
    if scanned == 0:
        raise Skip("the environment's CUDA libraries hold no device code")
    if problems:
        raise Fail(f"capability {cap[0]}.{cap[1]}: {len(problems)} problem(s): " + "; ".join(problems[:8])
                   + (" ..." if len(problems) > 8 else ""), "missing-arch")
    ctx.summary = (f"all {scanned} CUDA binaries run on {cap[0]}.{cap[1]}"
                   + (f" ({jit_groups} kernel groups only via PTX JIT)" if jit_groups else "")
                   + ("" if exe else " (arch suffixes not read without cuobjdump)"))


if __name__ == "__main__":
    main(SMOKES, globals())
