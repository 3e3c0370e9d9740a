"""The drivers a promotion's evidence was gathered on: the results store's host record first, the evidence's host
label else; a label whose driver is no driver version is left out; coverage compares version parts."""

from __future__ import annotations

from pinmatrix.hostprobe import DriverVersion, HostFingerprint
from pinmatrix.release.driver_evidence import DriverCoverage, coverage, evidence_drivers, hosts_by_id

H200 = HostFingerprint.make(hostname="h", gpu_name="NVIDIA H200", gpu_count=1, driver="580.159.04", capability="9.0")


def test_the_store_first_then_the_label() -> None:
    entry = {"evidence": [{"host_id": H200.id, "host": "1x NVIDIA H200 sm_90 driver 999.1"},
                          {"host_id": "gone", "host": "1x NVIDIA GB10 sm_121 driver 590.48.01"},
                          {"host_id": "gone", "host": "1x NVIDIA GB10 sm_121 driver 580.142"},
                          {"host_id": "gone", "host": "1x X sm_90 driver $(reboot)"},
                          {"host_id": "gone", "host": "ci (cpu-only)"}, "not a table"]}
    got = evidence_drivers(entry, hosts_by_id([H200]))
    assert [str(d) for d in got] == ["580.142", "580.159.04", "590.48.01"]  # ordered by number, not text
    assert evidence_drivers({}, {}) == []


def test_coverage_by_version_parts() -> None:
    entry = {"gpu_required": True, "evidence": [{"host_id": "x", "host": "1x G sm_90 driver 580.159.04"}]}
    assert coverage(entry, H200, {}).covered
    same = HostFingerprint.make(hostname="h", gpu_name="G", gpu_count=1, driver="580.159.4", capability="9.0")
    assert coverage(entry, same, {}).covered
    newer = HostFingerprint.make(hostname="h", gpu_name="G", gpu_count=1, driver="580.173.02", capability="9.0")
    c = coverage(entry, newer, {})
    assert not c.covered
    assert c.sentence() == ("this host's driver 580.173.02 is not among the drivers its evidence was gathered on "
                            "(580.159.04)")
    assert DriverCoverage(None, (DriverVersion.parse("580.142"),)).covered is False
    assert DriverCoverage(DriverVersion.parse("580.142"), (), gpu_required=False).covered
    assert coverage({"gpu_required": False}, H200, {}).sentence() == "needs no GPU: the driver does not matter"
