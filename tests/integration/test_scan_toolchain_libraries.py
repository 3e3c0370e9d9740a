"""Arch scans of real CUDA libraries: a kernel compiled for each target by nvcc, read with cuobjdump (both installed from the package index's CUDA tool wheels into the tool cache): exact targets, verdicts on sm_90, sm_120 and sm_121, the fallback without cuobjdump, arch flags, a wheel's device code, a cell's scan end to end, the smoke's analysis."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import fatbin_containers, nvcc_toolchain

from conftest import make_cell
from pinmatrix.archflag import ArchFlag
from pinmatrix.archscan import tools
from pinmatrix.archscan import verdict as V
from pinmatrix.archscan.binary import read_binary
from pinmatrix.archscan.render import render_scan_markdown
from pinmatrix.archscan.scan import scan_cell, scan_document
from pinmatrix.archscan.wheels import scan_wheel
from pinmatrix.cell import KnownIssue

ROOT = Path(__file__).resolve().parents[2]

KERNEL = 'extern "C" __global__ void scale(float *x) { x[threadIdx.x] *= 2.0f; }\n'


# name -> nvcc -gencode value
TARGETS: dict[str, str] = {
    "sm_90": "arch=compute_90,code=sm_90",
    "sm_90a": "arch=compute_90a,code=sm_90a",
    "sm_120a": "arch=compute_120a,code=sm_120a",
    "sm_121a": "arch=compute_121a,code=sm_121a",
    "sm_120f": "arch=compute_120f,code=sm_120f",
    "ptx_90": "arch=compute_90,code=compute_90",
}


# (exact SASS, exact PTX, fallback SASS) per library
READ: dict[str, tuple[list[str], list[str], list[str]]] = {
    "sm_90": (["sm_90"], [], ["sm_90"]),
    "sm_90a": (["sm_90a"], [], ["sm_90"]),
    "sm_120a": (["sm_120a"], [], ["sm_120"]),
    "sm_121a": (["sm_121a"], [], ["sm_121"]),
    "sm_120f": (["sm_120f"], [], ["sm_120"]),
    "ptx_90": ([], ["compute_90"], []),
}


# verdict on (sm_90, sm_120, sm_121)
# (a library built only for another major is OTHER, "only for other GPUs"; a sibling minor's 'a' code CANNOT)
EXPECTED: dict[str, tuple[str, str, str]] = {
    "sm_90": (V.NATIVE, V.OTHER, V.OTHER),
    "sm_90a": (V.NATIVE, V.OTHER, V.OTHER),
    "sm_120a": (V.OTHER, V.NATIVE, V.CANNOT),
    "sm_121a": (V.OTHER, V.CANNOT, V.NATIVE),
    "sm_120f": (V.OTHER, V.NATIVE, V.NATIVE),
    "ptx_90": (V.JIT, V.JIT, V.JIT),
}


GPUS = ((9, 0), (12, 0), (12, 1))


@pytest.fixture(scope="session")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tool cache: $PINMATRIX_CACHE or ~/.cache/pinmatrix, so the big toolchain wheels install once."""
    return tools.cache_dir()


@pytest.fixture(scope="session")
def cuobjdump_exe(cache: Path) -> str:
    exe = tools.cuobjdump(cache)
    assert exe and Path(exe).is_file()
    return exe


