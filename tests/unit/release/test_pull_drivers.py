"""`pull` and the drivers a promotion's evidence covers: a host whose driver is not among them gets a warning, or,
under the entry's policy uncovered_driver = "refuse", the image is passed over."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pinmatrix.cli import main
from pinmatrix.hostprobe import HostFingerprint
from pinmatrix.project.known_good import record_promotion
from pinmatrix.release.hostmatch import judge

GB10_580 = HostFingerprint.make(hostname="s", gpu_name="NVIDIA GB10", gpu_count=1, driver="580.142", capability="12.1")
GB10_590 = HostFingerprint.make(hostname="s", gpu_name="NVIDIA GB10", gpu_count=1, driver="590.48.01", capability="12.1")


def _entry(policy: dict, registry: str = "127.0.0.1:5000") -> dict:
    digest = "sha256:" + "b" * 64
    return {"stack": "gb10-nvfp4", "cell_id": "bbbbbbbbbbbb", "cell_name": "gb10-nvfp4[arch=12.1a]", "digest": digest,
            "reference": f"{registry}/pinmatrix/known-good/gb10-nvfp4@{digest}", "promoted_at": "2026-11-10T00:00:00Z",
            "gpu_required": True, "min_driver": "580.65.06", "compute_capability": "12.1", "arch_flags": ["12.1a"],
            "pins": {}, "policy": policy,
            "evidence": [{"smoke": "torch-gemm", "host_id": "0123456789ab", "host": GB10_580.label()}]}


def test_the_policy_decides_warning_or_refusal() -> None:
    (covered,) = judge([_entry({})], GB10_580)
    assert covered.ok and covered.driver_warning is None
    (warned,) = judge([_entry({"uncovered_driver": "warn"})], GB10_590)
    assert warned.ok and warned.driver_warning == (
        "warning: this host's driver 590.48.01 is not among the drivers its evidence was gathered on (580.142)")
    assert warned.reasons[-1] == warned.driver_warning
    (refused,) = judge([_entry({"uncovered_driver": "refuse"})], GB10_590)
    assert not refused.ok and "refuses such a host" in refused.reasons[0]
    (stored,) = judge([_entry({"uncovered_driver": "refuse"})], GB10_590, hosts={"0123456789ab": GB10_590})
    assert stored.ok  # the results store's record of that host says 590.48.01


@pytest.fixture(autouse=True)
def _no_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No trusted key here (no project, no PINMATRIX_TRUSTED_KEYS): verification stops before any registry."""
    monkeypatch.delenv("PINMATRIX_TRUSTED_KEYS", raising=False)
    monkeypatch.chdir(tmp_path)


def _cli(tmp_path: Path, policy: dict, host: HostFingerprint, *extra: str) -> int:
    kg = tmp_path / "known-good.toml"
    kg.unlink(missing_ok=True)
    record_promotion(kg, _entry(policy, registry="registry.example:5000"))
    hj = tmp_path / "host.json"
    hj.write_text(json.dumps(host.to_dict()))
    return main(["pull", "--known-good", str(kg), "--host-json", str(hj), *extra])


def test_pull_warns_on_stderr_and_the_list_says_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(tmp_path, {}, GB10_590, "--list", "--json") == 0
    (cand,) = json.loads(capsys.readouterr().out)["candidates"]
    assert cand["fits_host"] and cand["reasons"][-1].startswith("warning: this host's driver 590.48.01")
    assert _cli(tmp_path, {}, GB10_590, "--print", "--quiet") == 2  # no key to verify with ...
    err = capsys.readouterr().err
    assert "warning: this host's driver 590.48.01 is not among" in err  # ... the warning came first, even quiet
    assert "no trusted public key" in err


def test_pull_refuses_under_the_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(tmp_path, {"uncovered_driver": "refuse"}, GB10_590, "--print") == 2
    err = capsys.readouterr().err
    assert "no known-good cell runs on this host" in err and "uncovered_driver" in err
    assert _cli(tmp_path, {"uncovered_driver": "refuse"}, GB10_580, "--list") == 0
    assert "-> bbbbbbbbbbbb" in capsys.readouterr().out


def test_a_host_file_with_a_hostile_driver_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kg = tmp_path / "known-good.toml"
    record_promotion(kg, _entry({}, registry="registry.example:5000"))
    hj = tmp_path / "host.json"
    hj.write_text(json.dumps({**GB10_590.to_dict(), "driver": "590.48.01; reboot"}))
    assert main(["pull", "--known-good", str(kg), "--host-json", str(hj), "--list"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"pinmatrix: error: {hj}: not a host fingerprint: driver version")
