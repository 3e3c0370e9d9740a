"""The runner, for real: a smoke that segfaults, one that hangs (with a child), one that prints an
illegal-memory-access line and dies, known issues (xfail/xpass), degraded from the AutoTuner line,
rerun skipping, and the real catalogue on this GPU-less machine (every GPU smoke: skip, no GPU)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from pinmatrix.cell import KnownIssue
from pinmatrix.cli import main
from pinmatrix.project.catalogue import load_catalogue
from pinmatrix.results.store import HostFingerprint, ResultsStore
from pinmatrix.smoke.cellrun import run_cells
from pinmatrix.smoke.runner import HostCell, RunOptions

ROOT = Path(__file__).resolve().parents[3]
HOST = HostFingerprint.make(hostname="test", gpu_name="Fake GPU", gpu_count=1, driver="1.0", capability="9.0")

FAKE = '''
import ctypes, os, subprocess, sys, time
from _smokelib import Degraded, Fail, Skip, main

SMOKES = {
    "segv": {"func": "segv", "timeout_s": 60},
    "hang": {"func": "hang", "timeout_s": 3},
    "ima": {"func": "ima", "timeout_s": 60},
    "ok": {"func": "ok", "timeout_s": 60},
    "autotuner": {"func": "autotuner", "timeout_s": 60},
    "wrong": {"func": "wrong", "timeout_s": 60},
    "group-a": {"func": "ok", "timeout_s": 60},
    "group-b": {"func": "ok", "timeout_s": 60},
    "gpu-only": {"func": "ok", "needs": {"gpu": True}},
    "env": {"func": "env", "timeout_s": 60},
}

def ok(ctx):
    ctx.metric("value", 42)
    ctx.summary = "fine"

def segv(ctx):
    print("about to fault", flush=True)
    ctypes.string_at(0)

def hang(ctx):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["HANG_CHILD_PID"], "w") as fh:
        fh.write(str(child.pid))
    time.sleep(600)

def ima(ctx):
    print("RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered", file=sys.stderr, flush=True)
    os._exit(1)

def autotuner(ctx):
    print("[AutoTuner]: Skipped 10 unsupported tactic(s) for trtllm::fused_moe::gemm2", flush=True)
    ctx.summary = "ran"

def wrong(ctx):
    raise Fail("numbers off", "wrong-result")

def env(ctx):
    ctx.metric("flag", os.environ.get("VLLM_USE_FLASHINFER_MOE_FP4", "unset"))
    ctx.metric("cell_id", ctx.cell.get("id", ""))
'''


@pytest.fixture()
def smoke_dir(tmp_path: Path) -> Path:
    d = tmp_path / "smoke"
    d.mkdir()
    (d / "fake.py").write_text(FAKE + '\nif __name__ == "__main__":\n    main(SMOKES, globals())\n')
    return d


def options(tmp_path: Path, smoke_dir: Path, **kw) -> RunOptions:
    return RunOptions(smoke_dir=smoke_dir, logs_dir=tmp_path / "logs", overlay_dir=tmp_path / "overlay",
                      repo_root=ROOT, **kw)


def by_name(runs) -> dict:
    return {r.smoke: r for run in runs for r in run.records}


def test_crash_hang_and_device_fault_fail_only_their_smoke(tmp_path: Path, smoke_dir: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    pidfile = tmp_path / "child.pid"
    monkeypatch.setenv("HANG_CHILD_PID", str(pidfile))
    store = ResultsStore(tmp_path / "r.sqlite")
    cell = HostCell(smokes=("segv", "hang", "ima", "ok", "wrong", "gpu-only"))
    t0 = time.monotonic()
    runs = run_cells([cell], store, options(tmp_path, smoke_dir), host=HOST, echo=lambda _s: None)
    elapsed = time.monotonic() - t0
    got = by_name(runs)
    assert list(got) == ["segv", "hang", "ima", "ok", "wrong", "gpu-only"]

    segv = got["segv"]
    assert (segv.status, segv.failure_class) == ("fail", "crash")
    assert "SIGSEGV" in segv.reason
    assert "Segmentation fault" in Path(segv.log_path).read_text()  # faulthandler's report

    hang = got["hang"]
    assert (hang.status, hang.failure_class) == ("fail", "timeout") and "timed out after 3 s" in hang.reason
    log = Path(hang.log_path).read_text()
    assert "time.sleep(600)" in log or "in hang" in log  # the stack faulthandler printed on SIGABRT
    child = int(pidfile.read_text())
    time.sleep(0.2)
    assert not _alive(child), "the hung smoke's child outlived it"
    assert elapsed < 60

    ima = got["ima"]
    assert (ima.status, ima.failure_class) == ("fail", "illegal-memory-access")
    assert "an illegal memory access was encountered" in ima.reason

    ok = got["ok"]
    assert (ok.status, ok.reason, ok.metrics["value"]) == ("pass", "fine", 42)
    assert ok.environment["python"] and ok.duration_s > 0
    assert (got["wrong"].status, got["wrong"].failure_class, got["wrong"].reason) == ("fail", "wrong-result",
                                                                                      "numbers off")
    assert (got["gpu-only"].status, got["gpu-only"].reason) == ("skip", "no GPU")
    assert len(store.query()) == 6


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_known_issues_xfail_xpass_and_degraded(tmp_path: Path, smoke_dir: Path) -> None:
    issues = (
        KnownIssue(id="ima-known", smokes=("ima",), expect="fail", failure_class="illegal-memory-access",
                   note="int32 offsets"),
        KnownIssue(id="gone", smokes=("group",), expect="fail", failure_class="illegal-memory-access",
                   note="fixed upstream?"),
        KnownIssue(id="other-class", smokes=("wrong",), expect="fail", failure_class="illegal-memory-access",
                   note="not this one"),
    )
    cell = HostCell(id="c0ffee000000", stack="t", smokes=("ima", "group", "wrong", "autotuner"),
                    known_issues=issues)
    store = ResultsStore(tmp_path / "r.sqlite")
    got = by_name(run_cells([cell], store, options(tmp_path, smoke_dir), host=HOST, echo=lambda _s: None))
    assert (got["ima"].status, got["ima"].known_issue) == ("xfail", "ima-known")
    assert "int32 offsets" in got["ima"].reason
    for name in ("group-a", "group-b"):  # a selector names a group of smokes
        assert (got[name].status, got[name].known_issue) == ("xpass", "gone")
    assert got["wrong"].status == "fail" and "expects illegal-memory-access" in got["wrong"].reason
    auto = got["autotuner"]
    assert (auto.status, auto.failure_class) == ("degraded", "unsupported-tactics")
    assert auto.metrics["autotuner_skipped_tactics"] == 10


def test_rerun_skips_recorded_and_env_reaches_the_smoke(tmp_path: Path, smoke_dir: Path) -> None:
    store = ResultsStore(tmp_path / "r.sqlite")
    cell = HostCell(id="abcabcabcabc", smokes=("ok", "env"), env={"VLLM_USE_FLASHINFER_MOE_FP4": "0"})
    opts = options(tmp_path, smoke_dir)
    first = run_cells([cell], store, opts, host=HOST, echo=lambda _s: None)
    assert by_name(first)["env"].metrics == {"flag": "0", "cell_id": "abcabcabcabc"}
    second = run_cells([cell], store, opts, host=HOST, echo=lambda _s: None)
    assert second[0].records == [] and second[0].skipped_recorded == ["ok", "env"]
    other_host = replace(HOST, id="000000000000")
    third = run_cells([cell], store, opts, host=other_host, echo=lambda _s: None)
    assert len(third[0].records) == 2
    forced = run_cells([cell], store, replace(opts, rerun=True, keyword="env"), host=HOST, echo=lambda _s: None)
    assert [r.smoke for r in forced[0].records] == ["env"]
    assert len(store.query(cell_id="abcabcabcabc")) == 5


def test_real_catalogue_without_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Host mode on this machine: GPU smokes skip with 'no GPU'; host-probe passes CPU-only."""
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has an NVIDIA driver")
    out = tmp_path / "run.json"
    rc = main(["smoke", "--results", str(tmp_path / "r.sqlite"), "--logs", str(tmp_path / "logs"),
               "--smoke-dir", str(ROOT / "smoke"), "--json", str(out)])
    assert rc == 0
    rows = json.loads(out.read_text())
    catalogue = {s.name: s for s in load_catalogue(ROOT / "smoke")}
    assert {r["smoke"] for r in rows} == set(catalogue)
    for r in rows:
        assert r["cell_id"] == "host" and r["host"]["gpu_count"] == 0
        if catalogue[r["smoke"]].gpu:
            assert (r["status"], r["reason"]) == ("skip", "no GPU"), r
    probe = next(r for r in rows if r["smoke"] == "host-probe")
    assert probe["status"] == "pass" and probe["metrics"]["gpu_count"] == 0
    assert "already recorded" not in capsys.readouterr().out
    assert main(["smoke", "--results", str(tmp_path / "r.sqlite"), "--logs", str(tmp_path / "logs"),
                 "--smoke-dir", str(ROOT / "smoke")]) == 0
    assert "already recorded" in capsys.readouterr().out


