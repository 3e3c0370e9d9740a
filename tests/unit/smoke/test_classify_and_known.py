"""Rules of the core that a wrong edit could break without another test noticing: known issues'
``without_patches``, an exclude naming a labelled value, the fail-without-a-class rule of classification,
every row of signatures.toml, the `smoke` command's exit status, hashes in the lock command (nvidia-smi
parsing: tests/unit/test_hostprobe.py; ``--exclude-newer`` against the index: tests/integration/
test_resolve_exclude_newer.py)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from conftest import make_cell
from pinmatrix.cli import main
from pinmatrix.lock.resolve import uv_command
from pinmatrix.matrix.selection import load
from pinmatrix.project.signatures import SIGNATURES_PATH, default_signatures
from pinmatrix.smoke.classify import classify, scan
from pinmatrix.smoke.known import apply_known_issues

ROOT = Path(__file__).resolve().parents[3]

# ------------------------------------------------------------------------------------------ known issues


def test_the_int64_patch_removes_the_int32_known_issue_from_its_cells() -> None:
    _, expansion = load(ROOT / "matrix.toml")
    xf = [c for c in expansion.cells if c.pins.get("xformers") == "0.0.35"]
    patched = [c for c in xf if any(p.id == "xformers-tiled-matmul-int64" and p.status == "apply" for p in c.patches)]
    plain = [c for c in xf if not c.patches]
    assert patched and plain
    for cell in plain:
        assert "xformers-tiled-matmul-int32-offsets" in [k.id for k in cell.known_issues], cell.name
    for cell in patched:
        assert "xformers-tiled-matmul-int32-offsets" not in [k.id for k in cell.known_issues], cell.name
        # so a regression of the patch (the illegal memory access again) is a FAILURE there, not an xfail
        verdict = apply_known_issues("xformers-tiled-matmul-boundary-output", "fail", "illegal-memory-access",
                                     "CUDA error: an illegal memory access was encountered", cell.known_issues)
        assert (verdict.status, verdict.known_issue) == ("fail", None)
    # ... while on the plain cell the same failure is the expected one
    verdict = apply_known_issues("xformers-tiled-matmul-boundary-output", "fail", "illegal-memory-access", "x",
                                 plain[0].known_issues)
    assert (verdict.status, verdict.known_issue) == ("xfail", "xformers-tiled-matmul-int32-offsets")


LABELLED = """\
[matrix]
[stacks.s]
gpu_required = false
exclude = [EXCLUDE]
[stacks.s.axes]
env = [{}, { label = "fp8-moe", vars = { A = "1" } }, { label = "other", vars = { A = "2" } }]
[stacks.s.packages]
six = ["1.16.0", "1.17.0"]
"""


@pytest.mark.parametrize(("exclude", "gone"), [
    ('{ env = "fp8-moe", six = "1.16.0" }', {("fp8-moe", "1.16.0")}),
    ('{ env = { label = "fp8-moe", vars = { A = "1" } } }', {("fp8-moe", "1.16.0"), ("fp8-moe", "1.17.0")}),
    ('{ env = "other" }', {("other", "1.16.0"), ("other", "1.17.0")}),
])
def test_exclude_of_a_labelled_env_value(tmp_path: Path, exclude: str, gone: set[tuple[str, str]]) -> None:
    path = tmp_path / "matrix.toml"
    path.write_text(LABELLED.replace("EXCLUDE", exclude))
    _, expansion = load(path)
    every = {(e, s) for e in ("default", "fp8-moe", "other") for s in ("1.16.0", "1.17.0")}
    assert {c.name for c in expansion.cells} == {f"s[env={e},six={s}]" for e, s in every - gone}


def _h200_with_exclude(tmp_path: Path, exclude: str) -> Path:
    text = (ROOT / "matrix.toml").read_text()
    assert "\n[stacks.h200]\n" in text
    text = text.replace("\n[stacks.h200]\n", f"\n[stacks.h200]\nexclude = [{exclude}]\n", 1)
    (tmp_path / "matrix.toml").write_text(text)
    (tmp_path / "patches").symlink_to(ROOT / "patches")
    return tmp_path / "matrix.toml"


def test_exclude_of_a_labelled_package_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The h200 stack's xformers axis has 0.0.35 and 0.0.35 labelled int64 (with the patch): excluding the
    label drops only the patched cell; excluding the bare version drops both (the label's version too)."""
    _, expansion = load(_h200_with_exclude(tmp_path, '{ xformers = "0.0.35-int64" }'))
    h200 = [c for c in expansion.cells if c.stack == "h200"]
    assert [c.pins["xformers"] for c in h200] == ["0.0.35"] and h200[0].patches == ()
    other = tmp_path / "other"
    other.mkdir()
    assert main(["validate", str(_h200_with_exclude(other, '{ xformers = "0.0.35" }'))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "stacks.h200" in err[0] and "every combination is excluded" in err[0]


# ---------------------------------------------------------------------------------------- classification


def test_a_fail_without_a_class_takes_the_logs_class() -> None:
    log = "loading\nRuntimeError: CUDA error: an illegal memory access was encountered\n"
    out = classify(result={"status": "fail", "reason": "AcceleratorError", "failure_class": None}, returncode=0,
                   timed_out=False, log_text=log, timeout_s=60)
    assert (out.status, out.failure_class, out.reason) == ("fail", "illegal-memory-access", "AcceleratorError")
    # a class the smoke gave wins over the log's
    out = classify(result={"status": "fail", "failure_class": "wrong-result"}, returncode=0, timed_out=False,
                   log_text=log, timeout_s=60)
    assert out.failure_class == "wrong-result"
    # no signature in the log: "error"
    out = classify(result={"status": "fail"}, returncode=0, timed_out=False, log_text="nothing known\n",
                   timeout_s=60)
    assert out.failure_class == "error"
    # a pass, skip or xfail result carries no class even when the log shows a fault line
    for status in ("pass", "skip"):
        out = classify(result={"status": status, "failure_class": "x"}, returncode=0, timed_out=False,
                       log_text=log, timeout_s=60)
        assert (out.status, out.failure_class) == (status, None)
        assert out.metrics["log_signatures"] == "illegal-memory-access"


# One real line per row of signatures.toml (from REFERENCE.md, upstream issues, or the H200 logs).
SIGNATURE_LINES: dict[str, list[str]] = {
    "cutensormap-illegal-address": [
        "RuntimeError: CUDA driver error in cuTensorMapEncodeTiled: an illegal memory access was encountered"],
    "illegal-memory-access": [
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
        "RuntimeError: Triton Error [CUDA]: CUDA_ERROR_ILLEGAL_ADDRESS", "cudaErrorIllegalAddress (700)"],
    "no-kernel-image": ["CUDA error: no kernel image is available for execution on the device",
                        "CUDA_ERROR_NO_BINARY_FOR_GPU", "cudaErrorNoKernelImageForDevice"],
    "driver-too-old": ["CUDA driver version is insufficient for CUDA runtime version",
                       "RuntimeError: The NVIDIA driver on your system is too old (found version 12080).",
                       "cudaErrorInsufficientDriver", "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
                       "Fail: CUDA driver too old: driver 535.54.03 < the cell's minimum 580.65.06",
                       "forward compatibility was attempted on non supported HW"],
    "nccl-error": ["torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356",
                   "ncclInternalError", "ncclSystemError", "ncclUnhandledCudaError", "ncclInvalidUsage",
                   "ncclRemoteError", "host:123:456 [0] NCCL WARN Cuda failure 'out of memory'"],
    "out-of-memory": ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 GiB.",
                      "CUDA_ERROR_OUT_OF_MEMORY", "cudaErrorMemoryAllocation"],
    "device-fault": ["CUDA error: misaligned address", "CUDA error: unspecified launch failure",
                     "CUDA_ERROR_LAUNCH_FAILED", "CUDA error: an illegal instruction was encountered"],
    "unsupported-tactics": ["[AutoTuner]: Skipped 10 unsupported tactic(s) for trtllm::fused_moe::gemm2"],
    "import-error": ["ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
                     "OSError: libnvrtc.so.13: cannot open shared object file",
                     "ImportError: /x/_C.so: undefined symbol: _ZN3c104cuda9SetDeviceEi"],
    "crash": ["Fatal Python error: Segmentation fault", "Fatal Python error: Aborted",
              "Fatal Python error: Bus error", "Fatal Python error: Floating point exception"],
}


def test_every_signature_row_has_lines_here() -> None:
    rows = tomllib.loads(SIGNATURES_PATH.read_text())["signature"]
    assert [r["class"] for r in rows] == [s.failure_class for s in default_signatures()]
    assert set(SIGNATURE_LINES) == {r["class"] for r in rows}, "a new signatures.toml row needs its lines here"


@pytest.mark.parametrize("cls", sorted(SIGNATURE_LINES))
def test_signature_row(cls: str) -> None:
    for line in SIGNATURE_LINES[cls]:
        text = f"[smoke] start\n{line}\ntrailing output\n"
        first = scan(text)[0]
        assert first.signature.failure_class == cls, line
        assert first.line == line.strip()
        sig = first.signature
        if sig.status == "degraded":
            out = classify(result={"status": "pass", "reason": "ran"}, returncode=0, timed_out=False,
                           log_text=text, timeout_s=60)
            assert (out.status, out.failure_class) == ("degraded", cls)
            assert out.metrics[sig.metric] == 10
        else:
            out = classify(result=None, returncode=1, timed_out=False, log_text=text, timeout_s=60)
            assert (out.status, out.failure_class) == ("fail", cls), line
            assert line.strip()[:60] in out.reason


def test_case_sensitive_rows_do_not_match_other_case() -> None:
    assert not scan("[autotuner]: skipped 10 unsupported tactic(s)\n")
    assert not scan("fatal python error: segmentation fault\n")
    assert scan("an ILLEGAL memory access was encountered\n")[0].signature.failure_class == "illegal-memory-access"


# ------------------------------------------------------------------------------------ smoke exit status

EXIT_SMOKES = '''
from _smokelib import Fail, Skip, main
SMOKES = {"ok": {"func": "ok"}, "bad": {"func": "bad"}, "skipped": {"func": "skipped"}}
def ok(ctx):
    ctx.summary = "fine"
def bad(ctx):
    raise Fail("numbers off", "wrong-result")
def skipped(ctx):
    raise Skip("not here")
if __name__ == "__main__":
    main(SMOKES, globals())
'''


@pytest.mark.parametrize(("keyword", "rc", "summary"), [
    ("ok", 0, "1 pass"), ("skipped", 0, "1 skip"), ("bad", 1, "1 fail"), ("ok or bad or skipped", 1, "1 fail")])
def test_smoke_command_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str], keyword: str, rc: int,
                                   summary: str) -> None:
    d = tmp_path / "smoke"
    d.mkdir()
    (d / "exits.py").write_text(EXIT_SMOKES)
    got = main(["smoke", "--smoke-dir", str(d), "--smoke", keyword, "--results", str(tmp_path / "r.sqlite"),
                "--logs", str(tmp_path / "logs")])
    assert got == rc
    assert summary in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------- lock


