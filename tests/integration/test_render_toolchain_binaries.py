"""The arch scan's Markdown over real binaries compiled by nvcc and read with cuobjdump (the CUDA tool wheels from the package index): a bare family cubin, a binary only for other GPUs, the 120f issue read from the stack's own FP4 groups, rows folded per folder and target, the image's AOT layer as a row of its own."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from archscan_render_wheels import wheel_of
from helpers import nvcc_toolchain

from conftest import make_cell
from pinmatrix.archscan import tools
from pinmatrix.archscan import verdict as V
from pinmatrix.archscan.binary import cuobjdump_cubin_target, read_binary
from pinmatrix.archscan.layers import aot_layer
from pinmatrix.archscan.render import fold_rows, render_scan_markdown
from pinmatrix.archscan.scan import scan_cell, scan_document
from pinmatrix.cell import KnownIssue
from pinmatrix.oci.layer import LayerWriter
from pinmatrix.oci.layout import MEDIA_TYPE_CONFIG, MEDIA_TYPE_MANIFEST, OCILayout, canonical_json

KERNEL = 'extern "C" __global__ void scale(float *x) { x[threadIdx.x] *= 2.0f; }\n'


# name -> nvcc arguments (before -o)
BUILDS: dict[str, list[str]] = {
    "cubin_sm_100f": ["-cubin", "-arch", "sm_100f"],
    "cubin_sm_100a": ["-cubin", "-arch", "sm_100a"],
    "cubin_sm_100": ["-cubin", "-arch", "sm_100"],
    "lib_sm_90a": ["-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_90a,code=sm_90a"],
    # vLLM 0.20.0's FP4 / block-scaled kernels: one compiled unit for the 10.x and 12.x families
    "lib_fp4_family": ["-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_100f,code=sm_100f",
                       "-gencode", "arch=compute_120f,code=sm_120f"],
    "lib_sm_121a": ["-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_121a,code=sm_121a"],
    "lib_sm_120": ["-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_120,code=sm_120"],
}


@pytest.fixture(scope="session")
def cuobjdump_exe() -> str:
    exe = tools.cuobjdump(tools.cache_dir())
    assert exe and Path(exe).is_file()
    return exe


@pytest.fixture(scope="session")
def bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    toolchain = nvcc_toolchain(tools.cache_dir())
    out = tmp_path_factory.mktemp("summary-bins")
    source = out / "scale.cu"
    source.write_text(KERNEL)

    def build(name: str) -> tuple[str, Path]:
        path = out / (f"{name}.cubin" if name.startswith("cubin") else f"{name}.so")
        toolchain.compile(source, path, BUILDS[name])
        return name, path

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(build, BUILDS))


def test_a_bare_family_cubin_keeps_its_f(bins: dict[str, Path], cuobjdump_exe: str) -> None:
    """cuobjdump's ELF header line (and e_flags) read an sm_100f cubin as sm_100; its ptxas note does not."""
    assert cuobjdump_cubin_target(bins["cubin_sm_100f"], cuobjdump_exe) == "sm_100"
    for name, target in (("cubin_sm_100f", "sm_100f"), ("cubin_sm_100a", "sm_100a"), ("cubin_sm_100", "sm_100")):
        for exe in (cuobjdump_exe, None):
            found = read_binary(bins[name], exe)
            assert found is not None and found.groups == [(target,)] and found.exact, (name, exe, found)
    on_103 = V.binary_verdict(read_binary(bins["cubin_sm_100f"], cuobjdump_exe), (10, 3))  # type: ignore[arg-type]
    assert on_103.verdict == V.NATIVE  # family code runs on 10.3; an sm_100 read would say the same, sm_100a not
    assert V.binary_verdict(read_binary(bins["cubin_sm_100a"], cuobjdump_exe), (10, 3)).verdict == V.CANNOT  # type: ignore[arg-type]


def test_a_binary_only_for_other_gpus_is_its_own_verdict_left_out_of_the_package(
        bins: dict[str, Path], cuobjdump_exe: str) -> None:
    other = V.binary_verdict(read_binary(bins["lib_sm_90a"], cuobjdump_exe), (12, 1))  # type: ignore[arg-type]
    native = V.binary_verdict(read_binary(bins["lib_sm_121a"], cuobjdump_exe), (12, 1))  # type: ignore[arg-type]
    cubins = [V.binary_verdict(read_binary(bins[n], cuobjdump_exe), (12, 1)) for n in ("cubin_sm_100f", "cubin_sm_100a")]  # type: ignore[arg-type]
    assert other.verdict == V.OTHER and other.summary.startswith("other-gpus: ") and "only for other GPUs" in other.summary
    assert [c.verdict for c in cubins] == [V.OTHER, V.OTHER]  # flashinfer-cubin's shape: nothing for sm_12x
    assert V.package_verdict([other, native]) == V.NATIVE
    assert V.package_verdict(cubins) == V.OTHER
    sibling = V.binary_verdict(read_binary(bins["lib_sm_121a"], cuobjdump_exe), (12, 0))  # type: ignore[arg-type]
    assert sibling.verdict == V.CANNOT and V.package_verdict([sibling, other]) == V.CANNOT


