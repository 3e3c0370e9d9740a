"""FlashInfer's modules compiled ahead of time into a layer of their own (pinmatrix.image.assembly.aot_plan): which
modules a cell gets, the keys that let cells share the layers, the link files the CUDA wheels lack, where the
modules land in the image, and the chroot the generator runs in. The compile itself (minutes per module, a
cell's whole torch stack) is a benchmark session: results/arch-scan/."""

from __future__ import annotations

import ast
import dataclasses
import os
import shutil
import subprocess
import tarfile
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from pinmatrix.cell import Cell
from pinmatrix.image.assembly import aot_plan
from pinmatrix.matrix.selection import load
from pinmatrix.oci.layer import LayerWriter
from pinmatrix.oci.scratch_unpack import RootLayers
from pinmatrix.project.toolchains import shipped

REPO = Path(__file__).resolve().parents[4]
SITE = "opt/venv/lib/python3.13/site-packages"


def _h200() -> list[Cell]:
    _, expansion = load(REPO / "matrix.toml")
    cells = [c for c in expansion.cells if c.stack == "h200"]
    assert len(cells) == 2
    return cells


def _with_arch(cell: Cell, flag: str) -> Cell:
    return dataclasses.replace(cell, arch_flags=(flag,), flashinfer_cuda_arch_list=flag, torch_cuda_arch_list=flag)


SHAS = {"torch": "a" * 64, "flashinfer-python": "b" * 64, "nvidia-cuda-nvcc": "c" * 64}


def test_the_modules_are_the_smokes_and_fp4_only_with_a_native_fp4_target() -> None:
    plain, _ = _h200()
    assert aot_plan.aot_modules(plain) == ("decode-f16-hd128", "gemm")  # 9.0a: the FP4 smokes skip there
    for flag in ("12.1a", "12.0f", "10.0a"):
        assert aot_plan.aot_modules(_with_arch(plain, flag)) == ("decode-f16-hd128", "gemm", "fp4-quantize",
                                                                   "fp4-gemm-cutlass")
    only_decode = dataclasses.replace(plain, smokes=("host-probe", "flashinfer-decode"))
    assert aot_plan.aot_modules(only_decode) == ("decode-f16-hd128",)


def test_cells_of_one_lock_share_the_layers_and_the_arch_list_keys_them() -> None:
    plain, int64 = _h200()
    a = aot_plan.plan(plain, SHAS, "base", epoch=1, level=1)
    b = aot_plan.plan(int64, SHAS, "base", epoch=1, level=1)
    assert a is not None and b is not None and a.builds and a.key == b.key and a.link_key == b.link_key
    f120 = aot_plan.plan(_with_arch(plain, "12.0f"), SHAS, "base", epoch=1, level=1)
    a121 = aot_plan.plan(_with_arch(plain, "12.1a"), SHAS, "base", epoch=1, level=1)
    assert f120 is not None and a121 is not None
    assert len({a.key, f120.key, a121.key}) == 3 and f120.link_key == a121.link_key == a.link_key
    other_wheel = aot_plan.plan(plain, {**SHAS, "torch": "d" * 64}, "base", epoch=1, level=1)
    assert other_wheel is not None and other_wheel.key != a.key


def test_no_toolchain_no_layers_and_a_foreign_cell_says_why() -> None:
    plain, _ = _h200()
    bare = dataclasses.replace(plain, requirements=tuple(r for r in plain.requirements if not r.startswith("cuda-toolkit")))
    assert aot_plan.plan(bare, SHAS, "base", epoch=1, level=1) is None
    machine = "x86_64" if aot_plan.host_machine() == "aarch64" else "aarch64"
    arm = dataclasses.replace(_with_arch(plain, "12.1a"), platform=f"{machine}-manylinux_2_35")
    planned = aot_plan.plan(arm, SHAS, "base", epoch=1, level=1)
    assert planned is not None and not planned.builds and planned.link_key
    assert f"a {machine} cell's FlashInfer generator cannot run" in planned.skip and "without emulation" in planned.skip


def test_the_generator_knows_every_module_the_data_names() -> None:
    tree = ast.parse(aot_plan.builder_source().decode())
    table = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "MODULES")
    assert isinstance(table.value, ast.Dict)
    known = {k.value for k in table.value.keys if isinstance(k, ast.Constant)}
    named = {m for spec in shipped().aot for m in spec.modules}
    assert named and named <= known


