"""The cell's arch flag realised in its image: FlashInfer's kernel modules compiled ahead of time at build time.

Two layers, both keyed by what they are made of, so cells that agree share them:

- ``cuda-link``: what the PyPI CUDA wheels lack for linking (FlashInfer links every module with
  ``-L$CUDA_HOME/lib64 -L$CUDA_HOME/lib64/stubs -lcudart -lcuda``, and ``-lcublas -lcublasLt`` for its GEMMs; the
  wheels hold only ``lib/libcudart.so.13``, ...): ``lib64 -> lib``, the unversioned ``.so`` links, and a stub
  ``libcuda.so`` (SONAME ``libcuda.so.1``, no code: the driver's own is found at run time). Without it neither
  nvcc nor FlashInfer's JIT can link anything in the image.
- ``flashinfer-aot``: the modules the cell's smokes load (``data/toolchains.toml`` ``[[aot]]``), built for the
  cell's ``FLASHINFER_CUDA_ARCH_LIST`` by FlashInfer's own generator (``shipped/flashinfer_aot.py``) in the cell's own
  root filesystem (its base, venv and wheel layers unpacked into a scratch folder and entered with chroot in a
  mount namespace of its own: no GPU, no network), and placed at ``<site-packages>/flashinfer/data/aot/<name>/
  <name>.so``: FlashInfer's AOT folder, which ``JitSpec.is_aot`` checks before it compiles anything.

The build runs the cell's own programs where they run natively. A cell of another architecture (an aarch64 cell
on an x86_64 builder) gets its modules cross-compiled where ``data/toolchains.toml`` ``[[cross]]`` declares how
(``image/assembly/crossaot.py``: the generator in a builder root of the builder's architecture, the host code compiled by
Debian's cross compiler), only the modules declared there, the others compiled at run time; without a declaration
or without the cross compiler it gets no AOT layer, and the reason is logged in one line."""

from __future__ import annotations

import json
import os
import platform as host_platform
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pinmatrix.archflag import ArchFlag
from pinmatrix.cell import Cell
from pinmatrix.errors import PinmatrixError
from pinmatrix.hashing import sha256_bytes
from pinmatrix.image.assembly.elfstub import StubError, link_stub
from pinmatrix.image.assembly.scratch_space import remove_tree, scratch_dir
from pinmatrix.image.cellconfig import cell_env
from pinmatrix.index.wheel_index import WheelFile
from pinmatrix.oci.layer import LayerDescriptor, LayerWriter
from pinmatrix.oci.scratch_unpack import RootLayers, unpack
from pinmatrix.project.catalogue import matches
from pinmatrix.project.toolchains import CrossSpec, Toolchain, ToolchainDoc, for_cell, shipped

AOT_FORMAT = 2  # bump when the layers' bytes for the same inputs would change (2: no build times, nvcc's stable names)
# nvcc names its intermediate files tmpxft_<pid>_..., and those names land in each object's symbol table, so two
# builds of one module differed in 12 bytes; made in the object's own folder they are named after the object.
NVCC_STABLE_NAMES = "--objdir-as-tempdir"
AOT_FOLDER = "flashinfer/data/aot"  # under site-packages: flashinfer.jit.env.FLASHINFER_AOT_DIR
MANIFEST = "pinmatrix-aot.json"  # what was built, in the AOT folder
BUILDER = "shipped/flashinfer_aot.py"
SCRATCH = "tmp/pinmatrix-aot"  # inside the scratch root
# Link-time names FlashInfer's ninja files ask for, and the versioned files the wheels hold (in <home>/lib).
LINK_LIBRARIES = ("libcudart.so", "libcublas.so", "libcublasLt.so")
BUILD_TIMEOUT_S = 4 * 3600
_MACHINE = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


class AotError(PinmatrixError):
    """The ahead-of-time FlashInfer build failed; the message names the cell, the module step and the log."""


def _key(*parts: object) -> str:
    return sha256_bytes(json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str).encode())


def builder_source() -> bytes:
    return resources.files("pinmatrix").joinpath(BUILDER).read_bytes()


def cell_machine(cell: Cell) -> str:
    return cell.platform.split("-", 1)[0]


def host_machine() -> str:
    return _MACHINE.get(host_platform.machine(), host_platform.machine())


