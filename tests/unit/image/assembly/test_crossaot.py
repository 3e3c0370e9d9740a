"""A foreign cell's FlashInfer AOT modules cross-compiled on this builder (pinmatrix.image.assembly.crossaot): the builder
root is the closure of the generator's imports in the cell's own lock, the key holds the cross compiler and the
builder wheels, a builder without the cross compiler says so in one line, only the declared modules are built,
and a tiny module goes through the same ninja path as FlashInfer's (paths moved under the root, the host's nvcc
wheels, Debian's aarch64 g++, the cell's own libcudart) into an aarch64 ELF with sm_121a SASS."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from helpers import nvcc_toolchain

from pinmatrix.archscan import tools
from pinmatrix.cell import Cell
from pinmatrix.image.assembly import aot_plan, crossaot
from pinmatrix.image.assembly.aot_plan import AotError, CrossInputs
from pinmatrix.image.assembly.rootfs import BaseLayers
from pinmatrix.index.wheel_index import Target, WheelFile
from pinmatrix.matrix.selection import load
from pinmatrix.project.lockfile import LockEntry
from pinmatrix.project.toolchains import shipped

REPO = Path(__file__).resolve().parents[4]
SITE = "opt/venv/lib/python3.13/site-packages"
SHAS = {"torch": "a" * 64, "flashinfer-python": "b" * 64, "nvidia-cuda-nvcc": "c" * 64}
CROSS = "aarch64-linux-gnu-g++"

pytestmark = pytest.mark.skipif(aot_plan.host_machine() != "x86_64", reason="an x86_64 builder cross-compiling")


def _gb10(flag: str = "12.1a") -> Cell:
    _, expansion = load(REPO / "matrix.toml")
    cells = [c for c in expansion.cells if c.stack == "gb10-nvfp4" and c.platform.startswith("aarch64")
             and c.flashinfer_cuda_arch_list == flag and any(r.startswith("cuda-toolkit") for r in c.requirements)]
    assert cells, "no gb10 PyPI cell"
    return cells[0]


def _wheel(name: str, sha: str) -> WheelFile:
    return WheelFile(name=name, version="1", filename=f"{name}-1-py3-none-any.whl", url="u", sha256=sha)


def _inputs(compiler: str = "/usr/bin/g++ | g++ 12.2.0 | sha256:1", torch: str = "d" * 64) -> CrossInputs:
    spec = shipped().cross[0]
    return CrossInputs(spec, compiler=compiler, platform="x86_64-manylinux_2_35", base_key="amd64-base",
                       wheels={"torch": _wheel("torch", torch), "ninja": _wheel("ninja", "e" * 64)},
                       fmt=crossaot.CROSS_FORMAT)


def test_only_the_declared_modules_are_cross_compiled_and_the_rest_is_left_to_run_time() -> None:
    cell = _gb10()
    first = aot_plan.plan(cell, SHAS, "base", epoch=1, level=1)
    assert first is not None and first.wants_cross and not first.builds
    planned = aot_plan.plan(cell, SHAS, "base", epoch=1, level=1, cross=_inputs())
    assert planned is not None and planned.builds and planned.key
    assert planned.modules == ("decode-f16-hd128", "fp4-quantize")
    assert planned.deferred == ("gemm", "fp4-gemm-cutlass")
    line = crossaot.describe(cell, planned)
    assert "\n" not in line and "cross-compiled for cell" in line and "g++ 12.2.0" in line
    assert "in the x86_64-manylinux_2_35 builder root (2 wheels" in line and "compiled at run time: gemm, fp4-gemm-cutlass" in line


def test_the_key_holds_the_cross_compiler_and_the_builder_wheels() -> None:
    cell = _gb10()
    keys = {}
    for what, cross in {"base": _inputs(), "compiler": _inputs(compiler="/usr/bin/g++ | g++ 12.3.0 | sha256:1"),
                        "binary": _inputs(compiler="/usr/bin/g++ | g++ 12.2.0 | sha256:2"),
                        "builder torch": _inputs(torch="f" * 64),
                        "builder base": dataclasses.replace(_inputs(), base_key="other"),
                        "format": dataclasses.replace(_inputs(), fmt=crossaot.CROSS_FORMAT + 1)}.items():
        planned = aot_plan.plan(cell, SHAS, "base", epoch=1, level=1, cross=cross)
        assert planned is not None and planned.builds
        keys[what] = planned.key
    assert len(set(keys.values())) == len(keys), keys
    again = aot_plan.plan(cell, SHAS, "base", epoch=1, level=1, cross=_inputs())
    assert again is not None and again.key == keys["base"]
    f120 = aot_plan.plan(_gb10("12.0f"), SHAS, "base", epoch=1, level=1, cross=_inputs())
    assert f120 is not None and f120.key != keys["base"]


def test_without_the_cross_compiler_the_cell_gets_no_layer_and_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    cell = _gb10()
    first = aot_plan.plan(cell, SHAS, "base", epoch=1, level=1)
    assert first is not None
    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if name == CROSS else real(name))

    def never(*_: object) -> object:
        raise AssertionError("nothing is fetched for a cell that cannot be cross-compiled")

    cross = crossaot.inputs(cell, first, [], never, never)  # type: ignore[arg-type]
    planned = aot_plan.plan(cell, SHAS, "base", epoch=1, level=1, cross=cross)
    assert planned is not None and not planned.builds and planned.link_key
    assert "\n" not in planned.skip
    assert f"with {CROSS}, which is not on PATH (apt-get install g++-aarch64-linux-gnu)" in planned.skip
    assert "compiled at run time" in planned.skip


def _entry(name: str, *via: str) -> LockEntry:
    return LockEntry(name=name, version="1", text=f"{name}==1 --hash=sha256:{'0' * 64}", via=via)


def test_the_builder_root_is_the_closure_of_the_generators_imports_in_the_cells_lock() -> None:
    entries = [_entry("torch", "vllm"), _entry("sympy", "torch"), _entry("mpmath", "sympy"),
               _entry("flashinfer-python", "vllm"), _entry("ninja", "flashinfer-python", "vllm"),
               _entry("vllm"), _entry("fastapi", "vllm"), _entry("nvidia-cuda-nvcc", "cuda-toolkit"),
               _entry("cuda-toolkit", "torch")]
    names = [e.name for e in crossaot.builder_entries(entries, ["torch", "flashinfer-python"])]
    assert names == ["torch", "sympy", "mpmath", "flashinfer-python", "ninja", "nvidia-cuda-nvcc", "cuda-toolkit"]

    cell = _gb10()
    first = aot_plan.plan(cell, SHAS, "base", epoch=1, level=1)
    assert first is not None
    asked: list[tuple[str, Target]] = []
    bases: list[str] = []

    def choose(entry: LockEntry, target: Target) -> WheelFile:
        asked.append((entry.name, target))
        return _wheel(entry.name, "1" * 64)

    def base_for(builder: Cell) -> BaseLayers:
        bases.append(builder.platform)
        return BaseLayers((), (), "debian", "amd64-key", "3.13")

    cross = crossaot.inputs(cell, first, entries, choose, base_for)
    assert not cross.skip and cross.platform == "x86_64-manylinux_2_35" and bases == ["x86_64-manylinux_2_35"]
    assert {n for n, _ in asked} == set(names) and {t.platform for _, t in asked} == {"x86_64-manylinux_2_35"}
    assert CROSS in cross.compiler and "sha256:" in cross.compiler and cross.base_key == "amd64-key"


def test_a_ninja_path_outside_the_builder_root_is_refused(tmp_path: Path) -> None:
    text = "cuda_home = /tmp/pinmatrix-aot/xcuda\ncommon_cflags = -isystem /usr/include/python3.13 -I/opt/venv/x\n"
    moved = crossaot.rewrite_ninja(text, tmp_path)
    assert f"cuda_home = {tmp_path}/tmp/pinmatrix-aot/xcuda" in moved
    assert f"-isystem {tmp_path}/usr/include/python3.13 -I{tmp_path}/opt/venv/x" in moved
    relative = Path(os.path.relpath(tmp_path))  # ninja -C changes folder: the moved paths are absolute
    assert f"cuda_home = {tmp_path.resolve()}/tmp/" in crossaot.rewrite_ninja(text, relative)
    with pytest.raises(AotError, match="outside the builder root: /usr/local/cuda/include"):
        crossaot.rewrite_ninja(text + "cflags = -isystem /usr/local/cuda/include\n", tmp_path)


CUDART_ENTRY_POINTS = ("__cudaRegisterFatBinary", "__cudaRegisterFatBinaryEnd", "__cudaUnregisterFatBinary",
                       "__cudaRegisterFunction", "__cudaPushCallConfiguration", "__cudaPopCallConfiguration",
                       "cudaLaunchKernel")
KERNEL = 'extern "C" __global__ void scale(float *x) { x[threadIdx.x] *= 2.0f; }\n'
# What FlashInfer 0.6.8.post1's generate_ninja_build_for_op writes (jit/cpp_ext.py), paths as seen in the root.
NINJA = """ninja_required_version = 1.3
name = tiny
cuda_home = /tmp/pinmatrix-aot/xcuda
cxx = aarch64-linux-gnu-g++
nvcc = $cuda_home/bin/nvcc

