"""Log classification on recorded logs (the H200 runs under results/h200/logs and field log lines from
REFERENCE.md), the outcome rules, known-issue matching, and the catalogue's consistency with matrix.toml."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from helpers import fatbin_containers

from pinmatrix.cell import KnownIssue
from pinmatrix.matrix.selection import load
from pinmatrix.project.catalogue import load_catalogue, matches, select
from pinmatrix.smoke.classify import classify, scan
from pinmatrix.smoke.known import apply_known_issues

ROOT = Path(__file__).resolve().parents[3]
H200_LOGS = ROOT / "results" / "h200" / "logs"
# The 2026-11-29 run (Python 3.12 cell ids), kept for these recorded logs: every boundary smoke died there.
H200_LOGS_1129 = ROOT / "results" / "h200" / "logs-2026-11-29"


def h200_log(cell: str, smoke: str, logs: Path = H200_LOGS) -> str:
    (path,) = logs.glob(f"*/{cell}/{smoke}.log")
    return path.read_text()


def result_line(text: str) -> dict:
    line = next(ln for ln in reversed(text.splitlines()) if ln.startswith("PINMATRIX-RESULT "))
    return json.loads(line.split(" ", 1)[1])


@pytest.mark.parametrize("smoke", ["xformers-tiled-matmul-boundary-output", "xformers-tiled-matmul-boundary-a",
                                   "xformers-tiled-matmul-boundary-b", "xformers-tiled-matmul-large-vocab",
                                   "xformers-tiled-matmul-fwd-bwd"])
def test_recorded_h200_ima_logs_classify_as_illegal_memory_access(smoke: str) -> None:
    text = h200_log("f3f5fc14b59a", smoke, H200_LOGS_1129)
    assert scan(text)[0].signature.failure_class == "illegal-memory-access"
    # Even had the smoke died before writing its result, the log alone names the class.
    out = classify(result=None, returncode=1, timed_out=False, log_text=text, timeout_s=300)
    assert (out.status, out.failure_class) == ("fail", "illegal-memory-access")
    with_result = classify(result=result_line(text), returncode=0, timed_out=False, log_text=text, timeout_s=300)
    assert (with_result.status, with_result.failure_class) == ("fail", "illegal-memory-access")


def test_recorded_two_gpu_seqpar_log() -> None:
    """Issue #1347's own case on two H200s: both ranks die; the log names the class."""
    (path,) = (H200_LOGS.parent / "x2" / "logs").glob("*/265777501f74/xformers-seqpar-2gpu.log")
    text = path.read_text()
    out = classify(result=None, returncode=1, timed_out=False, log_text=text, timeout_s=300)
    assert out.failure_class == "illegal-memory-access"
    assert result_line(text)["failure_class"] == "illegal-memory-access"


def test_recorded_h200_pass_logs_stay_pass() -> None:
    for smoke in ("xformers-tiled-matmul-fwd-bwd", "flashinfer-fp8-gemm", "torch-gemm"):
        text = h200_log("7cefdf4f99f5", smoke)
        out = classify(result=result_line(text), returncode=0, timed_out=False, log_text=text, timeout_s=300)
        assert (out.status, out.failure_class) == ("pass", None), smoke
    skip = h200_log("7cefdf4f99f5", "flashinfer-nvfp4-gemm")
    out = classify(result=result_line(skip), returncode=0, timed_out=False, log_text=skip, timeout_s=300)
    assert out.status == "skip" and "sm_90" in out.reason


FIELD_LINES = {
    "cutensormap-illegal-address": "RuntimeError: CUDA driver error in cuTensorMapEncodeTiled: an illegal memory "
                                   "access was encountered",
    "no-kernel-image": "torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device",
    "driver-too-old": "RuntimeError: The NVIDIA driver on your system is too old (found version 12080).",
    "nccl-error": "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, unhandled cuda "
                  "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.5 ncclUnhandledCudaError",
    "out-of-memory": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 GiB.",
    "import-error": "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
}


@pytest.mark.parametrize("cls", sorted(FIELD_LINES))
def test_field_lines(cls: str) -> None:
    text = f"some output\n{FIELD_LINES[cls]}\nmore output\n"
    out = classify(result=None, returncode=1, timed_out=False, log_text=text, timeout_s=60)
    assert out.failure_class == cls
    assert FIELD_LINES[cls][:40] in out.reason


def test_autotuner_line_degrades_a_pass_with_the_count() -> None:
    text = "[AutoTuner]: Skipped 10 unsupported tactic(s) for trtllm::fused_moe::gemm2\n"
    out = classify(result={"status": "pass", "reason": "ok"}, returncode=0, timed_out=False, log_text=text,
                   timeout_s=60)
    assert (out.status, out.failure_class, out.metrics["autotuner_skipped_tactics"]) == (
        "degraded", "unsupported-tactics", 10)
    assert "Skipped 10 unsupported tactic" in out.reason