def test_the_link_layer_holds_what_the_wheels_lack_for_linking(tmp_path: Path) -> None:
    plain, _ = _h200()
    planned = aot_plan.plan(plain, SHAS, "base", epoch=1, level=1)
    assert planned is not None and planned.toolchain is not None
    stub = aot_plan.stub_libcuda(aot_plan.host_machine())
    (tmp_path / "libcuda.so").write_bytes(stub)
    dynamic = subprocess.run(["readelf", "-d", str(tmp_path / "libcuda.so")], capture_output=True, text=True,
                             check=True).stdout
    assert "Library soname: [libcuda.so.1]" in dynamic and "NEEDED" not in dynamic
    entries = dict(aot_plan.link_entries(planned.toolchain, "/" + SITE, stub))
    home = f"{SITE}/nvidia/cu13"
    assert entries[f"{home}/lib64"] == "lib"
    assert entries[f"{home}/lib/libcudart.so"] == "libcudart.so.13"
    assert entries[f"{home}/lib/libcublasLt.so"] == "libcublasLt.so.13"
    assert entries[f"{home}/lib/stubs/libcuda.so"] == stub
    writer = LayerWriter(tmp_path / "blobs", epoch=0)
    aot_plan.write_link_layer(writer, list(entries.items()))
    desc = writer.close()
    with tarfile.open(tmp_path / "blobs" / desc.digest.split(":")[1], "r:gz") as tar:
        links = {m.name: m.linkname for m in tar if m.issym()}
    assert links[f"{home}/lib64"] == "lib" and links[f"{home}/lib/libcublas.so"] == "libcublas.so.13"


def test_built_modules_land_in_flashinfers_aot_folder(tmp_path: Path) -> None:
    so = tmp_path / "gemm.so"
    so.write_bytes(b"\x7fELF module")
    build = aot_plan.AotBuild({"arch_list": "12.1a", "built": [{"name": "gemm"}]}, [("gemm/gemm.so", so)], 1.0)
    writer = LayerWriter(tmp_path / "blobs", epoch=0)
    aot_plan.write_aot_layer(writer, "/" + SITE, build)
    desc = writer.close()
    with tarfile.open(tmp_path / "blobs" / desc.digest.split(":")[1], "r:gz") as tar:
        files = {m.name: m for m in tar if m.isreg()}
        assert aot_plan.read_manifest(tarfile.open(tmp_path / "blobs" / desc.digest.split(":")[1], "r:gz")) == build.manifest
    assert set(files) == {f"{SITE}/flashinfer/data/aot/gemm/gemm.so", f"{SITE}/flashinfer/data/aot/pinmatrix-aot.json"}
    assert files[f"{SITE}/flashinfer/data/aot/gemm/gemm.so"].mode & 0o111


def test_two_builds_that_took_different_times_make_the_same_layer(tmp_path: Path) -> None:
    so = tmp_path / "gemm.so"
    so.write_bytes(b"\x7fELF module")
    digests = []
    for seconds in (12.3, 45.6):
        manifest = {"arch_list": "9.0a", "built": [{"name": "gemm", "bytes": 11, "seconds": seconds}]}
        writer = LayerWriter(tmp_path / f"blobs-{seconds}", epoch=0)
        aot_plan.write_aot_layer(writer, "/" + SITE, aot_plan.AotBuild(manifest, [("gemm/gemm.so", so)], seconds))
        desc = writer.close()
        digests.append(desc.digest)
        with tarfile.open(tmp_path / f"blobs-{seconds}" / desc.digest.split(":")[1], "r:gz") as tar:
            assert aot_plan.read_manifest(tar) == {"arch_list": "9.0a", "built": [{"name": "gemm", "bytes": 11}]}
    assert digests[0] == digests[1]


def test_nvcc_is_asked_for_stable_intermediate_names_keeping_the_cells_own_flags() -> None:
    assert aot_plan.nvcc_env({}) == {"NVCC_APPEND_FLAGS": "--objdir-as-tempdir"}
    assert aot_plan.nvcc_env({"NVCC_APPEND_FLAGS": "-lineinfo"}) == {"NVCC_APPEND_FLAGS": "-lineinfo --objdir-as-tempdir"}
    assert aot_plan.nvcc_env({"NVCC_APPEND_FLAGS": "--objdir-as-tempdir -g"}) == {}


