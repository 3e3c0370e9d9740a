"""The shared-libraries smoke on real ELF files built here with gcc: DT_NEEDED and RUNPATH are read, a library
that resolves passes, one that is gone makes the smoke degraded and names who needs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, skip_or_fail

sys.path.insert(0, str(REPO / "smoke"))
sys.path.insert(1, str(REPO / "src" / "pinmatrix" / "shipped"))  # the runtime smokes import
from shared_libraries import elf_dynamic  # noqa: E402


def _gcc(*args: str) -> None:
    if shutil.which("gcc") is None:
        skip_or_fail("gcc not installed")
    subprocess.run(["gcc", *args], check=True, capture_output=True)


def test_elf_dynamic_reads_needed_and_runpath(tmp_path: Path) -> None:
    (tmp_path / "bar.c").write_text("int bar(void) { return 1; }\n")
    (tmp_path / "foo.c").write_text("int bar(void);\nint foo(void) { return bar(); }\n")
    _gcc("-shared", "-fPIC", "-o", str(tmp_path / "libbar.so"), str(tmp_path / "bar.c"))
    _gcc("-shared", "-fPIC", "-o", str(tmp_path / "libfoo.so"), str(tmp_path / "foo.c"), f"-L{tmp_path}", "-lbar",
         "-Wl,-rpath,$ORIGIN/deps")
    needed, paths = elf_dynamic(tmp_path / "libfoo.so")
    assert needed == ["libbar.so"]
    assert paths == ["$ORIGIN/deps"]
    assert elf_dynamic(tmp_path / "foo.c") is None


@pytest.mark.parametrize("keep", [True, False])
def test_the_smoke_passes_or_names_the_missing_library(tmp_path: Path, keep: bool) -> None:
    site = tmp_path / "site"
    pkg = site / "fakeext"
    pkg.mkdir(parents=True)
    (tmp_path / "bar.c").write_text("int bar(void) { return 1; }\n")
    (tmp_path / "foo.c").write_text("int bar(void);\nint foo(void) { return bar(); }\n")
    _gcc("-shared", "-fPIC", "-o", str(pkg / "libbar.so"), str(tmp_path / "bar.c"))
    _gcc("-shared", "-fPIC", "-o", str(pkg / "_ext.so"), str(tmp_path / "foo.c"), f"-L{pkg}", "-lbar")
    if not keep:
        (pkg / "libbar.so").unlink()
    info = site / "fakeext-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeext\nVersion: 1.0\n")
    files = ["fakeext/_ext.so"] + (["fakeext/libbar.so"] if keep else [])
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files) + "fakeext-1.0.dist-info/RECORD,,\n")
    result = tmp_path / "result.json"
    runtime = REPO / "src" / "pinmatrix" / "shipped"  # what the runner puts on PYTHONPATH after the site
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(runtime)]), "PINMATRIX_SMOKE_RESULT": str(result),
           "PINMATRIX_CELL": json.dumps({"id": "t", "requirements": ["fakeext==1.0"]})}
    subprocess.run([sys.executable, str(REPO / "smoke" / "shared_libraries.py"), "shared-libraries"], env=env,
                   capture_output=True, text=True, timeout=120)
    data = json.loads(result.read_text())
    if keep:
        assert data["status"] == "pass", data
        assert data["metrics"]["elf_files_checked"] == 2
    else:
        assert data["status"] == "degraded" and data["failure_class"] == "missing-library", data
        assert "fakeext 1.0: fakeext/_ext.so needs libbar.so" in data["reason"]
