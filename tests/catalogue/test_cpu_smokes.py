"""The real smoke modules that need no GPU, run through the runner on this machine: python-imports against
pins (match, mismatch, missing) and arch-coverage on fatbins laid out like nvcc's (present / missing target)."""

from __future__ import annotations

import importlib.metadata as md
import struct
from pathlib import Path

import pytest

from pinmatrix.results.store import HostFingerprint, ResultsStore
from pinmatrix.smoke.cellrun import run_cells
from pinmatrix.smoke.runner import HostCell, RunOptions

ROOT = Path(__file__).resolve().parents[2]
HOST = HostFingerprint.make(hostname="t")


def run(tmp_path: Path, cell: HostCell) -> dict:
    store = ResultsStore(tmp_path / "r.sqlite")
    opts = RunOptions(smoke_dir=ROOT / "smoke", logs_dir=tmp_path / "logs", repo_root=ROOT)
    runs = run_cells([cell], store, opts, host=HOST, echo=lambda _s: None)
    return {r.smoke: r for r in runs[0].records}


def test_python_imports_checks_pins_and_imports(tmp_path: Path) -> None:
    packaging = md.version("packaging")
    good = HostCell(id="aaaaaaaaaaa1", smokes=("python-imports",),
                    requirements=(f"packaging=={packaging}", f"jinja2=={md.version('jinja2')}"))
    rec = run(tmp_path / "good", good)["python-imports"]
    assert rec.status == "pass", rec.reason
    assert rec.metrics["modules_imported"] >= 2 and "import_s.packaging" in rec.metrics

    bad = HostCell(id="aaaaaaaaaaa2", smokes=("python-imports",),
                   requirements=("packaging==0.0.1", "no-such-dist-pinmatrix==1.0"))
    rec = run(tmp_path / "bad", bad)["python-imports"]
    assert rec.status == "fail" and rec.failure_class == "missing-package"
    assert f"packaging is {packaging}, the cell pins 0.0.1" in rec.reason
    assert "no-such-dist-pinmatrix is not installed" in rec.reason


def _fatbin(archs: list[int]) -> bytes:
    body = b""
    for arch in archs:
        payload = b"\x28\xb5\x2f\xfd" + b"\x00" * 4
        head = struct.pack("<HHIIIIIII", 2, 0x0101, 64, len(payload), 0, len(payload), 0, 0, arch)
        body += head.ljust(64, b"\x00") + payload
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


@pytest.mark.parametrize(("archs", "status"), [([90, 121], "pass"), ([90, 120], "fail")])
def test_arch_coverage_names_the_module_missing_the_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           archs: list[int], status: str) -> None:
    lib = tmp_path / "libcellbuilt.so"
    lib.write_bytes(b"\x7fELF" + b"\x00" * 100 + _fatbin(archs) + b"\x00" * 16)
    monkeypatch.setenv("PINMATRIX_ARCH_BINARIES", str(lib))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # the fatbin parser, not a cuobjdump that may be around
    monkeypatch.setenv("PINMATRIX_CUOBJDUMP", "")  # nor the one the runner would take from pinmatrix's cache
    cell = HostCell(id="aaaaaaaaaaa3", smokes=("arch-coverage",), arch_flags=("12.1a",))
    rec = run(tmp_path, cell)["arch-coverage"]
    assert rec.status == status, rec.reason
    if status == "fail":
        assert rec.failure_class == "missing-arch"
        assert "libcellbuilt.so lacks sm_121a" in rec.reason
    assert rec.metrics["tool"] == "fatbin parser"
