"""The host probe: nvidia-smi's rows and banner parsed into typed GPUs (driver version, capability, MIG, memory
or unified memory), replayed from recorded and written output, and every outside value bounded."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
from fake_smi import SMI_DATA, install_fake_smi, no_smi

from pinmatrix.errors import PinmatrixError
from pinmatrix.hostprobe import (
    QUERY_ARGS,
    DriverVersion,
    DriverVersionError,
    Gpu,
    HostFingerprint,
    check_driver_spec,
    parse_cuda_version,
    parse_gpu_query,
    probe,
)
from pinmatrix.results import store


def test_the_results_store_keeps_its_host_record() -> None:
    assert store.HostFingerprint is HostFingerprint


# ------------------------------------------------------------------------------------------ driver versions


@pytest.mark.parametrize(("text", "parts"), [("580.159.04", (580, 159, 4)), ("580.142", (580, 142, None)),
                                             ("590.48.01", (590, 48, 1)), ("595", (595, None, None)),
                                             (" 595.58.03\n", (595, 58, 3))])
def test_a_driver_version_is_parsed_into_its_parts(text: str, parts: tuple[int, ...]) -> None:
    v = DriverVersion.parse(text)
    assert (v.major, v.minor, v.patch) == parts
    assert str(v) == text.strip()  # '04' kept: results are keyed by the text


@pytest.mark.parametrize("hostile", [
    "", "580.159.04; rm -rf /", "$(reboot)", "../../etc/passwd", "/usr/lib/x86_64-linux-gnu", "580.159.04\n590",
    "580 159", "580.159.04.1.2", "1" * 25, "5" * 5, "580.\x1b[31m", "５８０.142", "-580", "580..1", "580.1a", "%s%n",
    "\u202e580", ".580",
])
def test_a_driver_version_refuses_anything_but_digits_and_dots(hostile: str) -> None:
    with pytest.raises(DriverVersionError, match="is not a driver version") as err:
        DriverVersion.parse(hostile)
    assert isinstance(err.value, PinmatrixError) and "\n" not in str(err.value)
    assert len(str(err.value)) < 120  # a long value is cut, not echoed whole


def test_a_driver_version_that_is_no_string_is_refused() -> None:
    for value in (580, None, ["580"], 580.1):
        with pytest.raises(DriverVersionError):
            DriverVersion.parse(value)


def test_driver_versions_order_by_number_not_text() -> None:
    assert DriverVersion.parse("580.159.04").key < DriverVersion.parse("580.159.10").key
    assert DriverVersion.parse("580.142").key < DriverVersion.parse("580.159.04").key
    assert DriverVersion.parse("590.48.01").key > DriverVersion.parse("580.173.02").key
    assert DriverVersion.parse("580").key == (580, 0, 0, 0)


@pytest.mark.parametrize(("version", "spec", "hit"), [
    ("590.48.01", "590.48.01", True), ("590.48.01", "590.48.1", True), ("590.48.01", "590.48.02", False),
    ("590.48.01", ">=590,<595", True), ("595.58.03", ">=590,<595", False), ("595.58.03", "==595.*", True),
    ("580.142", ">=580.142", True), ("580.126", ">=580.142", False), ("580.159.04", "!=580.159.04", False),
])
def test_a_driver_is_matched_against_a_version_or_a_range(version: str, spec: str, hit: bool) -> None:
    assert DriverVersion.parse(version).matches(spec) is hit


@pytest.mark.parametrize("bad", ["", ">=580; true", "latest", ">=580,<", "=>580", "x" * 200, "580.1.2.3.4.5",
                                 "~=580"])
def test_a_driver_range_that_is_none_is_refused(bad: str) -> None:
    with pytest.raises(DriverVersionError):
        check_driver_spec(bad)


def test_a_fingerprint_refuses_a_hostile_driver_and_reads_an_empty_one_as_none() -> None:
    with pytest.raises(DriverVersionError):
        HostFingerprint.make(hostname="h", gpu_name="G", gpu_count=1, driver="580`id`")
    with pytest.raises(DriverVersionError):
        HostFingerprint.from_dict({"id": "x", "driver": "../../580"})
    assert HostFingerprint.from_dict({"id": "x", "driver": ""}).driver is None
    assert HostFingerprint.make(hostname="h", gpu_count=1, driver="590.48.01").driver_version == \
        DriverVersion.parse("590.48.01")


# ------------------------------------------------------------------------------------------ nvidia-smi output


def test_gpu_query_parsing_on_recorded_h200_output() -> None:
    one = (SMI_DATA / "h200-query.csv").read_text()  # recorded by results/h200/oracles/run.sh
    h200 = Gpu("NVIDIA H200", DriverVersion.parse("580.159.04"), "9.0")
    assert parse_gpu_query(one) == [h200]
    two = (SMI_DATA / "h200-x2-query.csv").read_text()  # two GPUs, with memory.total (results/h200/x2/log.txt)
    assert [(g.name, g.memory_mib, g.unified_memory) for g in parse_gpu_query(two)] == [
        ("NVIDIA H200", None, False)] * 2  # the memory is the 4th field only in pinmatrix's own query
    assert parse_gpu_query("No devices were found\n") == []


def test_the_full_query_reads_mig_and_memory_and_a_gb10_has_unified_memory() -> None:
    (h200,) = parse_gpu_query((SMI_DATA / "h200-580.159.04-query.csv").read_text())
    assert (h200.mig, h200.memory_mib, h200.unified_memory, h200.arch) == ("Disabled", 143771, False, "sm_90")
    (gb10,) = parse_gpu_query((SMI_DATA / "gb10-590.48.01-query.csv").read_text())
    assert (gb10.capability, gb10.arch, gb10.mig, gb10.memory_mib, gb10.unified_memory) == (
        "12.1", "sm_121", None, None, True)
    (mig,) = parse_gpu_query("NVIDIA H200, 580.159.04, 9.0, Enabled, 143771 MiB\n")
    assert mig.mig == "Enabled"


def test_a_hostile_row_keeps_the_gpu_and_says_what_was_refused() -> None:
    problems: list[str] = []
    (gpu,) = parse_gpu_query("NVIDIA \x1b[2J H200$(id), 580.159.04;reboot, 9.0; rm, Maybe, lots MiB\n", problems)
    assert gpu.driver is None and gpu.capability is None and gpu.mig is None and gpu.memory_mib is None
    assert gpu.name == "NVIDIA ??2J H200?(id)"
    assert len(problems) == 1 and "is not a driver version" in problems[0] and "\n" not in problems[0]
    (long,) = parse_gpu_query("A" * 500 + ", 580.142, 12.1\n")
    assert len(long.name) == 96


def test_cuda_version_from_the_banner() -> None:
    assert parse_cuda_version((SMI_DATA / "h200-banner.txt").read_text()) == "13.0"
    assert parse_cuda_version((SMI_DATA / "gb10-595.58.03-banner.txt").read_text()) == "13.2"
    assert parse_cuda_version("NVIDIA-SMI has failed because it couldn't communicate with the driver") is None
    assert parse_cuda_version("CUDA Version: $(id)") is None
    assert parse_cuda_version("CUDA Version:") is None


# ------------------------------------------------------------------------------------------ probing a host


@pytest.mark.parametrize(("host", "driver", "cap", "cuda", "unified"), [
    ("gb10-580.142", "580.142", "12.1", "13.0", True), ("gb10-590.48.01", "590.48.01", "12.1", "13.1", True),
    ("gb10-595.58.03", "595.58.03", "12.1", "13.2", True), ("h200-580.159.04", "580.159.04", "9.0", "13.0", False),
])
def test_a_host_probed_through_a_fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str,
                                                 driver: str, cap: str, cuda: str, unified: bool) -> None:
    exe = install_fake_smi(tmp_path / "bin", monkeypatch, host)
    found = probe()
    assert found.nvidia_smi == str(exe) and found.problems == ()
    assert (str(found.driver), found.capabilities, found.cuda_driver_api) == (driver, [cap], cuda)
    assert found.gpus[0].unified_memory is unified
    fp = found.fingerprint(hostname="n")
    assert (fp.driver, fp.capability, fp.gpu_count, fp.cuda_driver_api) == (driver, cap, 1, cuda)


def test_the_h200_keeps_the_id_its_results_were_recorded_under(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_smi(tmp_path / "bin", monkeypatch, "h200-580.159.04")
    host = HostFingerprint.detect()
    assert host.label() == "1x NVIDIA H200 sm_90 driver 580.159.04"
    assert host.id == "054435737e54"  # results/h200/README.md: host 054435737e54


def test_the_query_asks_for_mig_and_memory() -> None:
    assert QUERY_ARGS == ("--query-gpu=name,driver_version,compute_cap,mig.mode.current,memory.total",
                          "--format=csv,noheader")


def test_no_nvidia_smi_and_a_failing_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    no_smi(tmp_path / "empty", monkeypatch)
    found = probe()
    assert (found.gpus, found.nvidia_smi, found.problems) == ((), None, ())
    assert found.fingerprint(hostname="c").is_cpu_only
    install_fake_smi(tmp_path / "bin", monkeypatch, query=None, banner=(SMI_DATA / "h200-banner.txt").read_text())
    found = probe()
    assert found.gpus == () and found.cuda_driver_api == "13.0"  # the banner still counts
    assert found.problems and "failed or timed out" in found.problems[0]


def test_a_hanging_nvidia_smi_is_given_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = tmp_path / "nvidia-smi"
    exe.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(30)\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    found = probe(timeout=0.5)
    assert found.gpus == () and found.cuda_driver_api is None
