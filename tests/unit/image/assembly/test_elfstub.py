"""The libcuda.so link stub written as data: the GNU tools and the dynamic loader take it as a shared library
with its SONAME, linking against it records that SONAME, and its bytes follow from the machine and the name alone
(no compiler of the build host is asked, so a build on another distribution gives the same link layer)."""

from __future__ import annotations

import hashlib
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pinmatrix.image.assembly.elf import ET_DYN, read_elf
from pinmatrix.image.assembly.elfstub import E_MACHINE, StubError, _align, link_stub

HOST_X86_64 = platform.machine() == "x86_64"


def _info(data: bytes):  # noqa: ANN202
    return read_elf(lambda offset, size: data[offset:offset + size], len(data))


@pytest.mark.parametrize("machine", sorted(E_MACHINE))
def test_the_stub_is_a_shared_object_of_its_machine_with_its_soname_and_nothing_needed(machine: str) -> None:
    info = _info(link_stub(machine, "libcuda.so.1"))
    assert info.machine == E_MACHINE[machine] and info.kind == ET_DYN
    assert info.soname == "libcuda.so.1" and info.needed == () and info.interpreter is None
    assert info.rpath == () and info.runpath == ()


@pytest.mark.skipif(shutil.which("readelf") is None, reason="binutils' readelf is not installed")
@pytest.mark.parametrize("machine", sorted(E_MACHINE))
def test_readelf_reads_every_header_without_a_warning(machine: str, tmp_path: Path) -> None:
    path = tmp_path / "libcuda.so"
    path.write_bytes(link_stub(machine, "libcuda.so.1"))
    proc = subprocess.run(["readelf", "-W", "-h", "-l", "-S", "-d", "--dyn-syms", str(path)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "Library soname: [libcuda.so.1]" in proc.stdout and "DYN (Shared object file)" in proc.stdout
    for section in (".dynsym", ".dynstr", ".hash", ".dynamic", ".shstrtab"):
        assert f"] {section} " in proc.stdout
    assert "contains 1 entry" in proc.stdout  # the null symbol: nothing for the linker to bind to


COMPILERS = {"x86_64": "cc" if HOST_X86_64 else "x86_64-linux-gnu-gcc",
             "aarch64": "cc" if platform.machine() == "aarch64" else "aarch64-linux-gnu-gcc"}


@pytest.mark.parametrize("machine", sorted(E_MACHINE))
def test_a_library_linked_against_it_needs_its_soname(machine: str, tmp_path: Path) -> None:
    compiler = shutil.which(COMPILERS[machine])
    if compiler is None:
        pytest.skip(f"no C compiler for {machine} ({COMPILERS[machine]})")
    (tmp_path / "stubs").mkdir()
    (tmp_path / "stubs" / "libcuda.so").write_bytes(link_stub(machine, "libcuda.so.1"))
    (tmp_path / "user.c").write_text("int cuInit(unsigned int);\nint start(void) { return cuInit(0); }\n")
    out = tmp_path / "libuser.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(out), str(tmp_path / "user.c"), "-Wl,--no-as-needed",
                    f"-L{tmp_path / 'stubs'}", "-lcuda"], check=True, capture_output=True)
    info = _info(out.read_bytes())
    assert info.machine == E_MACHINE[machine] and "libcuda.so.1" in info.needed


@pytest.mark.skipif(not HOST_X86_64, reason="the host's dynamic loader maps only its own machine's objects")
def test_the_dynamic_loader_maps_it(tmp_path: Path) -> None:
    path = tmp_path / "libcuda.so"
    path.write_bytes(link_stub("x86_64", "libpinmatrix-stub-test.so.1"))
    # in a process of its own: a stub the loader maps wrongly may crash it
    probe = ("import ctypes, sys\nlib = ctypes.CDLL(sys.argv[1])\n"
             "print('loaded', hasattr(lib, 'cuInit'))\n")
    proc = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stdout == "loaded False\n", (proc.returncode, proc.stderr[-500:])


def test_the_bytes_follow_from_the_machine_and_the_name_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")  # no compiler, no binutils
    x86 = link_stub("x86_64", "libcuda.so.1")
    assert x86 == link_stub("x86_64", "libcuda.so.1")
    arm = link_stub("aarch64", "libcuda.so.1")
    assert len(arm) == len(x86) and [i for i, (a, b) in enumerate(zip(x86, arm)) if a != b] == [18]  # e_machine
    other = link_stub("x86_64", "libother.so.2")
    assert other != x86 and _info(other).soname == "libother.so.2"


def test_each_table_starts_at_the_next_multiple_of_eight() -> None:
    assert [_align(n) for n in range(18)] == [0] + [8] * 8 + [16] * 8 + [24]
    assert _align(5, 4) == 8 and _align(4, 4) == 4


# The stub's bytes are part of every image with a link layer (its sha256 is in the link layer's key too): a change
# here changes those images' digests on every host, so it must be made on purpose, with these pins moved.
PINNED = {"x86_64": "de377d91c81c7ea4cd1ae9b1072374f4600ac6c05a5dd473a778045d1008ce09",
          "aarch64": "8ffbf58cff22573a7f67cf64a92b73a06c592da1f8fa59403a3fb93e8581c296"}


@pytest.mark.parametrize("machine", sorted(PINNED))
def test_the_stubs_bytes_are_pinned(machine: str) -> None:
    data = link_stub(machine, "libcuda.so.1")
    assert len(data) == 776 and hashlib.sha256(data).hexdigest() == PINNED[machine]


@pytest.mark.parametrize("machine, soname", [("riscv64", "libcuda.so.1"), ("x86_64", ""),
                                             ("x86_64", "../libcuda.so"), ("x86_64", "libcuda\n.so"),
                                             ("x86_64", "libcudä.so")])
def test_an_unknown_machine_or_a_name_that_is_not_a_file_name_is_refused(machine: str, soname: str) -> None:
    with pytest.raises(StubError) as raised:
        link_stub(machine, soname)
    if machine == "riscv64":
        assert str(raised.value) == "no link stub for machine 'riscv64' (known: aarch64, x86_64)"
    else:
        assert str(raised.value) == f"a link stub's SONAME is a file name, not {soname!r}"
