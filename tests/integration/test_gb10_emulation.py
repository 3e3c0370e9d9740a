"""An arm64 image assembled here (the extract base, no emulation to make it) runs under qemu-user where binfmt_misc
has it: its Python starts, finds a user name and imports the cell's package. When the kernel cannot run arm64,
the reason says what to install or enable."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from emulation import EmulationError, emulation_problem
from helpers import import_smoke

from conftest import engine_for, make_cell
from pinmatrix.cell import BaseSpec
from pinmatrix.image.build import build_all
from pinmatrix.image.load_push import load_into_engine
from pinmatrix.image.settings import BuildSettings
from pinmatrix.imageref import image_ref
from pinmatrix.lock.resolve import lock_cell


def _entry(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "status").write_text("enabled\n")
    (folder / "qemu-aarch64").write_text(text)
    return folder


def test_emulation_is_ready_only_with_an_enabled_entry_that_has_the_f_flag(tmp_path: Path) -> None:
    assert emulation_problem("amd64", tmp_path, machine="x86_64") is None  # native
    assert "binfmt_misc is not mounted" in (emulation_problem("arm64", tmp_path / "none", machine="x86_64") or "")
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "status").write_text("enabled\n")
    assert "no binfmt_misc entry" in (emulation_problem("arm64", tmp_path / "bare", machine="x86_64") or "")
    off = _entry(tmp_path / "off", "disabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: PF\n")
    assert "is disabled" in (emulation_problem("arm64", off, machine="x86_64") or "")
    no_f = _entry(tmp_path / "nof", "enabled\ninterpreter /usr/bin/qemu-aarch64\nflags: \n")
    assert "lacks the F flag" in (emulation_problem("arm64", no_f, machine="x86_64") or "")
    ready = _entry(tmp_path / "ok", "enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: PF\n")
    assert emulation_problem("arm64", ready, machine="x86_64") is None
    with pytest.raises(EmulationError, match="cannot run arm64 programs here: the binfmt_misc entry"):
        import_smoke(None, "ref", "arm64", ("six",), binfmt=off)  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.network  # the Debian base and six from the default index
def test_an_arm64_image_imports_its_package_under_emulation(build_cache: Path, tmp_path: Path,
                                                            request: pytest.FixtureRequest) -> None:
    problem = emulation_problem("arm64")
    if problem is not None:
        pytest.skip(f"this machine cannot run arm64 programs: {problem}")
    engine = engine_for("podman", request)
    base = BaseSpec(kind="mmdebstrap", suite="trixie", source_date_epoch=1735689600, packages=("python3",),
                    variant="extract")
    cell = make_cell("arm-import", ("six==1.17.0",), pins={"six": "1.17.0"}, python="3.13", base=base)
    cell = dataclasses.replace(cell, platform="aarch64-manylinux_2_28")
    (tmp_path / "locks").mkdir()
    locked = lock_cell(cell, tmp_path, None)
    assert locked.ok, locked.reason
    settings = BuildSettings(root=tmp_path, cache_dir=build_cache, logs_dir=tmp_path / "logs", registry="localhost/t")
    (built,) = build_all([cell], None, settings, None, jobs=1)
    assert built.status == "built", built.reason
    from pinmatrix.image.assembly.assemble import Assembler, AssemblySettings

    layout = Assembler(AssemblySettings(root=tmp_path, cache_dir=build_cache, layout_dir=settings.layout)).layout
    stored = layout.image(image_ref(cell, "localhost/t"))
    assert stored is not None
    # dpkg never ran in the extract base: its status file is written from the unpacked .debs (for the SBOM)
    import tarfile

    from pinmatrix.release.debian import parse_status

    base_blob = layout.blobs / stored.manifest["layers"][0]["digest"].split(":", 1)[1]
    with tarfile.open(base_blob) as tar:
        member = tar.extractfile("var/lib/dpkg/status")
        assert member is not None
        packages = {p.name: p for p in parse_status(member.read().decode(), "status")}
    assert {"python3-minimal", "libc6", "dash"} <= set(packages)
    assert {p.architecture for p in packages.values()} <= {"arm64", "all"}
    load_into_engine(layout, stored, engine)
    smoke = import_smoke(engine, stored.ref, "arm64", ("six", "getpass"), timeout=600)
    assert smoke.ok, smoke.output
    assert "imported ('six', 'getpass')" in smoke.output
    who = engine.run(stored.ref, ["python", "-c", "import getpass, platform; print(getpass.getuser(), platform.machine())"],
                     network="none", gpus=False, timeout=600)
    assert who.stdout.decode().split() == ["root", "aarch64"]
