"""``pinmatrix doctor --leak-check`` with a fake child: the measurement is the child's output, read as data (only
its last result line, bounded, typed), judged here: a GB10 that loses MemAvailable with AnonPages and Slab flat
(driver 590.48.01's leak) is a leak and exit status 1; a drop that another process's AnonPages explains is clean;
the real child without torch or cupy is one line and a section that says "not run"."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from fake_smi import install_fake_smi

from pinmatrix.cli import main
from pinmatrix.doctor import checkup as checkup_module
from pinmatrix.doctor import leak_check
from pinmatrix.doctor.leak_check import MAX_LINE, read_report, run_leak_check
from pinmatrix.doctor.leak_probe import RESULT_PREFIX

ROOT = Path(__file__).resolve().parents[3]
MiB = 2**20
BEFORE = {"mem_available": 100_000 * MiB, "anon_pages": 2_000 * MiB, "slab": 500 * MiB, "rss": 900 * MiB,
          "reserved": 0, "allocated": 0, "gpu_used": 1_000 * MiB}


def _report(**after: int) -> dict:
    """A measurement of 12 rounds of 32 MiB; ``after`` gives each sample's change, in MiB."""
    return {"backend": "torch 2.11.0+cu130", "rounds": 12, "buffer_bytes": 32 * MiB, "seconds": 5.01,
            "before": BEFORE, "after": {k: v + after.get(k, 0) * MiB for k, v in BEFORE.items()}}


LEAKING = _report(mem_available=-192, anon_pages=1, slab=0, rss=2)  # 590.48.01: only MemAvailable shows it
CLEAN = _report(mem_available=-40, anon_pages=38, rss=38, slab=1)  # another process's pages, and ours


def _line(doc: dict) -> str:
    return RESULT_PREFIX + json.dumps(doc)


def test_a_drop_nothing_accounts_for_is_a_leak() -> None:
    check = read_report(f"torch warming up\n{_line(LEAKING)}\n", "/usr/bin/python3")
    m = check.measurement
    assert m is not None and check.verdict == "leak"
    assert (m.drop, m.explained, m.unexplained, m.limit) == (192 * MiB, 2 * MiB, 190 * MiB, 16 * MiB)
    assert check.finding() == ("unified-memory leak: MemAvailable fell 192.0 MiB over 12 freed rounds, "
                               "190.0 MiB of it unexplained (limit 16 MiB)")
    assert check.lines()[-1] == "unexplained drop 190.0 MiB (limit 16 MiB): LEAK"
    assert "AnonPages +1.0, Slab +0.0" in check.lines()[1]
    doc = check.to_dict()
    assert (doc["verdict"], doc["unexplained_drop"], doc["backend"]) == ("leak", 190 * MiB, "torch 2.11.0+cu130")


def test_what_accounts_for_a_drop() -> None:
    """RSS and AnonPages hold the same pages (the larger counts, once); Slab and the allocator's reserve count; a
    shrinking counter explains nothing."""
    clean = read_report(_line(CLEAN), "py")
    assert clean.verdict == "clean" and clean.finding() is None
    assert clean.measurement and clean.measurement.unexplained == 1 * MiB  # 40 - 38 - 1
    reserved = read_report(_line(_report(mem_available=-64, reserved=64, allocated=0)), "py")
    assert reserved.verdict == "clean"
    shrunk = read_report(_line(_report(mem_available=-40, rss=-100, anon_pages=-100, slab=-5)), "py")
    assert shrunk.verdict == "leak" and shrunk.measurement and shrunk.measurement.unexplained == 40 * MiB
    at_limit = read_report(_line(_report(mem_available=-16)), "py")
    assert at_limit.verdict == "clean"
    above = read_report(_line(_report(mem_available=-17)), "py")
    assert above.verdict == "leak"


@pytest.mark.parametrize(("stdout", "why"), [
    ("no result here\n", "the child printed no result line"),
    (RESULT_PREFIX + "{" + " " * MAX_LINE + "}", f"the child's result line is over {MAX_LINE} characters"),
    (RESULT_PREFIX + "not json", "the child's result is not a measurement"),
    (_line({**LEAKING, "extra": 1}), "the child's result is not a measurement"),
    (_line({**LEAKING, "rounds": 0}), "the child's result is not a measurement"),
    (_line({**LEAKING, "before": {**BEFORE, "rss": -1}}), "the child's result is not a measurement"),
    (_line({**LEAKING, "before": {**BEFORE, "slab": 2**60}}), "the child's result is not a measurement"),
    (_line({**LEAKING, "backend": "x" * 81}), "the child's result is not a measurement"),
    (_line({"backend": "torch 2.11.0", "rounds": 3}), "the child's result lacks its samples"),
    (_line({"backend": None}), "the leak check needs torch or cupy; neither imports in py"),
    (_line({"backend": None, "why": "RuntimeError: torch 2.11.0 sees no CUDA device"}),
     "the leak check cannot run in py: RuntimeError: torch 2.11.0 sees no CUDA device"),
])
def test_the_childs_output_is_data(stdout: str, why: str) -> None:
    check = read_report(stdout, "py")
    assert check.measurement is None and check.verdict == "not run"
    assert check.why_not is not None and check.why_not.startswith(why)
    assert check.lines() == [f"not run: {check.why_not}"] and check.finding() is None


