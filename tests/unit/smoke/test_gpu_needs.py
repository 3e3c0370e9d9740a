"""A smoke's GPU needs: decided by the runner from its host probe before any process starts where the probe can
tell (smoke/gpu_needs.py), and again inside the smoke (shipped/_smokelib.py, standard library only): both the same."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import pytest

from pinmatrix.project.catalogue import load_catalogue
from pinmatrix.project.smoke_bundle import shipped_dir
from pinmatrix.results.store import HostFingerprint, ResultsStore
from pinmatrix.smoke.cellrun import run_cell
from pinmatrix.smoke.gpu_needs import no_native_fp4, unmet_need
from pinmatrix.smoke.runner import HostCell, RunOptions

MODULE = '''
import os, pathlib
from _smokelib import Context, main

pathlib.Path(os.environ["PMTEST_MARKER_DIR"], "started").touch()  # the process ran

SMOKES = {"needs-hopper": {"func": "run", "description": "needs sm_90 or newer", "timeout_s": 60,
                           "needs": {"gpu": True, "min_capability": "9.0"}},
          "needs-fp4": {"func": "run", "description": "needs FP4 tensor cores", "timeout_s": 60,
                        "needs": {"gpu": True, "native_fp4": True}},
          "needs-two": {"func": "run", "description": "needs two GPUs", "timeout_s": 60,
                        "needs": {"gpu": True, "gpus": 2}},
          "cpu": {"func": "run", "description": "needs nothing", "timeout_s": 60}}


def run(ctx: Context) -> None:
    ctx.summary = "ran"


if __name__ == "__main__":
    main(SMOKES, globals())
'''


@pytest.mark.parametrize(("needs", "count", "cap", "reason"), [
    ({}, 0, "0.0", "no GPU"),
    ({"gpus": 2}, 1, "9.0", "needs 2 GPUs, 1 visible"),
    ({"gpus": 2}, 2, "9.0", None),
    ({"min_capability": "9.0"}, 1, "8.9", "needs compute capability >= 9.0, device is 8.9"),
    ({"min_capability": "9.0"}, 1, "9.0", None),
    ({"max_capability": "9.0"}, 1, "10.0", "needs compute capability <= 9.0, device is 10.0"),
    ({"max_capability": "12.0"}, 1, "12.1", "needs compute capability <= 12.0, device is 12.1"),
    ({"native_fp4": True}, 1, "9.0", "no native FP4 tensor-core instructions on sm_90 (needs sm_100/sm_103/"
                                     "sm_110 or sm_120a/sm_121a)"),
    ({"native_fp4": True}, 1, "10.0", None),
    ({"native_fp4": True}, 1, "12.1", None),
    ({"native_fp4": False}, 1, "8.0", None),
])
def test_unmet_need(needs: dict[str, object], count: int, cap: str, reason: str | None) -> None:
    assert unmet_need(needs, count, cap) == reason


def _shipped() -> object:
    spec = importlib.util.spec_from_file_location("_smokelib_under_test", shipped_dir() / "_smokelib.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_runner_and_the_smoke_judge_every_need_alike() -> None:
    shipped = _shipped()
    needs_grid: list[dict[str, object]] = [{}, {"gpus": 2}, {"min_capability": "9.0"}, {"min_capability": "12.1"}, {"max_capability": "9.0"},
                  {"native_fp4": True}, {"memory_gib": 80}, {"gpus": 2, "native_fp4": True, "min_capability": "10.0"}]
    checked = 0
    for needs, count, cap, memory in itertools.product(needs_grid, (0, 1, 2, 8), ("8.0", "8.9", "9.0", "10.0",
                                                                                    "10.3", "12.0", "12.1"),
                                                       (None, 40.0, 141.0)):
        assert unmet_need(needs, count, cap, memory) == shipped.unmet_need(needs, count, cap, memory), (  # type: ignore[attr-defined]
            needs, count, cap, memory)
        checked += 1
    assert checked == 8 * 4 * 7 * 3


def test_memory_is_checked_only_where_it_is_known() -> None:
    assert unmet_need({"memory_gib": 80}, 1, "9.0") is None
    assert unmet_need({"memory_gib": 80}, 1, "9.0", 79.5) == "needs 80 GiB of GPU memory, device has 79.5"
    assert unmet_need({"memory_gib": 80}, 1, "9.0", 80.0) is None


def test_fp4_starts_at_sm_100() -> None:
    assert no_native_fp4("9.0") and no_native_fp4("8.9")
    assert no_native_fp4("10.0") is None and no_native_fp4("10.3") is None and no_native_fp4("12.0") is None


def _run(tmp_path: Path, host: HostFingerprint, monkeypatch: pytest.MonkeyPatch, smoke: str) -> tuple[object, bool]:
    smokes = tmp_path / "smoke"
    smokes.mkdir(exist_ok=True)
    (smokes / "needy.py").write_text(MODULE)
    marker = tmp_path / f"marker-{smoke}-{host.id}"
    marker.mkdir()
    monkeypatch.setenv("PMTEST_MARKER_DIR", str(marker))
    options = RunOptions(smoke_dir=smokes, keyword=smoke, rerun=True, logs_dir=tmp_path / "logs")
    run = run_cell(HostCell(), load_catalogue(smokes), ResultsStore(tmp_path / "r.sqlite"), options, host=host,
                   run_id=f"t-{smoke}-{host.id}", echo=lambda _line: None)
    (record,) = run.records
    return record, (marker / "started").exists()


HOPPER = HostFingerprint.make(hostname="h", gpu_name="NVIDIA H200", gpu_count=1, driver="580.159.04",
                              capability="9.0")
AMPERE = HostFingerprint.make(hostname="a", gpu_name="NVIDIA A100", gpu_count=1, driver="580.159.04",
                              capability="8.0")
NO_GPU = HostFingerprint.make(hostname="c")


@pytest.mark.parametrize(("smoke", "host", "reason"), [
    ("needs-fp4", HOPPER, "no native FP4 tensor-core instructions on sm_90"),
    ("needs-hopper", AMPERE, "needs compute capability >= 9.0, device is 8.0"),
    ("needs-two", HOPPER, "needs 2 GPUs, 1 visible"),
])
def test_a_need_the_hosts_gpu_cannot_meet_is_a_skip_without_a_process(tmp_path: Path, smoke: str,
                                                                       host: HostFingerprint, reason: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    record, started = _run(tmp_path, host, monkeypatch, smoke)
    assert not started
    assert record.status == "skip" and record.reason.startswith(reason)  # type: ignore[attr-defined]
    assert record.reason.endswith("(decided from the host's GPU before starting the smoke)")  # type: ignore[attr-defined]
    assert record.environment == {"decided_by": "host-probe"} and record.duration_s == 0.0  # type: ignore[attr-defined]
    assert Path(record.log_path).read_text().startswith(f"[{smoke}] skip: {reason}")  # type: ignore[attr-defined]


@pytest.mark.parametrize(("smoke", "host"), [
    ("needs-hopper", HOPPER),  # met: the smoke runs (and, with no GPU here, skips inside)
    ("needs-fp4", NO_GPU),  # the probe saw no GPU: the smoke's own driver check decides
    ("cpu", AMPERE),  # no GPU need at all
])
def test_a_need_the_probe_cannot_rule_out_starts_the_smoke(tmp_path: Path, smoke: str, host: HostFingerprint,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    record, started = _run(tmp_path, host, monkeypatch, smoke)
    assert started
    assert record.environment.get("decided_by") is None  # type: ignore[attr-defined]