def _gb10_cell(project: Path, wheels: list[Path], *, arch: str, filed: bool):  # noqa: ANN202
    issue = KnownIssue(id="nvfp4-built-for-120f-on-sm121", smokes=("flashinfer-nvfp4-vs-fp8",), expect="degraded",
                       failure_class="unsupported-tactics", note="")
    names = [w.name.split("-", 1)[0] for w in wheels]
    base = make_cell("gb10", tuple(f"{n}==1.0" for n in names), python="3.12", arch_flags=(arch,),
                     pins={"gpu": "sm_121", "arch": arch, **{n: "1.0" for n in names}})
    cell = dataclasses.replace(base, platform="aarch64-manylinux_2_28", known_issues=(issue,) if filed else ())
    (project / "locks").mkdir(parents=True, exist_ok=True)
    lines = "".join(f"{n}==1.0 --hash=sha256:{hashlib.sha256(w.read_bytes()).hexdigest()}\n" for n, w in zip(names, wheels))
    (project / "locks" / f"{cell.id}.txt").write_text(lines)
    return cell


def test_the_120f_issue_is_read_from_the_stacks_own_fp4_groups_not_torchs(
        bins: dict[str, Path], cuobjdump_exe: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = tmp_path / "index"
    index.mkdir()
    vllm = wheel_of(index, "vllm", {"vllm/_C.abi3.so": bins["lib_fp4_family"].read_bytes(),
                                  "vllm/_moe_C.abi3.so": bins["lib_sm_90a"].read_bytes()})
    torch = wheel_of(index, "torch", {"torch/lib/libtorch_cuda.so": bins["lib_sm_121a"].read_bytes(),
                                    "torch/lib/libc10_cuda.so": bins["lib_sm_120"].read_bytes()})
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    project = tmp_path / "project"

    def scan(arch: str, filed: bool):  # noqa: ANN202
        cell = _gb10_cell(project, [torch, vllm], arch=arch, filed=filed)
        return scan_cell(cell, project, None, tool=cuobjdump_exe, tool_label="cuobjdump test", cache=tmp_path / "c")

    f120 = scan("12.0f", filed=True)
    (ki,) = f120.known_issues
    assert ki["status"] == "confirmed" and ki["packages"] == ["vllm"]  # torch is read, but not the stack's own
    (line,) = ki["evidence"]
    groups = len(read_binary(bins["lib_fp4_family"], cuobjdump_exe).groups)  # type: ignore[union-attr]
    assert line == f"vllm: vllm/_C.abi3.so: {groups}/{groups} kernel group(s) hold sm_120f and no sm_121a"
    assert "torch" not in " ".join(ki["evidence"] + ki["carriers"])  # its sm_121a FP8 unit does not answer it
    assert "no own package carries sm_121a" in ki["message"]
    vllm_pkg = f120.package("vllm")
    assert vllm_pkg is not None and vllm_pkg.verdict == V.NATIVE  # _moe_C (sm_90a only) is left out of it
    assert {b.path: b.verdict for b in vllm_pkg.binaries} == {"vllm/_C.abi3.so": V.NATIVE, "vllm/_moe_C.abi3.so": V.OTHER}
    (check,) = f120.arch_flag_checks
    assert check["ok"] and check["packages"] == ["vllm"] and "honoured by vllm" in check["message"]

    a121 = scan("12.1a", filed=False)
    (ki,) = a121.known_issues
    assert ki["status"] == "flagged" and "vllm/_C.abi3.so" in ki["evidence"][0]
    (check,) = a121.arch_flag_checks
    assert not check["ok"] and check["honoured_by"] == []
    assert check["prebuilt"] == ["torch: torch/lib/libtorch_cuda.so"]
    assert "no package of the stack honours 12.1a" in check["message"] and "prebuilt torch" in check["message"]

    md = render_scan_markdown(scan_document([f120, a121], "cuobjdump test", "pinmatrix arch-scan"))
    assert "🔵" in md and "1/2 binaries only for other GPUs" in md and "**flagged**" in md


def test_rows_fold_per_folder_and_target(bins: dict[str, Path], cuobjdump_exe: str) -> None:
    f = read_binary(bins["cubin_sm_100f"], cuobjdump_exe)
    a = read_binary(bins["cubin_sm_100a"], cuobjdump_exe)
    assert f is not None and a is not None
    rows = []
    for i in range(40):
        for found, folder in ((f, "cubins/fmha"), (a, "cubins/fmha"), (f, "cubins/gemm")):
            b = dataclasses.replace(found, path=f"{folder}/k{i}.cubin")
            rows.append(V.binary_verdict(b, (12, 1)).to_dict())
    lib = V.binary_verdict(read_binary(bins["lib_fp4_family"], cuobjdump_exe), (12, 1)).to_dict()  # type: ignore[arg-type]
    lib["path"] = "cubins/fmha/libx.so"
    folded = fold_rows([*rows, lib])
    labels = [label for label, _ in folded]
    assert labels == ["`cubins/fmha/` (40 files)", "`cubins/fmha/` (40 files)", "`cubins/gemm/` (40 files)",
                      "`cubins/fmha/libx.so`"]
    assert [b["sass"] for _, b in folded[:3]] == [["sm_100f"], ["sm_100a"], ["sm_100f"]]


def _image_with_aot_layer(layout_dir: Path, cell_id: str, so: bytes) -> str:
    layout = OCILayout(layout_dir).init()
    writer = LayerWriter(layout.blobs, epoch=0)
    folder = "opt/venv/lib/python3.12/site-packages/flashinfer/data/aot"
    writer.add_bytes(f"{folder}/fp4_gemm_cutlass_sm120/fp4_gemm_cutlass_sm120.so", so)
    writer.add_bytes(f"{folder}/pinmatrix-aot.json", json.dumps(
        {"flashinfer": "0.6.8.post1", "arch_list": "12.1a",
         "built": [{"name": "fp4_gemm_cutlass_sm120", "gencode": ["-gencode=arch=compute_121a,code=sm_121a"]}]}).encode())
    aot = writer.close()
    other = LayerWriter(layout.blobs, epoch=0)
    other.add_bytes("etc/x", b"x")
    base = other.close()
    config = canonical_json({"architecture": "arm64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [
        base.diff_id, aot.diff_id]}, "history": [{"created_by": "pinmatrix: base"},
                                                 {"created_by": "pinmatrix: flashinfer-aot"}]})
    config_digest = layout.put_blob(config)
    manifest = {"schemaVersion": 2, "mediaType": MEDIA_TYPE_MANIFEST,
                "config": {"mediaType": MEDIA_TYPE_CONFIG, "digest": config_digest, "size": len(config)},
                "layers": [base.as_oci(), aot.as_oci()]}
    layout.put_image(f"t/gb10:{cell_id}", manifest, {"io.pinmatrix.cell.id": cell_id})
    return aot.digest


