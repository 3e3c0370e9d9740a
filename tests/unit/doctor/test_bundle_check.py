"""`doctor --bundle DIR`: the manifest against this host before anything is unpacked: machine and glibc, Python,
the parts at their sizes, the cell's driver floor and arch; a folder that is no bundle is exit status 2."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import pytest
from fake_smi import install_fake_smi

from pinmatrix.cli import main
from pinmatrix.doctor.bundle_check import BundleCheckError, check_bundle, host_glibc, read_manifest
from pinmatrix.hostprobe import HostFingerprint

H200 = HostFingerprint.make(hostname="h", gpu_name="NVIDIA H200", gpu_count=1, driver="580.159.04", capability="9.0")
GB10 = HostFingerprint.make(hostname="s", gpu_name="NVIDIA GB10", gpu_count=1, driver="580.142", capability="12.1")
HERE = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}[platform.machine().lower()]
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


def bundle(folder: Path, *, machine: str = HERE, glibc: int = 17, python: str = PY, parts: int = 1) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = b"x" * 10
    (folder / "part-001-of-001.bin").write_bytes(data[:parts * 10])
    manifest = {"kind": "wheels", "pinmatrix_version": "0.1.0", "cell_id": "cccccccccccc", "lock_sha256": "0" * 64,
                "python": python, "platform": f"{machine}-manylinux_2_{glibc}",
                "wheels": [{"name": "six", "version": "1.17.0", "filename": "six-1.17.0-py2.py3-none-any.whl",
                            "size": 10, "sha256": "1" * 64, "offset": 0}],
                "part_size": 10, "total_size": 10, "parts": [{"name": "part-001-of-001.bin", "size": 10,
                                                               "sha256": "2" * 64}]}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


ENTRY = {"cell_id": "cccccccccccc", "gpu_required": True, "min_driver": "580.65.06", "compute_capability": "9.0",
         "arch_flags": ["9.0a"]}


def test_a_bundle_that_fits_and_one_that_does_not(tmp_path: Path) -> None:
    ok = check_bundle(bundle(tmp_path / "ok"), H200, [ENTRY])
    assert ok.fits, ok.checks
    assert ("driver and arch", True) == ok.checks[-1][:2] and "known-good.toml" in ok.checks[-1][2]
    assert not check_bundle(bundle(tmp_path / "ok"), GB10, [ENTRY]).fits  # 9.0a does not run on 12.1
    other = "aarch64" if HERE == "x86_64" else "x86_64"
    assert not check_bundle(bundle(tmp_path / "arm", machine=other), H200, [ENTRY]).fits
    assert not check_bundle(bundle(tmp_path / "py", python="3.9"), H200, [ENTRY]).fits
    short = bundle(tmp_path / "short")
    (short / "part-001-of-001.bin").write_bytes(b"xx")
    parts = dict((w, (o, t)) for w, o, t in check_bundle(short, H200, [ENTRY]).checks)["parts"]
    assert parts == (False, "0 of 1 parts present at their recorded size (missing or short: part-001-of-001.bin)")
    unknown = check_bundle(bundle(tmp_path / "u"), H200, [])
    assert unknown.fits and unknown.checks[-1][1] is None  # not known here: said, not failed


def test_glibc_too_old() -> None:
    have = host_glibc()
    if have is None:
        pytest.skip("this Python names no glibc")
    assert have >= (2, 17)


def test_a_folder_that_is_no_bundle(tmp_path: Path) -> None:
    with pytest.raises(BundleCheckError, match="cannot read the bundle manifest"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text('{"kind": "wheels", "format": "../../etc"}')
    with pytest.raises(BundleCheckError, match="not a pinmatrix bundle manifest"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_bytes(b"{" * (5 << 20))
    with pytest.raises(BundleCheckError, match="larger than"):
        read_manifest(tmp_path)


def test_the_command_gates_on_the_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    install_fake_smi(tmp_path / "bin", monkeypatch, "gb10-580.142")
    args = ["doctor", "--matrix", str(tmp_path / "none.toml"), "--known-good", str(tmp_path / "kg.toml")]
    monkeypatch.chdir(tmp_path)
    assert main([*args[:1], "--bundle", str(bundle(tmp_path / "b", glibc=999))]) == 1
    assert "needs glibc >= 2.999" in capsys.readouterr().out
    (tmp_path / "nob").mkdir()
    assert main([*args[:1], "--bundle", str(tmp_path / "nob")]) == 2


def test_without_a_promotion_the_matrix_cell_gives_the_requirements(tmp_path: Path) -> None:
    from report_data import make_cell

    cell = make_cell("cccccccccccc", "h200", {"gpu": "sm_90"}, arch_flags=("9.0a",), min_driver="590.44.01")
    check = check_bundle(bundle(tmp_path / "b"), H200, [], [cell])
    assert check.checks[-1] == ("driver and arch", False, "needs driver >= 590.44.01, the host has 580.159.04 "
                                                          "(requirements from the matrix)")
