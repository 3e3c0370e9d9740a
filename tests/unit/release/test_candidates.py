"""`pull --list/--cell/-k/--pin`: every candidate listed with why it fits or not; the newest that fits the host
and the selection is taken; a selection that names nothing in the record is one line, exit 2, before the host
is probed; `--engine auto` prefers the same engine in pull as in build."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pinmatrix.cli import main
from pinmatrix.project.known_good import record_promotion
from pinmatrix.release.candidates import PinRequirement, Selection, SelectionError, candidates, choose
from pinmatrix.results.store import HostFingerprint

H200 = HostFingerprint.make(hostname="h", gpu_name="NVIDIA H200", gpu_count=1, driver="580.159.04", capability="9.0")
CPU = HostFingerprint.make(hostname="c")


def entry(cell_id: str, when: str, pins: dict[str, str], *, stack: str = "h200", gpu: bool = True) -> dict:
    digest = "sha256:" + cell_id[:1] * 64
    name = f"{stack}[{','.join(f'{k}={v}' for k, v in pins.items())}]"
    return {"stack": stack, "cell_id": cell_id, "cell_name": name, "digest": digest,
            "reference": f"registry.example:5000/pinmatrix/known-good/{stack}@{digest}", "promoted_at": when,
            "gpu_required": gpu, "min_driver": "580.65.06" if gpu else None, "compute_capability": "9.0" if gpu else None,
            "arch_flags": ["9.0a"] if gpu else [], "pins": pins, "policy": {}, "evidence": []}


ENTRIES = [
    entry("aaaaaaaaaaa1", "2026-11-01T00:00:00Z", {"torch": "2.9.1", "xformers": "0.0.35"}),
    entry("bbbbbbbbbbb2", "2026-11-02T00:00:00Z", {"torch": "2.9.1", "xformers": "0.0.35-int64"}),
    entry("ccccccccccc3", "2026-11-03T00:00:00Z", {"torch": "2.10.0", "xformers": "0.0.35"}),
    entry("ddddddddddd4", "2026-11-04T00:00:00Z", {"six": "1.17.0"}, stack="demo", gpu=False),
]


def test_pin_specifiers() -> None:
    assert PinRequirement.parse("torch>=2.9,<2.10").matches("2.9.1")
    assert not PinRequirement.parse("torch>=2.9,<2.10").matches("2.10.0")
    assert PinRequirement.parse("torch==2.9.*").matches("2.9.1")
    assert PinRequirement.parse("six==1.17").matches("1.17.0")  # PEP 440 equality
    assert PinRequirement.parse("xformers==0.0.35-int64").matches("0.0.35-int64")  # not a version: as written
    assert not PinRequirement.parse("xformers==0.0.35-int64").matches("0.0.35")
    assert PinRequirement.parse("driver=590.48.01").matches("590.48.01")
    assert not PinRequirement.parse("xformers>=0.0.30").matches("0.0.35-int64")  # not a version: never >=
    assert not PinRequirement.parse("torch>=2").matches(None)
    for bad in ("torch", ">=2.9", "torch>=two", "x" * 300 + "=1"):
        with pytest.raises(SelectionError):
            PinRequirement.parse(bad)


def test_the_newest_that_fits_host_and_selection() -> None:
    everything = candidates(ENTRIES, H200, Selection())
    assert [c.entry["cell_id"] for c in everything] == ["ddddddddddd4", "ccccccccccc3", "bbbbbbbbbbb2", "aaaaaaaaaaa1"]
    assert choose(everything).entry["cell_id"] == "ddddddddddd4"  # CPU-only cells fit anywhere
    pick = lambda **kw: choose(candidates(ENTRIES, H200, Selection.parse(**kw)))  # noqa: E731
    assert pick(stack="h200").entry["cell_id"] == "ccccccccccc3"
    assert pick(stack="h200", pins=["torch<2.10"]).entry["cell_id"] == "bbbbbbbbbbb2"
    assert pick(stack="h200", pins=["torch<2.10", "xformers=0.0.35"]).entry["cell_id"] == "aaaaaaaaaaa1"
    assert pick(stack="h200", keyword="int64").entry["cell_id"] == "bbbbbbbbbbb2"
    assert pick(stack="h200", keyword="not int64 and torch=2.9").entry["cell_id"] == "aaaaaaaaaaa1"
    assert pick(cells=["aaa"]).entry["cell_id"] == "aaaaaaaaaaa1"
    assert choose(candidates(ENTRIES, CPU, Selection.parse(stack="h200"))) is None  # no GPU here
    found = candidates(ENTRIES, CPU, Selection.parse(stack="h200", pins=["torch>=2.10"]))
    assert found[1].reasons[0] == "torch is 2.9.1, not torch>=2.10" and "GPU" in " ".join(found[0].reasons)


def test_a_selection_that_names_nothing_is_an_error() -> None:
    with pytest.raises(SelectionError, match="no known-good cell 'eee' of stack h200 \\(cells: aaaaaaaaaaa1, "):
        Selection.parse(stack="h200", cells=["eee"]).check_against(ENTRIES, "kg.toml")
    with pytest.raises(SelectionError, match="no known-good cell has axis 'pytorch' \\(axes: torch, xformers\\)"):
        Selection.parse(stack="h200", pins=["pytorch>=2"]).check_against(ENTRIES, "kg.toml")
    with pytest.raises(Exception, match="-k 'int64 and'"):
        Selection.parse(keyword="int64 and")


@pytest.fixture
def known_good(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.chdir(tmp_path)
    kg = tmp_path / "known-good.toml"
    for e in ENTRIES:
        record_promotion(kg, e)
    host = tmp_path / "h200.json"
    host.write_text(json.dumps(H200.to_dict()))
    return kg, host


def test_pull_list(known_good, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    kg, host = known_good
    rc = main(["pull", "--known-good", str(kg), "--host-json", str(host), "--stack", "h200", "--pin", "torch<2.10",
               "--list"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0 and out[0] == f"host: {H200.label()}"
    assert out[1].startswith("   ccccccccccc3  2026-11-03T00:00:00Z") and out[1].endswith(
        "passed over: torch is 2.10.0, not torch<2.10")
    assert out[2].startswith("-> bbbbbbbbbbb2") and out[2].endswith("fits")
    assert out[3].startswith("   aaaaaaaaaaa1") and out[3].endswith("fits")
    rc = main(["pull", "--known-good", str(kg), "--host-json", str(host), "--list", "--json", "-k", "int64"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["chosen"] == "bbbbbbbbbbb2"
    assert [(c["cell"], c["selected"], c["fits_host"], c["chosen"]) for c in data["candidates"]] == [
        ("ddddddddddd4", False, True, False), ("ccccccccccc3", False, True, False),
        ("bbbbbbbbbbb2", True, True, True), ("aaaaaaaaaaa1", False, True, False)]


def test_pull_refuses_what_nothing_fits(known_good, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    kg, host = known_good
    rc = main(["pull", "--known-good", str(kg), "--host-json", str(host), "--stack", "h200", "--pin", "torch>=3",
               "--print"])
    err = capsys.readouterr().err.strip().splitlines()  # a selection of nothing: one line, the host not asked
    assert rc == 2 and err == [f"pinmatrix: error: no known-good cell matches stack h200 and --pin torch>=3 in {kg}"]
    cpu = host.with_name("cpu.json")
    cpu.write_text(json.dumps(CPU.to_dict()))
    rc = main(["pull", "--known-good", str(kg), "--host-json", str(cpu), "--stack", "h200", "--pin", "torch>=2.10",
               "--print"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("pinmatrix: error: no known-good cell of stack h200 and --pin torch>=2.10 "
                                          "runs on this host") and err[-1].endswith("(see `pinmatrix pull --list`)")
    assert "passed over ccccccccccc3" in "\n".join(err)
    rc = main(["pull", "--known-good", str(kg), "--cell", "zzz", "--print"])
    assert rc == 2 and "no known-good cell 'zzz'" in capsys.readouterr().err


def _fake(bin_dir: Path, name: str, out: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\necho '{out}'\n")
    path.chmod(0o755)


def test_engine_auto_prefers_podman_in_pull_and_build(tmp_path: Path) -> None:
    """Both engines usable: `--engine auto` is podman, whichever command asks (one order, engine.AUTO_ORDER)."""
    from pinmatrix.engine import AUTO_ORDER, auto_engine

    for name, out in (("podman", "{}"), ("buildah", "1"), ("docker", "27.0")):
        _fake(tmp_path, name, out)
    env = {"PATH": f"{tmp_path}{os.pathsep}/usr/bin:/bin", "CONTAINERS_STORAGE_CONF": str(tmp_path / "s.conf")}
    assert AUTO_ORDER[0] == "podman" and auto_engine(env).name == "podman"
    (tmp_path / "podman").unlink()
    assert auto_engine(env).name == "docker"
    package = Path(__file__).resolve().parents[3] / "src" / "pinmatrix"
    for name in ("build.py", "pull.py"):  # read, not imported: both must ask the one order
        text = (package / "commands" / name).read_text(encoding="utf-8")
        assert "choose_engine(" in text and "detect_engines(" not in text and "auto_engine(" not in text, name
    select = (package / "engine" / "select.py").read_text(encoding="utf-8")
    assert "return auto_engine(" in select.split("def choose_engine", 1)[1]