def test_the_images_aot_layer_is_read_as_a_row_of_its_own(bins: dict[str, Path], cuobjdump_exe: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    index = tmp_path / "index"
    index.mkdir()
    vllm = wheel_of(index, "vllm", {"vllm/_C.abi3.so": bins["lib_fp4_family"].read_bytes()})
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    project = tmp_path / "project"
    cell = _gb10_cell(project, [vllm], arch="12.1a", filed=False)
    digest = _image_with_aot_layer(tmp_path / "oci", cell.id, bins["lib_sm_121a"].read_bytes())
    assert aot_layer(tmp_path / "oci", cell.id)[1] == digest  # type: ignore[index]
    assert aot_layer(tmp_path / "oci", "000000000000") is None
    scan = scan_cell(cell, project, None, tool=cuobjdump_exe, tool_label="cuobjdump test", cache=tmp_path / "c",
                     layout=tmp_path / "oci")
    row = scan.package("flashinfer-aot")
    assert row is not None and row.wheel == f"layer {digest}" and row.verdict == V.NATIVE
    assert [b.sass for b in row.binaries] == [["sm_121a"]]
    assert "FLASHINFER_CUDA_ARCH_LIST='12.1a'" in row.notes[0] and "fp4_gemm_cutlass_sm120 (sm_121a)" in row.notes[0]
    (check,) = scan.arch_flag_checks
    assert check["ok"] and check["packages"] == ["flashinfer-aot"]
    (ki,) = scan.known_issues  # vLLM's own FP4 unit is still family code: flagged, with the AOT layer's sm_121a beside it
    n = row.binaries[0].groups
    assert ki["status"] == "flagged" and ki["carriers"] == [
        f"flashinfer-aot: fp4_gemm_cutlass_sm120/fp4_gemm_cutlass_sm120.so: {n} kernel group(s) carry sm_121a"]
    assert io.StringIO(render_scan_markdown(scan_document([scan], "t", "c"))).read().count("flashinfer-aot") >= 2
