"""The static runnability check (image/assembly/loadcheck.py, image/assembly/elf.py) on tiny ELF files compiled here with Debian's
gcc: a missing interpreter and a missing library are named, $ORIGIN RPATH and the config's LD_LIBRARY_PATH are
honoured, the driver's libraries are host-provided, optional plugins do not fail, a malformed header is named as
such; and the extract base gets what a program needs as data."""

from __future__ import annotations

import io
import json
import shutil
import struct
import subprocess
import tarfile
from pathlib import Path

import pytest
from helpers import read_elf_bytes

from conftest import require_binaries
from pinmatrix.cell import BaseSpec
from pinmatrix.image.assembly.elf import ElfError
from pinmatrix.image.assembly.loadcheck import check_layers, summary
from pinmatrix.image.assembly.rootfs import CA_BUNDLE, EXTRACT_PACKAGES, extract_data, rootfs_inputs
from pinmatrix.oci.compression import MEDIA_TYPES

INTERP = "/lib64/ld-linux-x86-64.so.2"


def _compile(tmp: Path, name: str, source: str, *args: str) -> bytes:
    require_binaries("gcc")
    src = tmp / f"{name}.c"
    src.write_text(source)
    out = tmp / name
    subprocess.run(["gcc", "-o", str(out), str(src), *args], check=True, capture_output=True)
    return out.read_bytes()