def _fake_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    child = tmp_path / "fake_probe.py"
    child.write_text("import sys, time\n" + body)
    monkeypatch.setattr(leak_check, "PROBE", child)


def test_the_child_is_run_and_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its seconds arrive as its argument; only the last result line of its output's end counts; a failing or a
    hanging child is 'not run' with why."""
    noise = "x" * 100 + "\n"
    _fake_child(tmp_path, monkeypatch, f"assert sys.argv[1:] == ['0.5'], sys.argv\nprint({_line(CLEAN)!r})\n"
                f"sys.stdout.write({noise!r} * 2000)\nprint({_line(LEAKING)!r})\n")
    assert run_leak_check(sys.executable, 0.5).verdict == "leak"
    _fake_child(tmp_path, monkeypatch, "sys.stderr.write('torch warming up\\nSegmentation fault\\n')\nsys.exit(139)\n")
    assert run_leak_check(sys.executable, 0.5).why_not == "the child exited with status 139: Segmentation fault"
    _fake_child(tmp_path, monkeypatch, "time.sleep(30)\n")
    monkeypatch.setattr(leak_check, "START_S", 0.5)
    assert run_leak_check(sys.executable, 0.1).why_not == "the child did not finish in 1 s"
    assert run_leak_check(str(tmp_path / "no-python"), 0.1).why_not == (
        f"cannot start {tmp_path / 'no-python'}: No such file or directory")


def test_the_real_child_without_torch_or_cupy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"  # whatever this machine has, torch and cupy do not import here
    site.mkdir()
    for name in ("torch", "cupy"):
        (site / f"{name}.py").write_text(f"raise ImportError('no {name} in this test')\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    check = run_leak_check(sys.executable, 0.1)
    assert check.verdict == "not run"
    assert check.why_not == f"the leak check needs torch or cupy; neither imports in {sys.executable}"


@pytest.fixture
def gb10(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A GB10 under 580.142 with nothing else in the way (no issue hits it, no promoted image): the command's arguments."""
    install_fake_smi(tmp_path / "bin", monkeypatch, "gb10-580.142")
    monkeypatch.setattr(checkup_module, "installed_packages", lambda: {})
    return ["doctor", "--matrix", str(ROOT / "matrix.toml"), "--known-good", str(tmp_path / "kg.toml"),
            "--results", str(tmp_path / "r.sqlite")]


@pytest.mark.parametrize(("child", "status", "verdict"), [(LEAKING, 1, "leak"), (CLEAN, 0, "clean")])
def test_the_exit_status_and_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gb10: list[str],
                                  capsys: pytest.CaptureFixture[str], child: dict, status: int, verdict: str) -> None:
    _fake_child(tmp_path, monkeypatch, f"print({_line(child)!r})\n")
    assert main(gb10) == 0 and "leak check" not in capsys.readouterr().out  # only on request
    assert main([*gb10, "--leak-check", "--leak-seconds", "2", "--json"]) == status
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_status"] == status and doc["leak_check"]["verdict"] == verdict
    assert doc["leak_check"]["python"] == sys.executable and doc["leak_check"]["rounds"] == 12
    assert [f for f in doc["findings"] if f.startswith("unified-memory leak")] == (
        ["unified-memory leak: MemAvailable fell 192.0 MiB over 12 freed rounds, 190.0 MiB of it unexplained "
         "(limit 16 MiB)"] if status else [])
    assert main([*gb10, "--leak-check"]) == status
    out = capsys.readouterr().out
    assert f"Unified-memory leak check ({verdict}):" in out
    assert f"  torch 2.11.0+cu130 in {sys.executable}: 12 rounds of 32 MiB (allocator and managed) in 5.0 s" in out


def test_no_torch_is_one_line_and_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gb10: list[str],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    site = tmp_path / "site"
    site.mkdir()
    for name in ("torch", "cupy"):
        (site / f"{name}.py").write_text("raise ImportError\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    assert main([*gb10, "--leak-check", "--leak-seconds", "0.2"]) == 0
    out = capsys.readouterr().out.splitlines()
    at = out.index("Unified-memory leak check (not run):")
    assert out[at + 1] == f"  not run: the leak check needs torch or cupy; neither imports in {sys.executable}"
    assert out[at + 2].startswith("doctor: exit status 0 (nothing in the way)")


@pytest.mark.parametrize("seconds", ["0", "-1", "301", "soon"])
def test_leak_seconds_out_of_range_is_bad_input(gb10: list[str], seconds: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main([*gb10, "--leak-check", "--leak-seconds", seconds])
    assert stop.value.code == 2 and "--leak-seconds" in capsys.readouterr().err