def test_timeout_and_signal_outrank_the_log() -> None:
    ima = "CUDA error: an illegal memory access was encountered\n"
    t = classify(result=None, returncode=-9, timed_out=True, log_text=ima, timeout_s=5)
    assert (t.failure_class, t.reason.startswith("timed out after 5 s")) == ("timeout", True)
    c = classify(result=None, returncode=-11, timed_out=False, log_text=ima, timeout_s=5)
    assert c.failure_class == "crash" and "SIGSEGV" in c.reason and "illegal memory access" in c.reason
    none = classify(result=None, returncode=3, timed_out=False, log_text="Traceback...\nValueError: x\n",
                    timeout_s=5)
    assert (none.failure_class, none.reason) == ("error", "exited with status 3 without a result: ValueError: x")


def test_known_issue_rules() -> None:
    issue = KnownIssue(id="k", smokes=("flashinfer-nvfp4*",), expect="degraded", failure_class="unsupported-tactics",
                       note="120f build")
    v = apply_known_issues("flashinfer-nvfp4-vs-fp8", "degraded", "unsupported-tactics", "slow", [issue])
    assert (v.status, v.known_issue) == ("xfail", "k")
    v = apply_known_issues("flashinfer-nvfp4-vs-fp8", "pass", None, "fast", [issue])
    assert v.status == "xpass" and "may be gone" in v.reason
    v = apply_known_issues("flashinfer-decode", "fail", "error", "x", [issue])
    assert (v.status, v.known_issue) == ("fail", None)
    skip = KnownIssue(id="s", smokes=("vllm-generate",), expect="skip", failure_class=None, note="no vllm")
    assert apply_known_issues("vllm-generate", "skip", None, "vllm not installed", [skip]).status == "xfail"


def test_selectors() -> None:
    assert matches("xformers-tiled-matmul-boundary", "xformers-tiled-matmul-boundary-a")
    assert not matches("xformers-tiled-matmul-boundary", "xformers-tiled-matmul-boundaryx")
    assert matches("flashinfer-*", "flashinfer-decode") and matches("host-probe", "host-probe")


def test_catalogue_covers_every_smoke_the_matrix_names() -> None:
    catalogue = load_catalogue(ROOT / "smoke")
    names = [s.name for s in catalogue]
    assert len(names) == len(set(names))
    assert names[0] == "host-probe" and names[-1] == "arch-coverage"
    matrix, expansion = load(ROOT / "matrix.toml")
    for cell in expansion.cells:
        chosen, unmatched = select(catalogue, cell.smokes)
        assert not unmatched, (cell.name, unmatched)
        for issue in cell.known_issues:
            for sel in issue.smokes:
                assert any(matches(sel, n) for n in names), (issue.id, sel)
    for s in catalogue:
        assert s.description and s.timeout_s > 0
        if s.name not in ("host-probe", "python-imports", "arch-coverage", "cpu-threshold", "six-assert-not-regex",
                          "shared-libraries"):
            assert s.gpu, f"{s.name} should declare needs.gpu"


def _fatbin(entries: list[tuple[int, int]]) -> bytes:
    body = b""
    for kind, arch in entries:
        payload = b"\x00" * 8
        head = struct.pack("<HHIIIIIII", kind, 0x0101, 64, len(payload), 0, len(payload), 0, 0, arch)
        body += head.ljust(64, b"\x00") + payload
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def test_fatbin_parser_and_runnable_rules() -> None:
    """The arch-coverage smoke's analysis lives in pinmatrix.archscan (tests/unit/archscan/test_scan.py reads real
    nvcc output); here the header parser on hand-made containers and the rules it is judged by."""
    from pinmatrix.archflag import ArchFlag
    from pinmatrix.archscan.binary import BinaryTargets
    from pinmatrix.archscan.verdict import honours

    blob = b"ELF junk" + _fatbin([(2, 80), (2, 90), (1, 90)]) + b"more" + _fatbin([(2, 120)])
    assert fatbin_containers(blob) == [[("sass", 80), ("sass", 90), ("ptx", 90)], [("sass", 120)]]

    def run(targets: set[str], gpu: str) -> bool:
        cap = ArchFlag.parse_target(gpu).capability
        return any(ArchFlag.parse_target(t).runs_on(*cap) for t in targets)

    assert run({"sm_90"}, "sm_90a") and run({"sm_80"}, "sm_86") and not run({"sm_90"}, "sm_100a")
    assert run({"compute_80"}, "sm_121a") and not run({"sm_90a"}, "sm_91")
    assert not run({"sm_120f"}, "sm_100") and run({"sm_120"}, "sm_121a")
    # Cell-built modules must carry the target itself. On the H200 (host mode, target sm_90 from the device)
    # flashinfer's JIT modules carry sm_90a: that covers a plain sm_90 target.

    def carries(targets: set[str], flag: str, exact: bool) -> bool | None:
        b = BinaryTargets("m.so", 0, [tuple(targets)], "cuobjdump" if exact else "fatbin-header", exact)
        return honours(b, ArchFlag.parse(flag))

    assert carries({"sm_90a"}, "9.0", True) and carries({"sm_90a"}, "9.0a", True)
    assert not carries({"sm_90"}, "9.0a", True) and not carries({"sm_120f"}, "12.1a", True)
    assert carries({"sm_120a"}, "12.0f", True) and not carries({"sm_120"}, "12.0f", True)
    assert carries({"sm_121"}, "12.1a", False) is None and carries({"sm_120"}, "12.1a", False) is False