def aot_modules(cell: Cell, doc: ToolchainDoc | None = None) -> tuple[str, ...]:
    """The FlashInfer modules the cell's smokes load, in the order of ``[[aot]]``, each once; the FP4 ones only
    where the cell's arch flags have a native-FP4 target (10.x and up)."""
    flags = [ArchFlag.parse(f.removesuffix("+PTX")) for f in cell.arch_flags]
    fp4 = any(f.capability >= (10, 0) for f in flags)
    out: list[str] = []
    for spec in (doc or shipped()).aot:
        if spec.fp4 and not fp4:
            continue
        if any(matches(sel, spec.smoke) for sel in cell.smokes):
            out.extend(m for m in spec.modules if m not in out)
    return tuple(out)


@dataclass(frozen=True)
class CrossInputs:
    """What a foreign cell's modules are cross-compiled with (image/assembly/crossaot.py ``inputs``), or why not (``skip``)."""

    spec: CrossSpec | None
    skip: str = ""
    compiler: str = ""  # the cross compiler's identity: its path, first --version line, the binary's sha256
    platform: str = ""  # the builder root's platform, e.g. x86_64-manylinux_2_35
    base_key: str = ""  # the builder root's base (the cell's base for the builder's architecture)
    base_layers: tuple[LayerDescriptor, ...] = ()
    wheels: Mapping[str, WheelFile] | None = None  # the builder root's wheels: the generator's imports' closure
    fmt: int = 0  # crossaot.CROSS_FORMAT: bump when the cross build's bytes for the same inputs would change

    def key_parts(self) -> list[object]:
        return [self.fmt, self.compiler, self.platform, self.base_key,
                sorted((n, w.sha256) for n, w in (self.wheels or {}).items())]


@dataclass(frozen=True)
class AotPlan:
    """The two layers of one cell, or why it gets none (``skip``)."""

    toolchain: Toolchain | None
    modules: tuple[str, ...]
    arch_list: str
    link_key: str = ""
    key: str = ""
    skip: str = ""  # why there is no AOT layer (empty when there is one)
    cross: CrossInputs | None = None  # set when the modules are cross-compiled for a foreign cell
    deferred: tuple[str, ...] = ()  # the cell's modules left to run time (not declared for cross-compiling)
    foreign: bool = False  # the cell is of another architecture than this builder

    @property
    def builds(self) -> bool:
        return not self.skip and bool(self.modules)

    @property
    def wants_cross(self) -> bool:
        """A foreign cell whose modules could be cross-compiled: plan again with ``cross``."""
        return self.foreign and self.cross is None and bool(self.modules) and bool(self.arch_list)


def plan(cell: Cell, wheel_shas: Mapping[str, str], base_key: str, *, epoch: int, level: str,
         doc: ToolchainDoc | None = None, cross: CrossInputs | None = None) -> AotPlan | None:
    """None when the cell has no CUDA toolchain; else its link layer's key and, where it can be built here, its
    AOT layer's key: the cell's Python, platform, arch list and modules, every locked wheel's sha256, its base and
    the generator's bytes (so the plain and the patched cell of one lock share it, the 12.0f and 12.1a cells not).
    A foreign cell's layer is built only with ``cross`` (image/assembly/crossaot.py ``inputs``), whose compiler, builder
    root base and builder wheels are in its key too."""
    chains, _ = for_cell(cell.smokes, cell.pins.get("cuda"), doc)
    chains = [c for c in chains if set(c.wheels.requirements) <= set(cell.requirements)]
    if not chains:
        return None
    chain = chains[0]
    machine = cell_machine(cell)
    link_key = _key("cuda-link", AOT_FORMAT, machine, chain.wheels.home, chain.wheels.cudart, LINK_LIBRARIES,
                    sha256_bytes(stub_libcuda(machine)), cell.python, epoch, level)
    modules = aot_modules(cell, doc)
    arch_list = cell.flashinfer_cuda_arch_list or ""
    if not modules:
        return AotPlan(chain, (), arch_list, link_key, skip="no smoke of the cell loads a FlashInfer module")
    if not arch_list:
        return AotPlan(chain, modules, arch_list, link_key, skip="the cell has no FLASHINFER_CUDA_ARCH_LIST")
    if machine != host_machine():
        if cross is None or cross.spec is None:
            return AotPlan(chain, modules, arch_list, link_key, foreign=True,
                           skip=f"a {machine} cell's FlashInfer generator cannot run on this {host_machine()} "
                                "builder without emulation and data/toolchains.toml declares no [[cross]] for it: "
                                "its kernels are compiled at run time")
        if cross.skip:
            return AotPlan(chain, modules, arch_list, link_key, skip=cross.skip, cross=cross, foreign=True)
        built = tuple(m for m in modules if m in cross.spec.modules)
        deferred = tuple(m for m in modules if m not in built)
        if not built:
            return AotPlan(chain, modules, arch_list, link_key, cross=cross, deferred=deferred, foreign=True,
                           skip=f"none of its modules ({', '.join(modules)}) is declared for cross-compiling "
                                f"({machine} [[cross]] in data/toolchains.toml): they are compiled at run time")
        key = _key("flashinfer-aot", AOT_FORMAT, "cross", machine, host_machine(), cell.python, arch_list, built,
                   sorted(wheel_shas.items()), base_key, sha256_bytes(builder_source()), link_key, cross.key_parts(),
                   epoch, level, sorted(compile_variables(cell).items()))
        return AotPlan(chain, built, arch_list, link_key, key, cross=cross, deferred=deferred, foreign=True)
    # the cell's variables the compile sees (NVCC_APPEND_FLAGS, the arch lists...: compile_env) are in the key
    key = _key("flashinfer-aot", AOT_FORMAT, machine, cell.python, arch_list, modules,
               sorted(wheel_shas.items()), base_key, sha256_bytes(builder_source()), link_key, epoch, level,
               sorted(compile_variables(cell).items()))
    return AotPlan(chain, modules, arch_list, link_key, key)


