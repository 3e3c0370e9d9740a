"""FlashInfer's AOT modules for a cell of another architecture: the host code cross-compiled on this builder.

An aarch64 cell's Python cannot run on an x86_64 builder, but FlashInfer's generator only writes ninja files, nvcc
compiles device code for any GPU on any host, and the host code compiles with Debian's cross compiler. So, for a
foreign cell whose architecture ``data/toolchains.toml`` ``[[cross]]`` declares:

- the builder root: the cell's base for the builder's architecture, the venv, and the builder-architecture wheels of
  the cell's own pins that the generator imports (``generator_imports`` and the toolchain's requirements, with
  everything the lock says they need: its ``# via`` lines). The lock's hashes cover every platform's wheel of a
  version, so the wheels are the cell's pins, not a second resolve;
- a CUDA_HOME in that root whose ``bin``, ``include`` and ``nvvm`` are the builder's nvcc wheels (relative links) and
  whose ``lib64`` holds the cell's own link libraries (``libraries_from``) and the cell's ``libcuda.so`` stub;
- the generator (shipped/flashinfer_aot.py ``--ninja-only``) in that root, with CC/CXX = the cross compiler's name;
- ninja on this builder (``nice -n 10``) on each ninja file with the root's absolute paths moved under the root, so
  nvcc (an x86_64 program of the wheels) and the cross compiler run here; each module must be an ELF of the cell's
  architecture.

The key (aot_plan.plan) holds the cross compiler's identity, the builder root's base and its wheels."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pinmatrix.cell import Cell
from pinmatrix.image.assembly import aot_plan
from pinmatrix.image.assembly.aot_plan import SCRATCH, AotBuild, AotError, AotPlan, CrossInputs
from pinmatrix.image.assembly.rootfs import BaseLayers
from pinmatrix.image.assembly.scratch_space import remove_tree, scratch_dir
from pinmatrix.index.wheel_index import Target, WheelFile
from pinmatrix.oci.layer import LayerWriter
from pinmatrix.oci.scratch_unpack import RootLayers, unpack
from pinmatrix.project.lockfile import LockEntry
from pinmatrix.project.toolchains import CrossSpec, Toolchain, ToolchainDoc, shipped

CROSS_FORMAT = 1  # bump when the cross build's bytes for the same inputs would change
XCUDA = f"{SCRATCH}/xcuda"  # the cross CUDA_HOME, inside the builder root
# The absolute paths the generator writes into its ninja files: the venv (sources, CUTLASS, tvm_ffi), the scratch
# folder (CUDA_HOME, the JIT workspace) and Python's headers. Each is moved under the builder root.
ROOT_PREFIXES = ("/opt/venv/", f"/{SCRATCH}/", "/usr/include/")
NINJA_TIMEOUT_S = 4 * 3600
_ELF_MACHINE = {"x86_64": 62, "aarch64": 183}
_MAX_NINJA = 4 << 20  # a generated ninja file is a few kB


def cross_spec(machine: str, doc: ToolchainDoc | None = None) -> CrossSpec | None:
    return next((c for c in (doc or shipped()).cross if c.machine == machine), None)


def compiler_identity(name: str) -> str | None:
    """``path | first --version line | sha256 of the binary`` of the cross compiler on PATH, None when absent."""
    found = shutil.which(name)
    if found is None:
        return None
    proc = subprocess.run([found, "--version"], capture_output=True, text=True, check=False, timeout=60)
    first = next((ln.strip() for ln in proc.stdout.splitlines() if ln.strip()), "unknown")
    digest = hashlib.sha256(Path(found).resolve().read_bytes()).hexdigest()
    return f"{found} | {first} | sha256:{digest}"


def builder_platform(cell: Cell) -> str:
    """The cell's platform with the builder's architecture: aarch64-manylinux_2_35 -> x86_64-manylinux_2_35."""
    return f"{aot_plan.host_machine()}-{cell.platform.split('-', 1)[1]}"


def builder_entries(entries: Sequence[LockEntry], roots: Sequence[str]) -> list[LockEntry]:
    """The lock entries of ``roots`` and everything they need, by the lock's ``# via`` lines, in lock order."""
    by_name = {e.name: e for e in entries}
    chosen = {r for r in roots if r in by_name}
    grew = True
    while grew:
        grew = False
        for entry in entries:
            if entry.name not in chosen and any(v in chosen for v in entry.via):
                chosen.add(entry.name)
                grew = True
    return [e for e in entries if e.name in chosen]