def test_smoke_cli_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["smoke", str(ROOT / "matrix.toml"), "--cell", "nope", "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no cell with id or name 'nope'" in err[0]
    assert main(["smoke", str(ROOT / "matrix.toml"), "--stack", "h200", "--list"]) == 0
    listing = capsys.readouterr().out
    assert "xformers-tiled-matmul-boundary-output" in listing and "cell " in listing


def test_h200_cells_overlay_applies_the_patch_only_where_the_cell_says(tmp_path: Path) -> None:
    """The h200 stack's two cells on a machine without GPU: the int64 cell's overlay carries the patched
    kernel, the plain cell's does not, and every smoke they name exists in the catalogue."""
    whl = _tiny_xformers_wheel(tmp_path)
    project = _with_stand_in_locked(tmp_path / "project", whl)
    rc = main(["smoke", str(project / "matrix.toml"), "--stack", "h200", "--smoke", "host-probe",
               "--wheels", str(whl.parent), "--overlay", str(tmp_path / "ov"),
               "--results", str(tmp_path / "r.sqlite"), "--logs", str(tmp_path / "logs")])
    assert rc == 0
    kernels = {p.parts[-6]: p.read_text() for p in (tmp_path / "ov").glob("*/site/" + KERNEL)}
    assert len(kernels) == 2
    assert sorted("INT64_OFFSETS" in text for text in kernels.values()) == [False, True]


KERNEL = "xformers/ops/_triton/tiled_matmul_kernels.py"


def _with_stand_in_locked(project: Path, wheel: Path) -> Path:
    """A copy of the project whose h200 locks name the stand-in wheel's sha256 for xformers (`smoke --wheels`
    installs only the lock's wheels)."""
    import hashlib

    project.mkdir()
    for name in ("matrix.toml", "patches", "smoke", "locks"):
        source = ROOT / name
        (shutil.copytree if source.is_dir() else shutil.copyfile)(source, project / name)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    for lock in (project / "locks").glob("*.txt"):
        text = lock.read_text()
        lock.write_text(text.replace("xformers==0.0.35 \\\n", f"xformers==0.0.35 \\\n    --hash=sha256:{digest} \\\n"))
    return project


def _tiny_xformers_wheel(tmp_path: Path) -> Path:
    """A wheel named xformers 0.0.35 holding the hunks' context of the real kernel file, rebuilt from the
    patch itself (reverse-applied new side), so the overlay test needs no network."""
    import zipfile

    from pinmatrix.image.assembly.patching import parse_patch

    (fp,) = parse_patch((ROOT / "patches" / "xformers-tiled-matmul-int64.patch").read_text())
    lines: list[str] = []
    for hunk in fp.hunks:
        lines.extend(hunk.old_lines)
        lines.append("# gap\n")
    # Hunk line numbers will not match; the applier searches at an offset like GNU patch.
    body = "".join(lines)
    d = tmp_path / "wheels"
    d.mkdir()
    whl = d / "xformers-0.0.35-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr("xformers/__init__.py", "__version__ = '0.0.35'\n")
        zf.writestr("xformers/ops/__init__.py", "")
        zf.writestr("xformers/ops/_triton/__init__.py", "")
        zf.writestr(KERNEL, body)
        zf.writestr("xformers-0.0.35.dist-info/METADATA", "Metadata-Version: 2.1\nName: xformers\nVersion: 0.0.35\n")
        zf.writestr("xformers-0.0.35.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr("xformers-0.0.35.dist-info/RECORD", "")
    return whl


def test_python_is_this_interpreter() -> None:
    assert RunOptions().python == sys.executable


def test_nox_has_a_smoke_session() -> None:
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "nox", "-l", "--json"], cwd=ROOT, capture_output=True, text=True,
                          check=True)
    sessions = {s["session"]: s for s in json.loads(proc.stdout)}
    assert "smoke" in sessions and "pinmatrix smoke" not in sessions["smoke"]["description"]
    assert "--runtime" in sessions["smoke"]["description"]


def test_relative_logs_and_results_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Defaults are relative (.pinmatrix/...); smokes run with their work dir as cwd, so paths must resolve."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run.json"
    assert main(["smoke", "--smoke", "host-probe", "--smoke-dir", str(ROOT / "smoke"), "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())
    assert row["status"] == "pass", row
    assert Path(row["log_path"]).is_absolute() and Path(row["log_path"]).is_file()
    assert (tmp_path / ".pinmatrix" / "results.sqlite").is_file()
