"""`pinmatrix doctor` on the seed's hosts, through a fake nvidia-smi: a GB10 (SM_121) under 580.142, 590.48.01
and 595.58.03 and the H200 under 580.159.04. The shipped matrix's known issues that hit each, the promoted images
that fit each and the drivers their evidence covers, the exit statuses a job script gates on, the no-GPU line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_smi import install_fake_smi, no_smi

from pinmatrix.cli import main
from pinmatrix.doctor import checkup as checkup_module
from pinmatrix.doctor.checkup import DoctorSettings, run_checkup
from pinmatrix.hostprobe import HostFingerprint
from pinmatrix.project.known_good import record_promotion
from pinmatrix.results.store import ResultsStore, SmokeRecord

ROOT = Path(__file__).resolve().parents[3]
MATRIX = ROOT / "matrix.toml"
H200_HOST = HostFingerprint.make(hostname="h200-a", gpu_name="NVIDIA H200", gpu_count=1, driver="580.159.04",
                                 capability="9.0", cuda_driver_api="13.0")


def _entry(cell_id: str, when: str, *, stack: str, gpu: bool = True, min_driver: str | None = None,
           arch: tuple[str, ...] = (), cap: str | None = None, evidence: list[dict] | None = None) -> dict:
    digest = "sha256:" + cell_id[:1] * 64
    return {"stack": stack, "cell_id": cell_id, "cell_name": f"{stack}[{cell_id[:4]}]", "digest": digest,
            "reference": f"127.0.0.1:5000/pinmatrix/known-good/{stack}@{digest}", "promoted_at": when,
            "gpu_required": gpu, "min_driver": min_driver, "compute_capability": cap, "arch_flags": list(arch),
            "pins": {}, "policy": {}, "evidence": evidence or []}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """known-good.toml with a GB10 12.0f cell (evidence on 580.142, by its host label), a GB10 12.1a cell that needs
    CUDA 13.1's driver (evidence on 590.48.01 and 595.58.03), an H200 cell (evidence on the H200, whose driver comes
    from the results store) and a CPU cell; the packages of this Python left out (they differ per machine)."""
    kg = tmp_path / "known-good.toml"
    gb10 = "1x NVIDIA GB10 sm_121 driver {}"
    for e in (
        _entry("aaaaaaaaaaaa", "2026-11-01T00:00:00Z", stack="gb10-nvfp4", min_driver="580.65.06", arch=("12.0f",),
               cap="12.1", evidence=[{"smoke": "torch-gemm", "host_id": "0123456789ab", "host": gb10.format("580.142")}]),
        _entry("bbbbbbbbbbbb", "2026-11-10T00:00:00Z", stack="gb10-nvfp4", min_driver="590.44.01", arch=("12.1a",),
               cap="12.1", evidence=[{"smoke": "torch-gemm", "host_id": "111111111111", "host": gb10.format(d)}
                                     for d in ("595.58.03", "590.48.01")]),
        _entry("cccccccccccc", "2026-11-20T00:00:00Z", stack="h200", min_driver="580.65.06", arch=("9.0a",), cap="9.0",
               evidence=[{"smoke": "torch-gemm", "host_id": H200_HOST.id, "host": "relabelled"}]),
        _entry("dddddddddddd", "2026-11-05T00:00:00Z", stack="demo", gpu=False),
    ):
        record_promotion(kg, e)
    store = ResultsStore(tmp_path / "results.sqlite")
    store.record(SmokeRecord(cell_id="cccccccccccc", stack="h200", host=H200_HOST, smoke="torch-gemm", run_id="r1",
                             status="pass", failure_class=None, reason="", metrics={}, log_path=None,
                             started_at="2026-11-19T00:00:00Z", finished_at="2026-11-19T00:00:01Z", duration_s=1.0,
                             known_issue=None, image_digest=None))
    monkeypatch.setattr(checkup_module, "installed_packages", lambda: {})
    return tmp_path


def _settings(project: Path, **kw: object) -> DoctorSettings:
    return DoctorSettings(matrix=MATRIX, matrix_required=True, known_good=project / "known-good.toml",
                          results=project / "results.sqlite", **kw)  # type: ignore[arg-type]


SEED = {
    # host: (issues that hit, conditional issues, images that fit (newest promotion first), exit status)
    "gb10-580.142": ([], ["nvfp4-built-for-120f-on-sm121", "xformers-0.0.35-c-extension-built-for-cuda-12",
                          "xformers-tiled-matmul-int32-offsets"], ["dddddddddddd", "aaaaaaaaaaaa"], 0),
    "gb10-590.48.01": (["driver-590.48.01-uvm-leak"], ["nvfp4-built-for-120f-on-sm121",
                       "xformers-0.0.35-c-extension-built-for-cuda-12", "xformers-tiled-matmul-int32-offsets"],
                       ["bbbbbbbbbbbb", "dddddddddddd", "aaaaaaaaaaaa"], 1),
    "gb10-595.58.03": (["driver-595.58.03-nvfp4-cutensormap"], ["nvfp4-built-for-120f-on-sm121",
                       "xformers-0.0.35-c-extension-built-for-cuda-12", "xformers-tiled-matmul-int32-offsets"],
                       ["bbbbbbbbbbbb", "dddddddddddd", "aaaaaaaaaaaa"], 1),
    "h200-580.159.04": ([], ["vllm-0.20.0-flashinfer-moe-fp8-online-fp8-sm90",
                             "xformers-0.0.35-c-extension-built-for-cuda-12", "xformers-tiled-matmul-int32-offsets"],
                        ["cccccccccccc", "dddddddddddd"], 0),
}


@pytest.mark.parametrize("host", sorted(SEED))
def test_the_seed_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, project: Path, host: str) -> None:
    hits, conditional, fits, status = SEED[host]
    install_fake_smi(tmp_path / "bin", monkeypatch, host)
    up = run_checkup(_settings(project))
    assert [i.id for i in up.issues if i.verdict == "hits"] == hits
    assert [i.id for i in up.issues if i.verdict == "conditional"] == conditional
    assert [i.cell_id for i in up.images if i.fits] == fits
    assert up.exit_status() == status
    for issue in up.issues:
        assert issue.source  # each with its source
    assert up.elapsed_s < 1.0


def test_which_drivers_each_promotion_was_tested_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    project: Path) -> None:
    install_fake_smi(tmp_path / "bin", monkeypatch, "gb10-590.48.01")
    images = {i.cell_id: i for i in run_checkup(_settings(project)).images}
    assert [str(d) for d in images["bbbbbbbbbbbb"].drivers.drivers] == ["590.48.01", "595.58.03"]
    assert images["bbbbbbbbbbbb"].drivers.covered
    assert not images["aaaaaaaaaaaa"].drivers.covered  # its evidence: 580.142 only
    assert "this host's driver 590.48.01 is not among" in images["aaaaaaaaaaaa"].drivers.sentence()
    install_fake_smi(tmp_path / "bin2", monkeypatch, "h200-580.159.04")
    h200 = {i.cell_id: i for i in run_checkup(_settings(project)).images}["cccccccccccc"]
    assert [str(d) for d in h200.drivers.drivers] == ["580.159.04"] and h200.drivers.covered  # from the store


def test_exit_status_and_json_through_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, project: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    args = ["doctor", "--matrix", str(MATRIX), "--known-good", str(project / "known-good.toml"),
            "--results", str(project / "results.sqlite")]
    install_fake_smi(tmp_path / "bin", monkeypatch, "gb10-595.58.03")
    assert main([*args, "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "pinmatrix-doctor/1" and doc["exit_status"] == 1
    assert doc["findings"] == ["known issue driver-595.58.03-nvfp4-cutensormap hits this host"]
    assert doc["nvidia_smi"]["gpus"][0] == {"name": "NVIDIA GB10", "driver": "595.58.03", "capability": "12.1",
                                            "arch": "sm_121", "mig": None, "memory_mib": None, "unified_memory": True}
    assert doc["nvidia_smi"]["cuda_driver_api"] == "13.2"
    assert doc["sandbox"]["runtime"] == "sandbox" and isinstance(doc["sandbox"]["can_start"], bool)
    install_fake_smi(tmp_path / "bin2", monkeypatch, "gb10-580.142")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "unified memory" in out and "nothing in the way" in out
    assert "the sandbox runtime (`pinmatrix smoke --runtime sandbox`)" in out


def test_no_gpu_is_one_line_and_exit_3_unless_allowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    no_smi(tmp_path / "empty", monkeypatch)
    args = ["doctor", "--matrix", str(MATRIX), "--known-good", str(project / "known-good.toml"),
            "--results", str(project / "results.sqlite")]
    assert main(args) == 3
    assert capsys.readouterr().out == "no NVIDIA GPU on this host: nvidia-smi is not on PATH\n"
    assert main([*args, "--allow-no-gpu"]) == 0  # the GPU images do not fit, which a CPU host may say
    out = capsys.readouterr().out
    assert "dddddddddddd demo[dddd] (promoted 2026-11-05T00:00:00Z): fits" in out
    assert main([*args, "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["findings"] == ["no NVIDIA GPU on this host: nvidia-smi is not on PATH"]


def test_no_promoted_image_fitting_a_gpu_host_is_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kg = tmp_path / "known-good.toml"
    record_promotion(kg, _entry("cccccccccccc", "2026-11-20T00:00:00Z", stack="h200", arch=("9.0a",), cap="9.0"))
    monkeypatch.setattr(checkup_module, "installed_packages", lambda: {})
    install_fake_smi(tmp_path / "bin", monkeypatch, "gb10-580.142")
    up = run_checkup(DoctorSettings(matrix=tmp_path / "none.toml", matrix_required=False, known_good=kg,
                                    results=tmp_path / "r.sqlite"))
    assert up.findings() == ["none of the 1 promoted images fits this host"] and up.exit_status() == 1
    assert up.matrix and up.matrix.startswith("no ") and up.issues == []
    assert not (tmp_path / "r.sqlite").exists()  # the results store is read, never made


def test_a_package_of_this_python_decides_its_condition(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        project: Path) -> None:
    install_fake_smi(tmp_path / "bin", monkeypatch, "h200-580.159.04")
    monkeypatch.setattr(checkup_module, "installed_packages", lambda: {"xformers": "0.0.30", "vllm": "0.20.0"})
    issues = {i.id: i for i in run_checkup(_settings(project)).issues}
    assert "xformers-0.0.35-c-extension-built-for-cuda-12" not in issues  # 0.0.30 is installed
    assert issues["xformers-tiled-matmul-int32-offsets"].unless == ("without patch xformers-tiled-matmul-int64",)
    assert issues["vllm-0.20.0-flashinfer-moe-fp8-online-fp8-sm90"].unless == ("env=fp8-moe",)


def test_bad_input_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, project: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    install_fake_smi(tmp_path / "bin", monkeypatch, "h200-580.159.04")
    base = ["doctor", "--matrix", str(MATRIX), "--known-good", str(project / "known-good.toml")]
    assert main([*base, "--cell", "no-such-cell"]) == 2
    assert "no-such-cell" in capsys.readouterr().err
    assert main(["doctor", "--matrix", str(tmp_path / "missing.toml")]) == 2
    (tmp_path / "bad.toml").write_text("[[promoted]]\nstack = 1\n")
    assert main(["doctor", "--known-good", str(tmp_path / "bad.toml"), "--matrix", str(MATRIX)]) == 2


def test_a_cell_on_this_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, project: Path) -> None:
    """The 12.0f cell expanded for driver 580.142, on a GB10 under 595.58.03: the host's driver decides; its first
    use comes from a scan of it for sm_121."""
    from pinmatrix.matrix.selection import load

    _, expansion = load(MATRIX)
    cell = next(c for c in expansion.cells if c.stack == "gb10-nvfp4" and c.pins.get("driver") == "580.142"
                and c.pins.get("arch") == "12.0f")
    scan = tmp_path / "arch-scan.json"
    scan.write_text(json.dumps({"schema": "pinmatrix-arch-scan/1", "cells": [{"id": cell.id, "gpu": "sm_121", "packages": [
        {"name": "triton", "version": "3.5.1", "verdict": "no-device-code", "binaries": []}]}]}))
    install_fake_smi(tmp_path / "bin", monkeypatch, "gb10-595.58.03")
    up = run_checkup(_settings(project, cells=(cell.id,), arch_scans=(scan,)))
    (checked,) = up.cells
    assert [i.id for i in checked.issues] == ["driver-595.58.03-nvfp4-cutensormap", "nvfp4-built-for-120f-on-sm121"]
    assert checked.first_use.status == "scanned" and checked.first_use.runtime_compile[0].startswith("triton 3.5.1:")
    assert f"known issue nvfp4-built-for-120f-on-sm121 hits cell {cell.id} on this host" in up.findings()