def test_the_generator_runs_with_nvccs_stable_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, str] = {}

    def run(root: Path, argv: list[str], env: dict[str, str], log: Path) -> int:
        seen.update(env)
        out = root / aot_plan.SCRATCH / "out"
        out.mkdir(parents=True)
        (out / "manifest.json").write_text('{"built": []}')
        return 0

    monkeypatch.setattr(aot_plan, "run_in_root", run)
    cell = types.SimpleNamespace(id="c", name="c", env={}, python="3.13")
    monkeypatch.setattr(aot_plan, "cell_env", lambda c: {"PATH": "/usr/bin"})
    aot = types.SimpleNamespace(modules=("gemm",), arch_list="9.0a")
    assert aot_plan.generate(cell, aot, tmp_path, tmp_path / "log") == {"built": []}  # type: ignore[arg-type]
    assert seen["NVCC_APPEND_FLAGS"] == "--objdir-as-tempdir"


def test_what_runs_beside_the_build_starts_after_the_unpack_and_ends_with_the_generator(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from contextlib import contextmanager

    order: list[str] = []
    monkeypatch.setattr(aot_plan, "unpack", lambda root, layers: order.append("unpack"))

    def run_generator(cell: object, aot: object, root: Path, log: Path, *, jobs: int | None = None) -> aot_plan.AotBuild:
        order.append("generator")
        return aot_plan.AotBuild({}, [], 0.0)

    @contextmanager
    def beside() -> Iterator[None]:
        order.append("beside starts")
        yield
        order.append("beside ends")

    monkeypatch.setattr(aot_plan, "run_generator", run_generator)
    aot = types.SimpleNamespace(modules=("gemm",), arch_list="9.0a")
    built = aot_plan.build_modules(types.SimpleNamespace(id="c"), aot, RootLayers([]), [], tmp_path, tmp_path / "log",  # type: ignore[arg-type]
                                   beside=beside)
    assert order == ["unpack", "beside starts", "generator", "beside ends"] and built.seconds >= 0
    order.clear()
    aot_plan.build_modules(types.SimpleNamespace(id="c"), aot, RootLayers([]), [], tmp_path, tmp_path / "log")  # type: ignore[arg-type]
    assert order == ["unpack", "generator"]  # nothing beside it by default


def _tiny_root(root: Path) -> None:
    """cat and the libraries it loads, copied from the host: enough to prove the chroot and /proc inside it."""
    cat = Path(shutil.which("cat") or "/bin/cat").resolve()
    needed = [cat]
    out = subprocess.run(["ldd", str(cat)], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        path = next((p for p in parts if p.startswith("/")), None)
        if path:
            needed.append(Path(path))
    for path in needed:
        target = root / str(path).lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path.resolve(), target)
    (root / "bin").mkdir(exist_ok=True)
    if not (root / "bin" / "cat").exists():
        shutil.copy2(cat, root / "bin" / "cat")


@pytest.mark.skipif(os.geteuid() != 0, reason="chroot and mount namespaces need root (the image build runs as root)")
def test_the_generator_runs_in_the_cells_root_with_proc_and_the_cell_env(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _tiny_root(root)
    (root / "marker").write_text("inside the root\n")
    log = tmp_path / "log"
    status = aot_plan.run_in_root(root, ["/bin/cat", "/marker", "/proc/self/status"], {"PATH": "/bin"}, log)
    text = log.read_text()
    assert status == 0, text
    assert "inside the root" in text and "Name:\tcat" in text
    assert not (root / "proc" / "self").exists()  # the bind mount lived in the namespace only
    assert aot_plan.run_in_root(root, ["/bin/cat", "/absent"], {"PATH": "/bin"}, log) != 0


def test_the_arch_coverage_smoke_reads_the_aot_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """arch-coverage lists the image's AOT modules as cell-built binaries (they must carry the flag's target)."""
    import importlib.util
    import sys

    site = tmp_path / "site"
    dist = site / "flashinfer_python-0.6.8.post1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.6.8.post1\n")
    (dist / "RECORD").write_text("flashinfer/__init__.py,,\n")
    module = site / "flashinfer" / "data" / "aot" / "gemm" / "gemm.so"
    module.parent.mkdir(parents=True)
    module.write_bytes(b"\x7fELF")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(REPO / "src" / "pinmatrix" / "shipped"))
    monkeypatch.delenv("PINMATRIX_ARCH_BINARIES", raising=False)
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path / "no-cache"))
    spec = importlib.util.spec_from_file_location("pinmatrix_test_host_smoke", REPO / "smoke" / "host.py")
    assert spec and spec.loader
    host = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "pinmatrix_test_host_smoke", host)
    spec.loader.exec_module(host)
    found = dict(host._cuda_binaries())
    assert found["flashinfer-aot:gemm/gemm.so"] == module
    assert "flashinfer-aot" in host.CELL_BUILT
