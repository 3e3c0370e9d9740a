"""Host-level smokes: what the machine and the environment are, before any kernel runs.

Oracles (two lines each; host-probe, python-imports and arch-coverage compare facts, not kernel results):
- unified-memory-leak: process RSS, GPU memory in use and the system's MemAvailable, sampled around allocate /
  touch / free cycles of 32 MiB managed buffers, may not grow by half a buffer; fault leak keeps one per round.
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
    },
    "python-imports": {
        "func": "python_imports",
        "description": "every pinned distribution is installed at its pinned version and its modules import.",
        "needs": {},
        "phase": 0,
        "timeout_s": 300,
    },
    "unified-memory-leak": {
        "func": "um_leak",
        "description": "allocate / touch on host and device / free cycles of 32 MiB managed buffers "
        "(cuMemAllocManaged) must not grow RSS, GPU memory in use or MemAvailable by half a buffer (the driver "
        "590.48.01 class of fault).",
        "needs": {"gpu": True},
        "timeout_s": 300,
    },
    "arch-coverage": {
        "func": "arch_coverage",
        "description": "lists SASS/PTX targets of the environment's CUDA binaries (torch, flashinfer JIT cache, "
        "vllm _C, xformers _C) and fails when the cell's target arch is missing; runs without a GPU.",
        "needs": {},
        "phase": 9,
        "timeout_s": 600,
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


def _memory(drv) -> MemorySample:  # noqa: ANN001
    return MemorySample(rss=_rss(), gpu_used=_gpu_used(drv), mem_available=_meminfo().get("MemAvailable", 0))


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
    before = _memory(drv)
    for _ in range(UM_ROUNDS):
        one_round(injected == "leak")
    after = _memory(drv)
    for p in kept:
        drv.check(lib.cuMemFree_v2(ctypes.c_uint64(p)), "cuMemFree")
    ctx.metric("allocations", UM_ROUNDS * UM_PER_ROUND)
    ctx.metric("allocation_mib", size // 2**20)
    ctx.metric("allocated_mib_total", UM_ROUNDS * UM_PER_ROUND * size // 2**20)
    ctx.metric("rss_growth_mib", (after.rss - before.rss) / 2**20)
    ctx.metric("gpu_used_growth_mib", (after.gpu_used - before.gpu_used) / 2**20)
    ctx.metric("mem_available_drop_mib", (before.mem_available - after.mem_available) / 2**20)
    if kept:
        ctx.metric("leaked_by_fault_mib", len(kept) * size // 2**20)
    problems = leak_problems(before, after, size)
    if problems:
        raise Fail(f"unified memory leak over {UM_ROUNDS * UM_PER_ROUND} freed {size >> 20} MiB managed "
                   f"allocations: " + "; ".join(problems), "memory-leak")
    ctx.summary = (f"{UM_ROUNDS * UM_PER_ROUND} managed {size >> 20} MiB allocations freed; RSS "
                   f"{ctx.metrics['rss_growth_mib']:+.1f} MiB, GPU {ctx.metrics['gpu_used_growth_mib']:+.1f} MiB, "
                   f"MemAvailable {-ctx.metrics['mem_available_drop_mib']:+.1f} MiB (limit 16 MiB each)")


# --- arch coverage -------------------------------------------------------------------------------
FATBIN_MAGIC = 0xBA55ED50


def parse_fatbins(data: bytes) -> set[str]:
    """Targets in every fatbin container of ``data``: ``sm_XY`` (SASS) and ``compute_XY`` (PTX).
    Suffixes (a/f) live inside the compressed ELF and are not read here; cuobjdump reports them."""
    import struct

    found: set[str] = set()
    magic = struct.pack("<I", FATBIN_MAGIC)
    pos = data.find(magic)
    while pos != -1 and pos + 16 <= len(data):
        _, _ver, hdr, size = struct.unpack_from("<IHHQ", data, pos)
        end = pos + hdr + size
        if hdr != 16 or end > len(data):
            pos = data.find(magic, pos + 4)
            continue
        entry = pos + hdr
        while entry + 64 <= end:
            kind, _u, esize, aligned = struct.unpack_from("<HHII", data, entry)
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            if esize < 64 or esize > 4096:
                break
            if kind == 1:
                found.add(f"compute_{arch}")
            elif kind in (2, 0x10):
                found.add(f"sm_{arch}")
            entry += esize + aligned
        pos = data.find(magic, end)
    return found


def cuobjdump_targets(path: Path, exe: str) -> set[str] | None:
    found: set[str] = set()
    for flag, kind in (("--list-elf", "sm"), ("--list-ptx", "compute")):
        try:
            out = subprocess.run([exe, flag, str(path)], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if out.returncode != 0 and "does not contain" not in (out.stderr + out.stdout):
            return None
        for m in re.finditer(r"\.(sm_\d+[a-z]?)\.(?:cubin|ptx)", out.stdout):
            found.add(m.group(1) if kind == "sm" else m.group(1).replace("sm_", "compute_"))
    return found


def _normalise_target(flag: str) -> str:
    """'12.1a' / 'sm_121a' / '9.0' -> 'sm_121a' / 'sm_90'."""
    flag = flag.strip()
    if flag.startswith(("sm_", "compute_")):
        return "sm_" + flag.split("_", 1)[1]
    m = re.match(r"^(\d+)\.(\d+)([af]?)$", flag)
    if not m:
        raise Fail(f"cannot read target arch {flag!r}", "bad-input")
    return f"sm_{m.group(1)}{m.group(2)}{m.group(3)}"


def _targets(ctx: Context) -> list[str]:
    flags = [f for f in ctx.cell.get("arch_flags") or [] if f and not f.startswith("+")]
    if flags:
        return [_normalise_target(f) for f in flags]
    cap = ctx.cell.get("compute_capability")
    if cap:
        return [_normalise_target(cap)]
    devs = nvidia_smi()
    if devs and devs[0]["capability"]:
        return [_normalise_target(devs[0]["capability"])]
    raise Skip("no target arch: no cell arch flags and no GPU to take it from")


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


def _split(target: str) -> tuple[int, int, str]:
    m = re.match(r"^(?:sm|compute)_(\d+?)(\d)([af]?)$", target)
    if not m:
        return (0, 0, "")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def runnable(found: set[str], target: str) -> bool:
    """Can the device of ``target`` run this module at all? SASS of the same major and a minor not
    above the target's (arch-specific 'a' SASS only on its exact arch), or PTX of a lower arch to JIT."""
    major, minor, _ = _split(target)
    for t in found:
        tmaj, tmin, suffix = _split(t)
        if t.startswith("sm_"):
            if suffix == "a" and (tmaj, tmin) != (major, minor):
                continue
            if tmaj == major and tmin <= minor:
                return True
        elif (tmaj, tmin) <= (major, minor) and suffix != "a":
            return True
    return False