# -- what the compile sees, hence what its key holds ------------------------------------------------------
# The AOT layer is found by its key alone, on this machine and (build cache) on others, so the key must hold every
# input that reaches the compile. What reaches it: the scratch root (the base, the venv and EVERY locked wheel:
# any wheel's .pth file runs when the generator's Python starts, torch imports the entry points of group
# ``torch.backends`` of whatever is installed, FlashInfer imports optional packages when present: so every wheel's
# sha256 stays in the key, and a cell with one more small wheel compiles again), the generator, the modules, the
# arch list, and the environment run_generator hands it. Patch layers are not in the scratch root (they go above
# the AOT layer): a cell that differs only by a patch (h200's xformers int64) shares the layer.
# The environment is narrowed by construction, not by argument: what compile_env leaves out the compile never sees,
# so the key may leave it out too. Left out are the namespaces of programs the generator never runs or imports
# (vLLM, SGLang and NCCL read their own variables; vLLM hands FlashInfer its choices as arguments; and were some
# compiler to read such a name, it still never sees it), the cell's id (pinmatrix's own label) and the container
# runtime's variables (read by the engine's hook on the host, by no program in the image). Every other variable of
# the cell (FLASHINFER_*, TORCH_*, CUDA_*, NVCC_*, CC/CXX/CFLAGS, PATH... and names no list here foresees) is kept
# in both.
UNSEEN_PREFIXES = ("VLLM_", "SGLANG_", "NCCL_")
UNSEEN_NAMES = ("PINMATRIX_CELL", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_REQUIRE_CUDA")


def unseen_by_compile(name: str) -> bool:
    return name.startswith(UNSEEN_PREFIXES) or name in UNSEEN_NAMES


def compile_variables(cell: Cell) -> dict[str, str]:
    """The cell's own variables (arch lists, its env-flag variant) that the compile sees: the AOT key's part."""
    return {k: v for k, v in cell.variables().items() if not unseen_by_compile(k)}


def compile_env(cell: Cell) -> dict[str, str]:
    """The image's environment less what the compile must not see (UNSEEN_PREFIXES, UNSEEN_NAMES)."""
    return {k: v for k, v in cell_env(cell).items() if not unseen_by_compile(k)}


# -- the link layer ----------------------------------------------------------------------------------------


def stub_libcuda(machine: str) -> bytes:
    """A shared object with SONAME libcuda.so.1 and no code, for ``-lcuda`` at link time: written as data
    (elfstub.py), so its bytes are the same on every build host."""
    try:
        return link_stub(machine, "libcuda.so.1")
    except StubError as exc:
        raise AotError(str(exc)) from None


def link_entries(chain: Toolchain, site_packages: str, stub: bytes) -> list[tuple[str, str | bytes]]:
    """(path in the image, symlink target or file bytes) of the link layer."""
    home = chain.cuda_home(site_packages).lstrip("/")
    major = chain.wheels.cudart.rsplit(".", 1)[1]
    out: list[tuple[str, str | bytes]] = [(f"{home}/lib64", "lib")]
    out += [(f"{home}/lib/{name}", f"{name}.{major}") for name in LINK_LIBRARIES]
    out.append((f"{home}/lib/stubs/libcuda.so", stub))
    return out


def write_link_layer(writer: LayerWriter, entries: Sequence[tuple[str, str | bytes]]) -> None:
    for path, what in entries:
        if isinstance(what, bytes):
            writer.add_bytes(path, what, executable=True)
        else:
            writer.add_symlink(path, what)


# -- the AOT layer -----------------------------------------------------------------------------------------


_ENTER = """\
import json, os, subprocess, sys
root, argv, env = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
for src in ("/dev", "/proc"):
    os.makedirs(root + src, exist_ok=True)
    subprocess.run(["mount", "--rbind", src, root + src], check=True)
os.chroot(root)
os.chdir("/")
os.execve(argv[0], argv, env)
"""


def run_in_root(root: Path, argv: Sequence[str], env: Mapping[str, str], log: Path, *,
                timeout_s: float = BUILD_TIMEOUT_S) -> int:
    """``argv`` run inside ``root`` (chroot, in a private mount namespace with /dev and /proc bound), its output
    appended to ``log``; the exit status."""
    if shutil.which("unshare") is None:
        raise AotError("the FlashInfer AOT build needs util-linux's unshare (and root) to enter the cell's root")
    cmd = ["unshare", "--mount", "--propagation", "private", "--", sys.executable, "-c", _ENTER, str(root),
           json.dumps(list(argv)), json.dumps(dict(env))]
    with open(log, "a", encoding="utf-8") as handle:
        try:
            return subprocess.run(cmd, stdout=handle, stderr=subprocess.STDOUT, check=False,
                                  timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            return 124


@dataclass
class AotBuild:
    manifest: dict[str, object]
    files: list[tuple[str, Path]]  # (name in the AOT folder, built file)
    seconds: float


def build_modules(cell: Cell, aot: AotPlan, layers: RootLayers, link: Sequence[tuple[str, str | bytes]],
                  work: Path, log: Path, *, jobs: int | None = None,
                  on_step: Callable[[str], None] = lambda what: None,
                  beside: Callable[[], AbstractContextManager[object]] = nullcontext) -> AotBuild:
    """Unpack the cell's layers into ``work/root``, add the link files, run the generator there, collect.
    ``beside``: what runs while the generator compiles (nvcc leaves a core idle much of the time)."""
    start = time.monotonic()
    root = work / "root"
    on_step("aot: unpack the cell's root")
    unpack(root, layers)
    add_link_files(root, link)
    on_step(f"aot: build {' '.join(aot.modules)} for {aot.arch_list}")
    with beside():
        result = run_generator(cell, aot, root, log, jobs=jobs)
    result.seconds = time.monotonic() - start
    return result


def add_link_files(root: Path, link: Sequence[tuple[str, str | bytes]]) -> None:
    for path, what in link:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(what, bytes):
            target.write_bytes(what)
        else:
            target.unlink(missing_ok=True)
            target.symlink_to(what)


def generate(cell: Cell, aot: AotPlan, root: Path, log: Path, *, jobs: int | None = None, out_name: str = "out",
             extra_env: Mapping[str, str] | None = None, ninja_only: bool = False) -> dict[str, object]:
    """shipped/flashinfer_aot.py in ``root`` with the cell's environment as the compile sees it (compile_env; plus
    ``extra_env``); its manifest."""
    scratch = root / SCRATCH
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "flashinfer_aot.py").write_bytes(builder_source())
    env = compile_env(cell)
    env.update({"HOME": f"/{SCRATCH}/home", "FLASHINFER_WORKSPACE_BASE": f"/{SCRATCH}/ws",
                "MAX_JOBS": str(jobs or os.cpu_count() or 1), "TMPDIR": f"/{SCRATCH}"})
    env.update(extra_env or {})
    env.update(nvcc_env(env))
    argv = ["/opt/venv/bin/python", f"/{SCRATCH}/flashinfer_aot.py", *(["--ninja-only"] if ninja_only else []),
            f"/{SCRATCH}/{out_name}", *aot.modules]
    status = run_in_root(root, argv, env, log)
    if status != 0:
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-3:] or ["no output"]
        raise AotError(f"cell {cell.id} ({cell.name}): the FlashInfer AOT build of {', '.join(aot.modules)} for "
                       f"{aot.arch_list} failed (exit {status}; {log}): {' | '.join(tail)[:400]}")
    manifest: dict[str, object] = json.loads((scratch / out_name / "manifest.json").read_text())
    return manifest


