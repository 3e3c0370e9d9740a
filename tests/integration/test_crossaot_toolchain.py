"""A tiny module cross-compiled to an aarch64 ELF with sm_121a, by nvcc and read by cuobjdump (the CUDA tool wheels from the package index)."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from crossaot_cells import CROSS, SHAS, SITE, cross_inputs, gb10_cell
from helpers import nvcc_toolchain

from pinmatrix.archscan import tools
from pinmatrix.image.assembly import aot_plan, crossaot

pytestmark = pytest.mark.skipif(aot_plan.host_machine() != "x86_64", reason="an x86_64 builder cross-compiling")


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
    cell = gb10_cell()
    planned = aot_plan.plan(cell, SHAS, "base", epoch=1, level=1, cross=cross_inputs())
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