def test_uv_command_keeps_exclude_newer_hashes_and_the_cells_target() -> None:
    cell = make_cell("t", ("six==1.16.0",), python="3.12")
    cmd = uv_command(cell, Path("req.in"), Path("out.txt"), "2024-06-01T00:00:00Z", "uv")
    assert cmd[cmd.index("--exclude-newer") + 1] == "2024-06-01T00:00:00Z"
    assert "--generate-hashes" in cmd
    assert cmd[cmd.index("--python-version") + 1] == "3.12"
    assert cmd[cmd.index("--python-platform") + 1] == "x86_64-manylinux_2_28"
    assert "--exclude-newer" not in uv_command(cell, Path("r"), Path("o"), None, "uv")


# ------------------------------------------------------------------------------------------- CI skips


@pytest.mark.parametrize(("value", "on"), [("true", True), ("1", True), ("yes", True), ("True", True),
                                           ("on", True), ("gitlab", True), ("", False), ("false", False),
                                           ("FALSE", False), ("0", False), (" 0 ", False)])
def test_ci_is_any_value_but_empty_false_or_zero(value: str, on: bool) -> None:
    from conftest import ci_enabled

    assert ci_enabled(value) is on


def test_skip_or_fail_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import skip_or_fail

    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="CI: the index is unreachable"):
        skip_or_fail("the index is unreachable")
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception):
        skip_or_fail("the index is unreachable")


# ------------------------------------------------------------------------------------ lock hashes (builder)


def test_a_lock_hash_that_is_not_a_sha256_counts_as_no_hash() -> None:
    """The builder's lock check (pinmatrix.image.assembly.lockcheck) before any layer: a package whose every hash is
    mangled (wrong length, not hex) is refused like one without hashes; the untouched lock passes."""
    import re

    from pinmatrix.image.assembly.lockcheck import LockMismatch, checked_lock
    from pinmatrix.matrix.expand import select_cells
    from pinmatrix.project.lockfile import lock_path

    _, expansion = load(ROOT / "matrix.toml")
    cell = select_cells(expansion.cells, stack="demo")[0]
    text = lock_path(cell, ROOT).read_text()
    checked_lock(cell, text, "locks/x.txt")
    six = re.search(r"^six==\S+ \\\n(?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+", text, re.MULTILINE)
    assert six, "the demo lock pins six with hashes"
    for bad in ("z" * 64, "ab" * 31):
        mangled = text.replace(six.group(0), re.sub(r"sha256:[0-9a-f]{64}", f"sha256:{bad}", six.group(0)))
        with pytest.raises(LockMismatch, match=r"six==\S+ has no --hash"):
            checked_lock(cell, mangled, "locks/x.txt")