def nvcc_env(env: Mapping[str, str]) -> dict[str, str]:
    """``NVCC_APPEND_FLAGS`` with NVCC_STABLE_NAMES added to what ``env`` already asks of nvcc (nvcc reads it on
    every call, so FlashInfer's ninja files need no change)."""
    flags = env.get("NVCC_APPEND_FLAGS", "").split()
    return {} if NVCC_STABLE_NAMES in flags else {"NVCC_APPEND_FLAGS": " ".join([*flags, NVCC_STABLE_NAMES])}


def module_name(cell: Cell, item: Mapping[str, object]) -> str:
    """A module's name from the generator's manifest, refused when it is not one folder name."""
    name = str(item["name"])
    if "/" in name or name.startswith(".") or not name:
        raise AotError(f"cell {cell.id}: the AOT build named a module {name!r}")
    return name


def run_generator(cell: Cell, aot: AotPlan, root: Path, log: Path, *, jobs: int | None = None,
                  out_name: str = "out") -> AotBuild:
    """shipped/flashinfer_aot.py in ``root`` with the cell's environment; the built modules, from ``out_name``."""
    start = time.monotonic()
    manifest = generate(cell, aot, root, log, jobs=jobs, out_name=out_name)
    out = root / SCRATCH / out_name
    files: list[tuple[str, Path]] = []
    for item in manifest.get("built", []):  # type: ignore[attr-defined]
        name = module_name(cell, item)
        files.append((f"{name}/{name}.so", out / name / f"{name}.so"))
    return AotBuild(manifest, files, time.monotonic() - start)