def _requirement_names(chain: Toolchain) -> list[str]:
    return [re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in chain.wheels.requirements]


def inputs(cell: Cell, aot: AotPlan, entries: Sequence[LockEntry], choose: Callable[[LockEntry, Target], WheelFile],
           base_for: Callable[[Cell], BaseLayers], doc: ToolchainDoc | None = None) -> CrossInputs:
    """What the foreign ``cell``'s modules are cross-compiled with, or (``skip``) why they cannot be here."""
    machine, host = aot_plan.cell_machine(cell), aot_plan.host_machine()
    spec = cross_spec(machine, doc)
    if spec is None:
        return CrossInputs(None)
    compiler = compiler_identity(spec.compiler)
    if compiler is None:
        return CrossInputs(spec, skip=f"a {machine} cell's FlashInfer modules are cross-compiled on this {host} "
                                      f"builder with {spec.compiler}, which is not on PATH (apt-get install "
                                      f"{spec.package}): its kernels are compiled at run time")
    assert aot.toolchain is not None
    roots = [*spec.generator_imports, *_requirement_names(aot.toolchain)]
    chosen = builder_entries(entries, roots)
    missing = [r for r in spec.generator_imports if r not in {e.name for e in chosen}]
    if missing:
        return CrossInputs(spec, skip=f"the cell's lock has no {', '.join(missing)}, which FlashInfer's generator "
                                      "imports: its kernels are compiled at run time")
    platform = builder_platform(cell)
    target = Target(python=cell.python, platform=platform)
    base = base_for(dataclasses.replace(cell, platform=platform))
    wheels = {e.name: choose(e, target) for e in chosen}
    return CrossInputs(spec, compiler=compiler, platform=platform, base_key=base.key, base_layers=base.layers,
                       wheels=wheels, fmt=CROSS_FORMAT)


# -- the cross CUDA_HOME -----------------------------------------------------------------------------------