@pytest.fixture(scope="module")
def elves(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    tmp = tmp_path_factory.mktemp("elves")
    lib = _compile(tmp, "libgone.so.1", "int gone(void) { return 1; }\n", "-shared", "-fPIC", "-Wl,-soname,libgone.so.1")
    shutil.copy(tmp / "libgone.so.1", tmp / "libgone.so")
    prog = _compile(tmp, "prog", "int gone(void);\nint main(void) { return gone(); }\n", f"-L{tmp}", "-lgone",
                    "-Wl,-rpath,$ORIGIN/../lib", "-Wl,--disable-new-dtags")
    plain = _compile(tmp, "plain", "int main(void) { return 0; }\n")
    return {"lib": lib, "prog": prog, "plain": plain}


def _layer(tmp: Path, files: dict[str, bytes], links: dict[str, str] | None = None) -> tuple[Path, str]:
    path = tmp / f"layer-{len(list(tmp.glob('layer-*')))}.tar"
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return path, MEDIA_TYPES["none"]


def _system(tmp: Path) -> tuple[Path, str]:
    """A loader and a C library where an amd64 Debian image has them (contents do not matter to the check)."""
    return _layer(tmp, {"usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2": b"loader",
                        "usr/lib/x86_64-linux-gnu/libc.so.6": b"libc"},
                  {"lib64": "usr/lib64", "usr/lib64/ld-linux-x86-64.so.2": "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
                   "lib": "usr/lib"})


def test_the_reader_gets_interpreter_needed_soname_and_rpath(elves: dict[str, bytes]) -> None:
    prog = read_elf_bytes(elves["prog"])
    assert (prog.interpreter, prog.arch) == (INTERP, "amd64")
    assert prog.needed == ("libgone.so.1", "libc.so.6") and prog.rpath == ("$ORIGIN/../lib",) and not prog.runpath
    lib = read_elf_bytes(elves["lib"])
    assert (lib.soname, lib.interpreter) == ("libgone.so.1", None)


@pytest.mark.parametrize(("cut", "message"), [
    (lambda b: b[:40], "the ELF header"),
    (lambda b: b[:4] + b"\x09" + b[5:], "unknown ELF class 9"),
    (lambda b: b[:32] + struct.pack("<Q", 1 << 40) + b[40:], "the program header table"),
    (lambda b: b[:56] + struct.pack("<H", 60000) + b[58:], "program headers are more than"),
])
def test_a_malformed_header_is_named_as_such(elves: dict[str, bytes], cut, message: str) -> None:  # noqa: ANN001
    with pytest.raises(ElfError, match=message):
        read_elf_bytes(cut(elves["plain"]))


def test_a_missing_loader_and_a_missing_library_are_named(elves: dict[str, bytes], tmp_path: Path) -> None:
    progs = _layer(tmp_path, {"opt/app/bin/prog": elves["prog"], "usr/bin/plain": elves["plain"],
                              "opt/app/bin/broken": elves["plain"][:4] + b"\x09" + elves["plain"][5:]})
    problems = check_layers([progs], "amd64", {})
    found = {(p.path, p.what.split(" (searched", 1)[0]) for p in problems}
    assert found == {
        ("/opt/app/bin/prog", f"its interpreter {INTERP} is not in the image"),
        ("/usr/bin/plain", f"its interpreter {INTERP} is not in the image"),
        ("/opt/app/bin/prog", "needs libgone.so.1, which is nowhere in the image"),
        ("/opt/app/bin/prog", "needs libc.so.6, which is nowhere in the image"),
        ("/usr/bin/plain", "needs libc.so.6, which is nowhere in the image"),
        ("/opt/app/bin/broken", "malformed ELF file: unknown ELF class 9 (1: 32-bit, 2: 64-bit)"),
    }
    line = summary([p for p in problems if "libgone" in p.what])
    assert line.startswith("1 ELF problem(s): needs libgone.so.1") and "/opt/app/bin/prog" in line
    searched = next(p.what for p in problems if "libgone" in p.what)
    assert "/opt/app/bin/../lib" in searched  # $ORIGIN expanded to the file's own folder

    # With the system layer the loader (through /lib64 -> usr/lib64 -> ../lib/...) and libc resolve.
    problems = check_layers([_system(tmp_path), progs], "amd64", {})
    assert {p.what.split(" (", 1)[0] for p in problems if p.path == "/opt/app/bin/prog"} == {
        "needs libgone.so.1, which is nowhere in the image"}


def test_rpath_origin_ld_library_path_and_the_host_driver_resolve(elves: dict[str, bytes], tmp_path: Path) -> None:
    system = _system(tmp_path)
    beside = _layer(tmp_path, {"opt/app/bin/prog": elves["prog"], "opt/app/lib/libgone.so.1": elves["lib"]})
    assert check_layers([system, beside], "amd64", {}) == []
    # Elsewhere, found through the config's LD_LIBRARY_PATH only.
    apart = _layer(tmp_path, {"srv/prog": elves["prog"], "srv/libs/libgone.so.1": elves["lib"]})
    assert check_layers([system, apart], "amd64", {"LD_LIBRARY_PATH": "/srv/libs"}) == []
    # The driver's libraries come from the host; a later layer's whiteout removes a library again.
    gone = _layer(tmp_path, {"opt/app/lib/.wh.libgone.so.1": b""})
    problems = check_layers([system, beside, gone], "amd64", {})
    assert [p.what.split(" (", 1)[0] for p in problems] == ["needs libgone.so.1, which is nowhere in the image"]


def test_driver_libraries_are_host_provided_and_optional_plugins_do_not_fail(tmp_path: Path) -> None:
    require_binaries("gcc")
    for name in ("cuda", "nvidia-ml", "mlx5"):
        _compile(tmp_path, f"lib{name}.so.1", "int f(void) { return 0; }\n", "-shared", "-fPIC",
                 f"-Wl,-soname,lib{name}.so.1")
        shutil.copy(tmp_path / f"lib{name}.so.1", tmp_path / f"lib{name}.so")
    uses = _compile(tmp_path, "libuses.so", "int f(void);\nint g(void) { return f(); }\n", "-shared", "-fPIC",
                    f"-L{tmp_path}", "-lcuda", "-lnvidia-ml")
    plugin = _compile(tmp_path, "plugin.so", "int f(void);\nint g(void) { return f(); }\n", "-shared", "-fPIC",
                      f"-L{tmp_path}", "-lmlx5")
    site = "opt/venv/lib/python3.13/site-packages"
    layer = _layer(tmp_path, {f"{site}/torch/lib/libuses.so": uses,
                              f"{site}/nvidia/nvshmem/lib/nvshmem_transport_ibgda.so.3": plugin})
    problems = [p for p in check_layers([_system(tmp_path), layer], "amd64", {}) if "libc.so" not in p.what]
    assert [(p.path, p.what.split(" (", 1)[0], bool(p.optional)) for p in problems] == [
        (f"/{site}/nvidia/nvshmem/lib/nvshmem_transport_ibgda.so.3",
         "needs libmlx5.so.1, which is nowhere in the image", True)]


def test_an_extract_base_gets_what_programs_need_to_start() -> None:
    spec = BaseSpec(kind="mmdebstrap", suite="trixie", packages=("python3",), variant="extract", mirror="http://m")
    inputs = rootfs_inputs(spec, "aarch64-manylinux_2_35")
    assert set(EXTRACT_PACKAGES) <= set(inputs.packages) and {"base-files", "dash", "libstdc++6"} <= set(inputs.packages)
    minbase = rootfs_inputs(BaseSpec(kind="mmdebstrap", suite="trixie", packages=("python3",), mirror="http://m"),
                            "x86_64-manylinux_2_28")
    assert "dash" not in minbase.packages
    certs = {"usr/share/ca-certificates/mozilla/B.crt": b"B", "usr/share/ca-certificates/mozilla/A.crt": b"A\n"}
    made = dict(extract_data({"usr/bin/python3"}, certs))
    assert made["etc/passwd"].startswith(b"root:x:0:0:root:/root:/bin/sh\n")
    assert made["etc/group"].startswith(b"root:x:0:\n") and made[CA_BUNDLE] == b"A\nB\n"
    assert dict(extract_data({"etc/passwd", "etc/group", CA_BUNDLE}, certs)) == {}


# ----------------------------------------------------------------------------------- layer scans kept by digest
def _addressed(layer: tuple[Path, str], folder: Path) -> tuple[Path, str]:
    """The layer as an OCI layout holds it: its file named by its sha256."""
    import hashlib

    folder.mkdir(exist_ok=True)
    data = layer[0].read_bytes()
    blob = folder / hashlib.sha256(data).hexdigest()
    blob.write_bytes(data)
    return blob, layer[1]


def test_a_layers_scan_is_kept_by_digest_and_gives_the_same_verdict(elves: dict[str, bytes], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from pinmatrix.image.assembly import loadcheck

    blobs, scans = tmp_path / "blobs", tmp_path / "scans"
    system = _addressed(_system(tmp_path), blobs)
    progs = _addressed(_layer(tmp_path, {"opt/app/bin/prog": elves["prog"], "usr/bin/plain": elves["plain"],
                                         "opt/app/bin/broken": elves["plain"][:4] + b"\x09" + elves["plain"][5:],
                                         "etc/ld.so.conf": b"include /etc/ld.so.conf.d/*.conf\n"},
                                  {"opt/app/bin/again": "prog"}), blobs)
    gone = _addressed(_layer(tmp_path, {"opt/app/bin/.wh.prog": b""}), blobs)
    for layers in ([progs], [system, progs], [system, progs, gone]):
        fresh = check_layers(layers, "amd64", {})
        assert check_layers(layers, "amd64", {}, scans=scans) == fresh  # the scans made
        assert len(list(scans.glob("*.json"))) >= len(layers)

        def no_reading(*_a: object) -> None:
            raise AssertionError("a kept layer was read again")

        monkeypatch.setattr(loadcheck, "open_layer", no_reading)
        assert check_layers(layers, "amd64", {}, scans=scans) == fresh  # from the scans alone
        monkeypatch.undo()
    assert {p.name.split("-")[1] for p in scans.glob("*.json")} == {"62"}  # x86-64's e_machine: a key part


@pytest.mark.parametrize("content", ['{"format": 0, "ops": []}', "not json", '{"format": 1, "ops": [["elf", "x", {}]]}',
                                     '{"format": 1, "ops": [["elf", "x", {"machine": "62", "kind": 3, "interpreter": '
                                     'null, "needed": [], "soname": null, "rpath": [], "runpath": [], "dynamic": true}]]}'])
def test_a_kept_scan_that_is_not_one_is_read_again(elves: dict[str, bytes], tmp_path: Path, content: str) -> None:
    from pinmatrix.image.assembly.loadcheck import layer_scan

    blob, media = _addressed(_layer(tmp_path, {"usr/bin/plain": elves["plain"]}), tmp_path / "blobs")
    scans = tmp_path / "scans"
    first = layer_scan(blob, media, 62, scans)
    (kept,) = scans.glob("*.json")
    kept.write_text(content)
    assert layer_scan(blob, media, 62, scans) == first
    assert json.loads(kept.read_text())["format"] == 1  # written again


def test_a_blob_not_named_by_its_digest_is_never_kept(elves: dict[str, bytes], tmp_path: Path) -> None:
    from pinmatrix.image.assembly.loadcheck import layer_scan

    blob, media = _layer(tmp_path, {"usr/bin/plain": elves["plain"]})
    layer_scan(blob, media, 62, tmp_path / "scans")
    assert not (tmp_path / "scans").exists()


# ---------------------------------------------------------------------- trees kept for images sharing a prefix
def _scanned(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The blobs layer_scan is asked for from now on."""
    from pinmatrix.image.assembly import loadcheck

    asked: list[Path] = []
    real = loadcheck.layer_scan

    def recording(blob: Path, *args: object) -> object:
        asked.append(blob)
        return real(blob, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(loadcheck, "layer_scan", recording)
    return asked


def test_an_image_sharing_all_but_its_last_layer_with_one_checked_starts_from_that_tree(
        elves: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pinmatrix.image.assembly import loadcheck

    monkeypatch.setattr(loadcheck, "_kept", {})
    blobs, scans = tmp_path / "blobs", tmp_path / "scans"
    system = _addressed(_system(tmp_path), blobs)
    progs = _addressed(_layer(tmp_path, {"opt/app/bin/prog": elves["prog"], "opt/app/lib/libgone.so.1": elves["lib"]}),
                       blobs)
    plain = _addressed(_layer(tmp_path, {"opt/app/plain.txt": b"plain"}), blobs)
    gone = _addressed(_layer(tmp_path, {"opt/app/lib/.wh.libgone.so.1": b""}), blobs)  # the sibling deletes a library
    patched = _addressed(_layer(tmp_path, {"opt/app/patched.txt": b"patched"}), blobs)
    first = check_layers([system, progs, plain], "amd64", {}, scans=scans)
    asked = _scanned(monkeypatch)
    sibling = check_layers([system, progs, gone], "amd64", {}, scans=scans)
    assert asked == [gone[0]]  # base and programs from the kept tree; only its own layer applied
    assert sibling == check_layers([system, progs, gone], "amd64", {}) != first  # as a fresh read: the library is gone
    assert [p.what.split(" (", 1)[0] for p in sibling] == ["needs libgone.so.1, which is nowhere in the image"]
    assert first == []
    asked.clear()
    # the kept tree was copied: the sibling's whiteout did not reach it
    assert check_layers([system, progs, patched], "amd64", {}, scans=scans) == first
    assert asked == [patched[0]]


def test_no_tree_is_kept_for_blobs_not_named_by_their_digest_or_without_scans(
        elves: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pinmatrix.image.assembly import loadcheck

    monkeypatch.setattr(loadcheck, "_kept", {})
    system, progs = _system(tmp_path), _layer(tmp_path, {"opt/app/bin/prog": elves["prog"]})
    check_layers([system, progs], "amd64", {}, scans=tmp_path / "scans")
    addressed = [_addressed(system, tmp_path / "blobs"), _addressed(progs, tmp_path / "blobs")]
    check_layers(addressed, "amd64", {})
    assert loadcheck._kept == {}
    asked = _scanned(monkeypatch)
    check_layers([system, progs], "amd64", {}, scans=tmp_path / "scans")
    assert asked == [system[0], progs[0]]


# ------------------------------------------------------------------------------ scans made beside a long step
def test_scans_made_beside_a_block_are_kept_and_then_read_by_the_check(elves: dict[str, bytes], tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from pinmatrix.image.assembly import loadcheck

    blobs, scans = tmp_path / "blobs", tmp_path / "scans"
    layers = [_addressed(_system(tmp_path), blobs),
              _addressed(_layer(tmp_path, {"usr/bin/plain": elves["plain"], "opt/app/bin/prog": elves["prog"]}), blobs)]
    fresh = check_layers(layers, "amd64", {})
    with loadcheck.scanned_beside(layers, "amd64", scans):
        deadline = time.monotonic() + 30
        while len(list(scans.glob("*.json"))) < len(layers):  # made while the block runs, not after it
            assert time.monotonic() < deadline, "no scans were made while the block ran"
            time.sleep(0.02)

    def no_reading(*_a: object) -> None:
        raise AssertionError("a layer scanned beside the block was read again")

    monkeypatch.setattr(loadcheck, "open_layer", no_reading)
    assert check_layers(layers, "amd64", {}, scans=scans) == fresh


def test_the_block_ends_only_when_every_scan_is_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from pinmatrix.image.assembly import loadcheck

    made: list[Path] = []

    def slow_scan(blob: Path, media_type: str, machine: int | None, scans: Path | None = None) -> list[object]:
        time.sleep(0.2)
        made.append(blob)
        return []

    monkeypatch.setattr(loadcheck, "layer_scan", slow_scan)
    layers = [(tmp_path / "a", MEDIA_TYPES["none"]), (tmp_path / "b", MEDIA_TYPES["none"])]
    with loadcheck.scanned_beside(layers, "amd64", tmp_path / "scans"):
        pass
    assert made == [tmp_path / "a", tmp_path / "b"]


def test_a_failing_scan_is_left_to_the_check_and_the_blocks_error_stops_the_scans(
        elves: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from pinmatrix.image.assembly import loadcheck

    blobs, scans = tmp_path / "blobs", tmp_path / "scans"
    broken = blobs / ("0" * 64)
    blobs.mkdir()
    broken.write_bytes(b"not a tar at all")
    good = _addressed(_layer(tmp_path, {"usr/bin/plain": elves["plain"]}), blobs)
    with loadcheck.scanned_beside([(broken, MEDIA_TYPES["none"]), good], "amd64", scans):
        pass  # no error here: the broken layer is the check's to report
    assert [p.name.split("-")[0] for p in scans.glob("*.json")] == [good[0].name]  # the good one after it still kept

    started, calls = threading.Event(), []

    def scan(blob: Path, media_type: str, machine: int | None, scans: Path | None = None) -> list[object]:
        calls.append(blob)
        started.set()
        threading.Event().wait(0.5)
        return []

    monkeypatch.setattr(loadcheck, "layer_scan", scan)
    with pytest.raises(ValueError, match="the step failed"), loadcheck.scanned_beside(
            [good, (broken, MEDIA_TYPES["none"])], "amd64", scans):
        assert started.wait(10)
        raise ValueError("the step failed")
    assert calls == [good[0]]  # stopped before the next layer