def write_aot_layer(writer: LayerWriter, site_packages: str, build: AotBuild) -> None:
    folder = f"{site_packages.strip('/')}/{AOT_FOLDER}"
    for name, path in sorted(build.files):
        with open(path, "rb") as handle:
            writer.add_file(f"{folder}/{name}", handle, path.stat().st_size, executable=True)
    manifest = layer_manifest(build.manifest)
    writer.add_bytes(f"{folder}/{MANIFEST}", (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())


def layer_manifest(manifest: Mapping[str, object]) -> dict[str, object]:
    """What of a build's manifest goes into the layer: all but how long each module took, a time no two builds of
    the same inputs share (it made the layer, hence the image digest, differ between two clean builds)."""
    kept = dict(manifest)
    built = manifest.get("built")
    if isinstance(built, list):
        kept["built"] = [{k: v for k, v in entry.items() if k != "seconds"} if isinstance(entry, dict) else entry
                         for entry in built]
    return kept


def layer_blobs(layout_blob: Callable[[str], Path], descriptors: Sequence[LayerDescriptor]) -> list[tuple[Path, str]]:
    return [(layout_blob(d.digest), d.media_type) for d in descriptors]


def read_manifest(tar: tarfile.TarFile) -> dict[str, object] | None:
    """The AOT manifest of a layer (for arch-scan and tests), when it holds one."""
    for member in tar:
        if member.name.endswith(f"{AOT_FOLDER}/{MANIFEST}") and member.isreg():
            handle = tar.extractfile(member)
            return json.loads(handle.read()) if handle else None
    return None


# -- what the assembler calls ------------------------------------------------------------------------------


def link_layer_builder(cell: Cell, aot: AotPlan, site_packages: str) -> Callable[[LayerWriter], None]:
    def build(writer: LayerWriter) -> None:
        assert aot.toolchain is not None
        write_link_layer(writer, link_entries(aot.toolchain, site_packages, stub_libcuda(cell_machine(cell))))
    return build


def aot_layer_builder(cell: Cell, aot: AotPlan, site_packages: str, layers: RootLayers,
                      cache_dir: Path, log: Path, on_step: Callable[[str], None], *,
                      beside: Callable[[], AbstractContextManager[object]] = nullcontext,
                      ) -> Callable[[LayerWriter], None]:
    def build(writer: LayerWriter) -> None:
        assert aot.toolchain is not None
        with scratch_dir(cache_dir, layers.unpacked) as tmp:
            work = Path(tmp)
            with open(log, "a", encoding="utf-8") as handle:
                handle.write(f"flashinfer-aot: the scratch root ({layers.unpacked / 1e9:.1f} GB) in {work}\n")
            link = link_entries(aot.toolchain, site_packages, stub_libcuda(cell_machine(cell)))
            try:
                result = build_modules(cell, aot, layers, link, work, log, on_step=on_step, beside=beside)
                on_step(f"aot: {len(result.files)} module(s) in {result.seconds:.0f} s")
                write_aot_layer(writer, site_packages, result)
            finally:
                remove_tree(work / "root")
    return build