common_cflags = -isystem /usr/include/python3.13 -isystem $cuda_home/include
cuda_cflags = -ccbin aarch64-linux-gnu-g++ $common_cflags --compiler-options=-fPIC -gencode=arch=compute_121a,code=sm_121a
ldflags = -shared -L$cuda_home/lib64 -L$cuda_home/lib64/stubs -lcudart -lcuda

rule cuda_compile
  command = $nvcc --generate-dependencies-with-compile --dependency-output $out.d $cuda_cflags -c $in -o $out
  depfile = $out.d
  deps = gcc

rule link
  command = $cxx $in $ldflags -o $out

build /tmp/pinmatrix-aot/ws/tiny/csrc_tiny.cuda.o: cuda_compile /opt/venv/lib/python3.13/site-packages/flashinfer/data/csrc/tiny.cu

build /tmp/pinmatrix-aot/ws/tiny/tiny.so: link /tmp/pinmatrix-aot/ws/tiny/csrc_tiny.cuda.o
default /tmp/pinmatrix-aot/ws/tiny/tiny.so
"""


@pytest.mark.skipif(shutil.which(CROSS) is None or shutil.which("aarch64-linux-gnu-gcc") is None,
                    reason="Debian's g++-aarch64-linux-gnu (.ci/apt-packages.txt)")
def test_a_tiny_module_cross_compiles_to_an_aarch64_elf_with_sm_121a(tmp_path: Path) -> None:
    nvcc = nvcc_toolchain(tools.cache_dir())
    cuobjdump = tools.cuobjdump(tools.cache_dir())
    assert cuobjdump
    root = tmp_path / "root"
    wheels_home = root / SITE / "nvidia" / "cu13"
    wheels_home.mkdir(parents=True)
    for part in ("bin", "include", "nvvm"):  # the builder root's nvcc wheels (here: the tool cache's)
        (wheels_home / part).symlink_to(nvcc.root / part)
    (root / "usr/include/python3.13").mkdir(parents=True)
    source = root / SITE / "flashinfer/data/csrc/tiny.cu"
    source.parent.mkdir(parents=True)
    source.write_text(KERNEL)
    # The cell's own (aarch64) libcudart.so.13, in a wheel as the cell's nvidia-cuda-runtime holds it.
    # It defines the runtime entry points nvcc's registration code calls, so the link keeps it (--as-needed).
    (tmp_path / "cudart.c").write_text("".join(f"void {name}(void) {{}}\n" for name in CUDART_ENTRY_POINTS))
    subprocess.run(["aarch64-linux-gnu-gcc", "-shared", "-fPIC", "-Wl,-soname,libcudart.so.13", "-o",
                    str(tmp_path / "libcudart.so.13"), str(tmp_path / "cudart.c")], check=True)
    wheel = tmp_path / "nvidia_cuda_runtime-13.0.96-py3-none-manylinux_2_17_aarch64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(tmp_path / "libcudart.so.13", "nvidia/cu13/lib/libcudart.so.13")
    cell = _gb10()
    planned = aot_plan.plan(cell, SHAS, "base", epoch=1, level=1, cross=_inputs())
    assert planned is not None and planned.toolchain is not None
    stub = aot_plan.stub_libcuda("aarch64")
    home = crossaot.make_cross_home(root, "/" + SITE, planned.toolchain, [wheel], stub)
    assert home == "/tmp/pinmatrix-aot/xcuda" and (root / home.lstrip("/") / "lib64/libcudart.so").is_symlink()
    ninja = root / "tmp/pinmatrix-aot/ws/tiny/build.ninja"
    ninja.parent.mkdir(parents=True)
    ninja.write_text(NINJA)
    manifest = {"arch_list": "12.1a", "built": [{"module": "decode-f16-hd128", "name": "tiny",
                                                 "gencode": ["-gencode=arch=compute_121a,code=sm_121a"],
                                                 "ninja": "/tmp/pinmatrix-aot/ws/tiny/build.ninja",
                                                 "so": "/tmp/pinmatrix-aot/ws/tiny/tiny.so"}]}
    log = tmp_path / "build.log"
    final, files = crossaot.build_modules(cell, planned, manifest, root, "/" + SITE, tmp_path / "out", log, jobs=2)
    assert [name for name, _ in files] == ["tiny/tiny.so"], log.read_text()[-2000:]
    so = files[0][1]
    assert crossaot.elf_machine(so) == 183  # EM_AARCH64
    dynamic = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True, check=True).stdout
    assert "Shared library: [libcudart.so.13]" in dynamic  # the cell's own libcudart, found in the cross lib64
    sass = subprocess.run([cuobjdump, "-res-usage", str(so)], capture_output=True, text=True, check=True).stdout
    assert "arch = sm_121a" in sass
    built = final["built"][0]  # type: ignore[index]
    assert "ninja" not in built and built["bytes"] == so.stat().st_size and "nice -n 10" in log.read_text()


def test_ninja_is_the_builder_roots_pinned_elf_else_the_hosts(tmp_path: Path) -> None:
    host = shutil.which("ninja")
    assert host, "ninja-build (.ci/apt-packages.txt)"
    venv_bin = tmp_path / "opt/venv/bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "ninja").write_text("#!/opt/venv/bin/python\nimport ninja\n")  # an entry-point script: not run here
    assert crossaot.ninja_program(tmp_path, "/" + SITE) == host
    shutil.copyfile(Path(host).resolve(), venv_bin / "ninja")
    assert crossaot.ninja_program(tmp_path, "/" + SITE) == str(venv_bin / "ninja")