def copy_cell_libraries(chain: Toolchain, site_packages: str, wheels: Sequence[Path], dest: Path) -> list[str]:
    """The cell's own ``<home>/lib/libcudart.so.13``... (aot_plan.LINK_LIBRARIES) from its wheels into ``dest``,
    with their unversioned links; the names copied."""
    major = chain.wheels.cudart.rsplit(".", 1)[1]
    wanted = {f"{chain.wheels.home}/lib/{name}.{major}": f"{name}.{major}" for name in aot_plan.LINK_LIBRARIES}
    dest.mkdir(parents=True, exist_ok=True)
    copied: list[str] = []
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                name = wanted.get(info.filename)
                if name is None or name in copied:
                    continue
                with zf.open(info) as src, open(dest / name, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
                copied.append(name)
                link = dest / name.rsplit(".", 1)[0]
                link.unlink(missing_ok=True)
                link.symlink_to(name)
    return copied


def make_cross_home(root: Path, site_packages: str, chain: Toolchain, cell_wheels: Sequence[Path],
                    stub: bytes) -> str:
    """The cross CUDA_HOME in ``root``: bin/include/nvvm -> the builder's nvcc wheels, lib64 the cell's libraries
    and libcuda stub. Returns its path as seen inside the root."""
    home = root / XCUDA
    home.mkdir(parents=True, exist_ok=True)
    wheels_home = root / chain.cuda_home(site_packages).lstrip("/")
    for part in ("bin", "include", "nvvm"):
        if not (wheels_home / part).is_dir():
            raise AotError(f"the builder root has no {chain.cuda_home(site_packages)}/{part} (its nvcc wheels)")
        (home / part).symlink_to(os.path.relpath(wheels_home / part, home))
    lib64 = home / "lib64"
    copied = copy_cell_libraries(chain, site_packages, cell_wheels, lib64)
    if chain.wheels.cudart not in copied:
        raise AotError(f"none of the cell's wheels holds {chain.wheels.home}/lib/{chain.wheels.cudart}")
    (lib64 / "stubs").mkdir(exist_ok=True)
    (lib64 / "stubs" / "libcuda.so").write_bytes(stub)
    return f"/{XCUDA}"


# -- ninja on the builder ----------------------------------------------------------------------------------


def rewrite_ninja(text: str, root: Path) -> str:
    """The generator's ninja file with the root's absolute paths (ROOT_PREFIXES) moved under ``root``. Any other
    absolute path left in it would name a file of this builder, not of the root: refused."""
    root = root.resolve()
    pattern = re.compile(r"(^|[\s=]|-I)(" + "|".join(re.escape(p) for p in ROOT_PREFIXES) + ")", re.M)
    moved = pattern.sub(lambda m: f"{m.group(1)}{root}{m.group(2)}", text)
    stray = sorted({tok for raw in moved.split() for tok in [raw.removeprefix("-I")]
                    if tok.startswith("/") and not tok.startswith(f"{root}/")})
    if stray:
        raise AotError(f"the generated ninja file names paths outside the builder root: {', '.join(stray[:5])}")
    return moved


def ninja_program(root: Path, site_packages: str) -> str:
    """The ninja of the builder root's own ninja wheel (its ``.data/scripts/ninja``, installed as the venv's
    ``bin/ninja``: a builder-architecture ELF), else the host's."""
    pinned = root / site_packages.strip("/").split("/lib/", 1)[0] / "bin" / "ninja"
    if pinned.is_file() and elf_machine(pinned) == _ELF_MACHINE.get(aot_plan.host_machine()):
        return str(pinned)
    found = shutil.which("ninja")
    if found is None:
        raise AotError("no ninja: neither the builder root's ninja wheel nor one on PATH (apt-get install ninja-build)")
    return found


def run_ninja(ninja_file: Path, root: Path, site_packages: str, log: Path, *, jobs: int,
              timeout_s: float = NINJA_TIMEOUT_S) -> int:
    """``nice -n 10 ninja -j JOBS`` on the rewritten copy of ``ninja_file``, its output appended to ``log``."""
    root, ninja_file = root.resolve(), ninja_file.resolve()  # ninja -C changes folder; the paths must not be relative
    if ninja_file.stat().st_size > _MAX_NINJA:
        raise AotError(f"{ninja_file}: a generated ninja file above {_MAX_NINJA} bytes")
    moved = ninja_file.with_name("build.cross.ninja")
    moved.write_text(rewrite_ninja(ninja_file.read_text(), root))
    cmd = ["nice", "-n", "10", ninja_program(root, site_packages), "-C", str(ninja_file.parent), "-f", str(moved),
           "-j", str(max(1, jobs))]
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(f"+ {' '.join(cmd)}\n")
        handle.flush()
        try:
            return subprocess.run(cmd, stdout=handle, stderr=subprocess.STDOUT, check=False, timeout=timeout_s,
                                  env={**os.environ, **aot_plan.nvcc_env(os.environ)}).returncode
        except subprocess.TimeoutExpired:
            return 124


def elf_machine(path: Path) -> int | None:
    with open(path, "rb") as handle:
        head = handle.read(20)
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    return int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")


def build_modules(cell: Cell, aot: AotPlan, manifest: Mapping[str, object], root: Path, site_packages: str,
                  out: Path, log: Path, *, jobs: int,
                  on_step: Callable[[str], None] = lambda what: None) -> tuple[dict[str, object], list[tuple[str, Path]]]:
    """ninja on each module the generator wrote; the final manifest and (name in the AOT folder, file)."""
    machine = aot_plan.cell_machine(cell)
    built: list[dict[str, object]] = []
    files: list[tuple[str, Path]] = []
    for item in manifest.get("built", []):  # type: ignore[attr-defined]
        name = aot_plan.module_name(cell, item)
        ninja = root / str(item["ninja"]).lstrip("/")
        so = root / str(item["so"]).lstrip("/")
        on_step(f"aot: ninja {name} (cross, -j {jobs})")
        start = time.monotonic()
        status = run_ninja(ninja, root, site_packages, log, jobs=jobs)
        if status != 0 or not so.is_file():
            tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-3:] or ["no output"]
            raise AotError(f"cell {cell.id} ({cell.name}): cross-compiling the FlashInfer module {name} for "
                           f"{aot.arch_list} failed (exit {status}; {log}): {' | '.join(tail)[:400]}")
        if elf_machine(so) != _ELF_MACHINE.get(machine):
            raise AotError(f"cell {cell.id}: the cross-compiled {name}.so is not a {machine} ELF (e_machine "
                           f"{elf_machine(so)})")
        dest = out / name / f"{name}.so"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(so, dest)
        files.append((f"{name}/{name}.so", dest))
        built.append({k: v for k, v in item.items() if k not in ("ninja", "so")}
                     | {"bytes": dest.stat().st_size, "seconds": round(time.monotonic() - start, 1)})
    final = {**manifest, "built": built}
    return final, files


