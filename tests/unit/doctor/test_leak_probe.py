"""The leak check's child (leak_probe.py) without a GPU: /proc's fields read in bytes, the rounds run for the
seconds asked (a warm-up first, at least three), its result line the parent reads back as a measurement, and the
line it prints when no library can run the rounds."""

from __future__ import annotations

import json

import pytest

from pinmatrix.doctor import leak_probe
from pinmatrix.doctor.leak_check import read_report
from pinmatrix.doctor.leak_probe import BUFFER, MIN_ROUNDS, RESULT_PREFIX, measure, meminfo, rss

MEMINFO = ("MemTotal:       131072000 kB\nMemFree:         1000 kB\nMemAvailable:   102400000 kB\n"
           "AnonPages:       2048000 kB\nSlab:             512000 kB\nHugePages_Total:       0\n")


def test_proc_fields_in_bytes() -> None:
    assert meminfo(MEMINFO) == {"mem_available": 102400000 * 1024, "anon_pages": 2048000 * 1024,
                                "slab": 512000 * 1024}
    assert rss("Name:\tpython3\nVmPeak:\t  9000 kB\nVmRSS:\t  4321 kB\n") == 4321 * 1024
    assert rss("Name:\tkthreadd\n") == 0


class FakeLibrary:
    """A library whose rounds leak ``leak`` bytes of MemAvailable each (what 590.48.01 did), on a clock that
    moves one second a round."""

    name = "fake 1.0"

    def __init__(self, leak: int) -> None:
        self.leak, self.rounds, self.now = leak, 0, 0.0

    def round(self) -> None:
        self.rounds += 1
        self.now += 1.0

    def accounting(self) -> dict[str, int]:
        return {"reserved": 0, "allocated": 0, "gpu_used": 0}


@pytest.fixture
def proc(monkeypatch: pytest.MonkeyPatch) -> list[FakeLibrary]:
    """/proc as the fake library leaves it: MemAvailable lower by its leak per round, nothing else moves."""
    libs: list[FakeLibrary] = []

    def fake_sample(lib: FakeLibrary) -> dict[str, int]:
        libs.append(lib)
        return {"mem_available": 10**11 - lib.leak * lib.rounds, "anon_pages": 10**9, "slab": 10**8, "rss": 10**9,
                **lib.accounting()}

    monkeypatch.setattr(leak_probe, "sample", fake_sample)
    return libs


@pytest.mark.parametrize(("seconds", "rounds"), [(0.0, MIN_ROUNDS), (7.0, 7)])
def test_rounds_for_the_seconds_asked(proc: list[FakeLibrary], seconds: float, rounds: int) -> None:
    lib = FakeLibrary(leak=BUFFER)
    out = measure(lib, seconds, clock=lambda: lib.now)
    assert out["rounds"] == rounds and lib.rounds == rounds + 1  # the warm-up is not counted
    assert out["seconds"] == rounds and out["buffer_bytes"] == BUFFER and out["backend"] == "fake 1.0"
    check = read_report(RESULT_PREFIX + json.dumps(out), "py")
    assert check.verdict == "leak" and check.measurement and check.measurement.unexplained == rounds * BUFFER


def test_a_clean_library_reads_back_clean(proc: list[FakeLibrary]) -> None:
    lib = FakeLibrary(leak=0)
    out = measure(lib, 2.0, clock=lambda: lib.now)
    assert read_report(RESULT_PREFIX + json.dumps(out), "py").verdict == "clean"


def test_no_library_is_one_result_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(leak_probe, "backend", lambda: None)
    assert leak_probe.main(["leak_probe.py", "1"]) == 0
    assert capsys.readouterr().out == RESULT_PREFIX + '{"backend": null}\n'

    def broken() -> None:
        raise RuntimeError("torch 2.11.0 sees no CUDA device")

    monkeypatch.setattr(leak_probe, "backend", broken)
    assert leak_probe.main(["leak_probe.py", "1"]) == 0
    line = capsys.readouterr().out
    assert json.loads(line.removeprefix(RESULT_PREFIX)) == {
        "backend": None, "why": "RuntimeError: torch 2.11.0 sees no CUDA device"}