@pytest.fixture(scope="session")
def libs(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One shared library per target, compiled once per session (two at a time)."""
    toolchain = nvcc_toolchain(cache)
    out = tmp_path_factory.mktemp("cuda-libs")
    source = out / "scale.cu"
    source.write_text(KERNEL)

    def build(name: str) -> tuple[str, Path]:
        lib = out / f"lib{name}.so"
        toolchain.compile(source, lib, ["-shared", "-Xcompiler", "-fPIC", "-gencode", TARGETS[name]])
        return name, lib

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(build, TARGETS))


@pytest.mark.parametrize("name", list(TARGETS))
def test_exact_targets_with_cuobjdump_and_numbers_only_without(libs: dict[str, Path], cuobjdump_exe: str,
                                                               name: str) -> None:
    sass, ptx, fallback_sass = READ[name]
    exact = read_binary(libs[name], cuobjdump_exe)
    assert exact is not None and exact.exact and exact.tool == "cuobjdump" and exact.grouped
    assert (exact.sass, exact.ptx) == (sass, ptx)
    header = read_binary(libs[name], None)
    assert header is not None and not header.exact and header.tool == "fatbin-header"
    assert header.sass == fallback_sass
    assert any("cannot see the 'a' / 'f' suffixes" in n for n in header.notes)
    # the containers the parser finds are the groups cuobjdump's entries were matched to
    assert [len(g) for g in exact.groups] == [len(c) for c in fatbin_containers(libs[name].read_bytes())]


@pytest.mark.parametrize("name", list(TARGETS))
def test_verdict_for_sm90_sm120_sm121(libs: dict[str, Path], cuobjdump_exe: str, name: str) -> None:
    found = read_binary(libs[name], cuobjdump_exe)
    assert found is not None
    got = tuple(V.binary_verdict(found, gpu).verdict for gpu in GPUS)
    assert got == EXPECTED[name], f"{name}: {got}"
    on_121 = V.binary_verdict(found, (12, 1))
    if name == "ptx_90":
        assert on_121.used == {"compute_90": on_121.groups}
        assert any("JIT-compiles PTX" in n for n in on_121.notes)
    if name == "sm_120a":  # the GB10 story: the sibling's arch-specific cubin cannot load on sm_121
        assert on_121.counts.get(V.CANNOT) == on_121.groups and on_121.cannot == {"sm_120a": on_121.groups}
    if name == "sm_90a":  # another generation's kernels are listed, not counted as this GPU's loss
        assert on_121.counts.get(V.OTHER) == on_121.groups and not on_121.cannot
    if name == "sm_120f":
        assert any("family" in n for n in on_121.notes)


def test_fallback_cannot_tell_arch_specific_from_plain(libs: dict[str, Path]) -> None:
    """Without cuobjdump an sm_120a cubin reads as sm_120 and would be judged runnable on sm_121: the note
    says so, and the arch-flag check answers 'unknown', not yes."""
    header = read_binary(libs["sm_120a"], None)
    assert header is not None
    assert V.binary_verdict(header, (12, 1)).verdict == V.NATIVE
    assert V.honours(header, ArchFlag.parse("12.0a")) is None
    assert "an arch-specific cubin would be counted as runnable" in header.notes[0]


def test_arch_flags_honoured(libs: dict[str, Path], cuobjdump_exe: str) -> None:
    read = {n: read_binary(p, cuobjdump_exe) for n, p in libs.items()}
    assert V.honours(read["sm_121a"], ArchFlag.parse("12.1a")) is True
    assert V.honours(read["sm_120f"], ArchFlag.parse("12.1a")) is False
    assert V.honours(read["sm_120f"], ArchFlag.parse("12.0f")) is True
    assert V.honours(read["sm_120a"], ArchFlag.parse("12.0f")) is True  # 'a' carries everything 'f' does
    assert V.honours(read["sm_90a"], ArchFlag.parse("9.0")) is True
    assert V.honours(read["sm_90"], ArchFlag.parse("9.0a")) is False
    assert V.honours(read["ptx_90"], ArchFlag.parse("9.0")) is False


def _wheel(folder: Path, files: dict[str, bytes]) -> Path:
    """A minimal real wheel (zip with dist-info) for the aarch64 platform."""
    path = folder / "fakecuda-1.0-py3-none-manylinux_2_28_aarch64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr("fakecuda-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: fakecuda\nVersion: 1.0\n")
        zf.writestr("fakecuda-1.0.dist-info/WHEEL",
                    "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-manylinux_2_28_aarch64\n")
        zf.writestr("fakecuda-1.0.dist-info/RECORD", "")
    return path


def test_scan_wheel_reads_only_device_code(libs: dict[str, Path], cuobjdump_exe: str, tmp_path: Path) -> None:
    plain = tmp_path / "libplain.so"
    c = tmp_path / "plain.c"
    c.write_text("int f(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(plain), str(c)], check=True)
    wheel = _wheel(tmp_path, {"fakecuda/libk.so.13": libs["sm_120a"].read_bytes(),
                              "fakecuda/libplain.so": plain.read_bytes(), "fakecuda/__init__.py": b""})
    scan = scan_wheel(wheel, cuobjdump_exe, "cuobjdump test", tmp_path / "cache")
    assert scan.candidates == 2 and [b.path for b in scan.binaries] == ["fakecuda/libk.so.13"]
    assert scan.binaries[0].sass == ["sm_120a"]
    again = scan_wheel(wheel, cuobjdump_exe, "cuobjdump test", tmp_path / "cache")  # from the cache
    assert again.to_dict() == scan.to_dict()


def test_cell_scan_end_to_end(libs: dict[str, Path], cuobjdump_exe: str, tmp_path: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A cell on sm_121 with arch 12.0f whose locked wheel holds an sm_120a-only library (the vLLM _C FP4
    kernels' shape), an sm_120f one and a PTX-only one: fetched with pip from a local folder, scanned."""
    index = tmp_path / "index"
    index.mkdir()
    wheel = _wheel(index, {"fakecuda/_C.so": libs["sm_120a"].read_bytes(),
                           "fakecuda/_fam.so": libs["sm_120f"].read_bytes(),
                           "fakecuda/_jit.so": libs["ptx_90"].read_bytes()})
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    issue = KnownIssue(id="nvfp4-built-for-120f-on-sm121", smokes=("flashinfer-nvfp4-vs-fp8",), expect="degraded",
                       failure_class="unsupported-tactics", note="")
    base = make_cell("gb10", ("fakecuda==1.0",), pins={"gpu": "sm_121", "arch": "12.0f", "fakecuda": "1.0"},
                     python="3.12", arch_flags=("12.0f",))
    cell = dataclasses.replace(base, platform="aarch64-manylinux_2_28", known_issues=(issue,))
    project = tmp_path / "project"
    (project / "locks").mkdir(parents=True)
    (project / "locks" / f"{cell.id}.txt").write_text(f"fakecuda==1.0 \\\n    --hash=sha256:{digest}\n")
    scan = scan_cell(cell, project, None, tool=cuobjdump_exe, tool_label="cuobjdump test", cache=tmp_path / "c")
    pkg = scan.package("fakecuda")
    assert pkg is not None and pkg.wheel == wheel.name and scan.source == "lock"
    by_path = {b.path: b.verdict for b in pkg.binaries}
    assert by_path == {"fakecuda/_C.so": V.CANNOT, "fakecuda/_fam.so": V.NATIVE, "fakecuda/_jit.so": V.JIT}
    assert pkg.verdict == V.PARTIAL
    assert scan.arch_flag_checks[0]["ok"]  # sm_120f and sm_120a both carry what 12.0f asks for
    assert scan.arch_flag_checks[0]["honoured_by"] == ["fakecuda: fakecuda/_C.so", "fakecuda: fakecuda/_fam.so"]
    (ki,) = scan.known_issues
    assert ki["known_issue"] == issue.id and ki["status"] == "confirmed"
    assert "fakecuda/_C.so" in ki["evidence"][0]

    # The same binaries under 12.1a: the flag is honoured by nothing, and the issue is flagged, not filed.
    cell_121a = dataclasses.replace(cell, arch_flags=("12.1a",), known_issues=())
    (project / "locks" / f"{cell_121a.id}.txt").write_text(f"fakecuda==1.0 --hash=sha256:{digest}\n")
    scan2 = scan_cell(cell_121a, project, None, tool=cuobjdump_exe, tool_label="cuobjdump test",
                      cache=tmp_path / "c")
    assert not scan2.arch_flag_checks[0]["ok"]
    assert "no package of the stack honours 12.1a" in scan2.arch_flag_checks[0]["message"]
    assert [k["status"] for k in scan2.known_issues] == ["flagged"]

    doc = scan_document([scan, scan2], "cuobjdump test", "pinmatrix arch-scan --stack gb10")
    assert json.loads(json.dumps(doc))["schema"] == "pinmatrix-arch-scan/1"
    md = render_scan_markdown(doc)
    assert "| `fakecuda` |" in md and "🟠 partial" in md and "**flagged**" in md and "**confirmed**" in md


def test_smoke_uses_the_exact_analysis(libs: dict[str, Path], cuobjdump_exe: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """arch-coverage through the runner: a cell-built sm_120f module on a 12.1a cell for sm_121 fails (the flag
    is not honoured), an sm_121a one passes, an sm_120a one cannot run there."""
    from pinmatrix.results.store import HostFingerprint, ResultsStore
    from pinmatrix.smoke.cellrun import run_cells
    from pinmatrix.smoke.runner import HostCell, RunOptions

    monkeypatch.setenv("PINMATRIX_CUOBJDUMP", cuobjdump_exe)
    results = {}
    for name in ("sm_120f", "sm_121a", "sm_120a"):
        monkeypatch.setenv("PINMATRIX_ARCH_BINARIES", str(libs[name]))
        cell = HostCell(id=f"arch{name}", smokes=("arch-coverage",), arch_flags=("12.1a",), compute_capability="12.1")
        store = ResultsStore(tmp_path / name / "r.sqlite")
        opts = RunOptions(smoke_dir=ROOT / "smoke", logs_dir=tmp_path / name / "logs", repo_root=ROOT)
        run = run_cells([cell], store, opts, host=HostFingerprint.make(hostname="t"), echo=lambda _s: None)
        results[name] = run[0].records[0]
    assert results["sm_121a"].status == "pass", results["sm_121a"].reason
    assert results["sm_121a"].metrics["tool"] == "cuobjdump"
    assert results["sm_120f"].status == "fail" and "lacks sm_121a (has sm_120f)" in results["sm_120f"].reason
    assert results["sm_120a"].status == "fail" and results["sm_120a"].failure_class == "missing-arch"
    assert "cannot run" in results["sm_120a"].reason