def build_cross(cell: Cell, aot: AotPlan, builder_layers: RootLayers, cell_wheels: Sequence[Path],
                site_packages: str, stub: bytes, work: Path, log: Path, *, jobs: int = 2,
                on_step: Callable[[str], None] = lambda what: None) -> AotBuild:
    """The whole cross build in ``work``: builder root, cross CUDA_HOME, generator, ninja, collect."""
    assert aot.toolchain is not None and aot.cross is not None and aot.cross.spec is not None
    start = time.monotonic()
    root = work / "root"
    on_step(f"aot: unpack the {aot.cross.platform} builder root ({len(aot.cross.wheels or {})} wheels)")
    unpack(root, builder_layers)
    home = make_cross_home(root, site_packages, aot.toolchain, cell_wheels, stub)
    compiler = aot.cross.spec.compiler
    on_step(f"aot: write the ninja files of {' '.join(aot.modules)} for {aot.arch_list} (generator in the builder root)")
    env = {"CUDA_HOME": home, "CC": compiler, "CXX": compiler, "PATH": f"{home}/bin:/opt/venv/bin:/usr/bin:/bin"}
    manifest = aot_plan.generate(cell, aot, root, log, jobs=jobs, extra_env=env, ninja_only=True)
    final, files = build_modules(cell, aot, manifest, root, site_packages, work / "out", log, jobs=jobs,
                                 on_step=on_step)
    final["cross"] = {"builder": aot_plan.host_machine(), "compiler": aot.cross.compiler.split(" | ")[1],
                      "builder_platform": aot.cross.platform}
    final["deferred"] = list(aot.deferred)
    return AotBuild(final, files, time.monotonic() - start)


def layer_builder(cell: Cell, aot: AotPlan, site_packages: str,
                  builder_layers: Callable[[], RootLayers], cell_wheels: Callable[[], Sequence[Path]],
                  cache_dir: Path, log: Path, on_step: Callable[[str], None], *, jobs: int = 2) -> Callable[[LayerWriter], None]:
    """What the assembler calls to write a foreign cell's flashinfer-aot layer (only when it is not cached)."""
    def build(writer: LayerWriter) -> None:
        with scratch_dir(cache_dir) as tmp:
            work = Path(tmp)
            stub = aot_plan.stub_libcuda(aot_plan.cell_machine(cell))
            try:
                result = build_cross(cell, aot, builder_layers(), cell_wheels(), site_packages, stub, work, log,
                                     jobs=jobs, on_step=on_step)
                on_step(f"aot: {len(result.files)} module(s) cross-compiled in {result.seconds:.0f} s")
                with open(log, "a", encoding="utf-8") as handle:
                    handle.write(f"flashinfer-aot: {json.dumps(result.manifest, sort_keys=True)}\n")
                aot_plan.write_aot_layer(writer, site_packages, result)
            finally:
                remove_tree(work / "root")
    return build


def describe(cell: Cell, aot: AotPlan) -> str:
    """The build log's line for a cross-compiled AOT layer: which path, with what, and what is left to run time."""
    assert aot.cross is not None
    left = (f"; compiled at run time: {', '.join(aot.deferred)} (not declared for cross-compiling in "
            "data/toolchains.toml [[cross]])") if aot.deferred else ""
    return (f"flashinfer-aot: cross-compiled for cell {cell.id}: {', '.join(aot.modules)} for {aot.arch_list}, "
            f"generator in the {aot.cross.platform} builder root ({len(aot.cross.wheels or {})} wheels of the cell's "
            f"pins), host code by {aot.cross.compiler.split(' | ')[1]}{left}")


def builder_wheels(aot: AotPlan) -> Mapping[str, WheelFile]:
    return (aot.cross.wheels if aot.cross else None) or {}