def carries(found: set[str], target: str, exact: bool) -> bool:
    """Does a cell-built module carry SASS for ``target`` itself? sm_XYa needs sm_XYa; sm_XYf takes sm_XYf
    or sm_XYa; a plain sm_XY takes any of the three. Without cuobjdump (``exact`` False) suffixes are not
    known and the number decides."""
    base = re.sub(r"[af]$", "", target)
    if not exact:
        return any(re.sub(r"[af]$", "", t) == base for t in found if t.startswith("sm_"))
    accepted = {"a": {target}, "f": {target, base + "a"}}.get(target[-1], {base, base + "a", base + "f"})
    return bool(accepted & found)


# Modules built for the cell's own arch list (JIT caches, source builds): they must carry the exact target,
# since a family or PTX fallback is the slow path (the GB10's compute_120f NVFP4 story).
CELL_BUILT = ("flashinfer-jit", "flashinfer-jit-cache", "vllm", "extra")


def arch_coverage(ctx: Context) -> None:
    targets = _targets(ctx)
    binaries = _cuda_binaries()
    if not binaries:
        raise Skip("no CUDA binaries in the environment (torch/vllm/xformers/flashinfer absent)")
    exe = shutil.which("cuobjdump") or (
        "/usr/local/cuda/bin/cuobjdump" if os.path.exists("/usr/local/cuda/bin/cuobjdump") else None
    )
    ctx.metric("tool", "cuobjdump + fatbin parser" if exe else "fatbin parser")
    problems: list[str] = []
    scanned = 0
    for label, path in binaries:
        cell_built = label.split(":", 1)[0] in CELL_BUILT
        # cuobjdump reads arch suffixes (sm_90a) but is slow on GiB-sized libraries; the fatbin parser is
        # fast and enough to decide whether a prebuilt library can run at all.
        use_tool = exe is not None and (cell_built or path.stat().st_size < 256 * 2**20)
        found = cuobjdump_targets(path, exe) if use_tool else None
        exact = found is not None
        if found is None:
            found = parse_fatbins(path.read_bytes())
        if not found:
            continue  # no device code in this library
        scanned += 1
        sass = sorted(t for t in found if t.startswith("sm_"))
        ptx = sorted(t for t in found if t.startswith("compute_"))
        print(f"{label}: SASS {' '.join(sass) or '-'} | PTX {' '.join(ptx) or '-'}")
        ctx.metric(f"targets.{label}", " ".join(sass + ptx)[:500])
        for t in targets:
            if not runnable(found, t):
                problems.append(f"{label} has no SASS or PTX for {t}")
            elif cell_built and not carries(found, t, exact):
                problems.append(f"{label} lacks {t} (has {' '.join(sass) or 'PTX only'})")
    ctx.metric("binaries_scanned", scanned)
    if scanned == 0:
        raise Skip("the environment's CUDA libraries hold no device code")
    if problems:
        raise Fail(f"target arch missing in {len(problems)} module(s): " + "; ".join(problems[:8])
                   + (" ..." if len(problems) > 8 else ""), "missing-arch")
    ctx.summary = f"{', '.join(targets)} covered in all {scanned} CUDA binaries" + (
        "" if exe else " (arch suffixes not read without cuobjdump)")


if __name__ == "__main__":
    main(SMOKES, globals())
