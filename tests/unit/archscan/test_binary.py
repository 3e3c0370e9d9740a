"""pinmatrix.archscan.binary rule by rule, on hostile and hand-built inputs (no CUDA toolchain): a fatbin container
is its magic, a 16-byte header and a body that fits the file; its entries are read while their headers are
sane, PTX and SASS kinds only, sm_10 ... sm_999 only (anything else makes the container a malformed header,
named, never a target); a bare cubin's number comes from e_flags (by ABI version) and its exact target from
its ptxas note, read within the file's bounds; the re-wrapped ELF holds every container in its one
.nv_fatbin section; cuobjdump's output is read entry by entry, its failures named in one line and never a
crash; a binary's result is exact only where cuobjdump's entries line up with the headers found.

cuobjdump here is a stand-in script (its output given by the test), run as the real one would be."""

from __future__ import annotations

import json
import os
import stat
import struct
import sys
import time
from pathlib import Path

import pytest
from helpers import fatbin_containers

from pinmatrix.archscan import binary
from pinmatrix.archscan.binary import (
    EM_CUDA,
    FATBIN_MAGIC,
    TOOL_CUOBJDUMP,
    TOOL_HEADER,
    TOOL_TKINFO,
    BinaryTargets,
    ToolFailed,
    _cubin_note_target,
    _cubin_number,
    _scan,
    cuobjdump_cubin_target,
    cuobjdump_entries,
    read_binary,
    wrap_containers,
)

FALLBACK = binary._fallback_note()


# ------------------------------------------------------------------------------------------------ builders
def entry(kind: int, arch: int, *, header: int = 64, payload: bytes = b"", declared: int | None = None) -> bytes:
    """One fatbin entry: kind, a header of ``header`` bytes with the arch at offset 28, then the payload."""
    size = len(payload) if declared is None else declared
    head = struct.pack("<HHIQ", kind, 0, header, size) + b"\0" * 12 + struct.pack("<I", arch)
    return head + b"\0" * (header - len(head)) + payload


def sass(*archs: int) -> bytes:
    return b"".join(entry(2, a) for a in archs)


def container(*entries: bytes, body: int | None = None, version: int = 1) -> bytes:
    data = b"".join(entries)
    return FATBIN_MAGIC + struct.pack("<HHQ", version, 16, len(data) if body is None else body) + data


def elf(*, machine: int = EM_CUDA, abi: int = 8, flags: int = 0, cls: int = 2,
        sections: list[tuple[bytes, bytes]] = (), shentsize: int = 64, shnum: int | None = None,
        shstrndx: int | None = None, shoff_delta: int = 0, names_grow: int = 0,
        offsets: dict[bytes, int] | None = None, sizes: dict[bytes, int] | None = None) -> bytes:
    """A 64-bit little-endian ELF: the given sections (name, data), then .shstrtab, then the section headers.
    The keyword arguments past ``sections`` break one thing each."""
    names = b"\0"
    name_at = {}
    for name, _ in [*sections, (b".shstrtab", b"")]:
        name_at[name] = len(names)
        names += name + b"\0"
    body = b""
    placed: list[tuple[bytes, int, int]] = []
    for name, data in sections:
        placed.append((name, 64 + len(body), len(data)))
        body += data
    names_off = 64 + len(body)
    body += names
    body += b"\0" * (-len(body) % 8)
    shoff = 64 + len(body)
    headers = b"\0" * shentsize  # SHN_UNDEF
    for name, off, size in [*placed, (b".shstrtab", names_off, len(names) + names_grow)]:
        off = (offsets or {}).get(name, off)
        size = (sizes or {}).get(name, size)
        head = struct.pack("<IIQQQQIIQQ", name_at[name], 1, 0, 0, off, size, 0, 0, 1, 0)
        headers += head[:shentsize] + b"\0" * (shentsize - 64)
    count = len(placed) + 2
    ident = b"\x7fELF" + bytes([cls, 1, 1, 0x33, abi]) + b"\0" * 7
    head = ident + struct.pack("<HHIQQQIHHHHHH", 2, machine, 1, 0, 0, shoff + shoff_delta, flags, 64, 0, 0,
                               shentsize, count if shnum is None else shnum,
                               count - 1 if shstrndx is None else shstrndx)
    return head + body + headers


def cubin(sm: int, *, abi: int = 8, note: bytes | None = None, **kw: object) -> bytes:
    flags = (sm << 8) | 0x0005_0000 if abi >= 8 else sm | 0x0005_0000
    sections = [(b".text.scale", b"\x00" * 16)]
    if note is not None:
        sections.append((b".note.nv.tkinfo", b"\x04\x00\x00\x00" + note + b"\0"))
    return elf(flags=flags, abi=abi, sections=sections, **kw)  # type: ignore[arg-type]


TOOL = """#!{python}
import json, os, shutil, sys, time
spec = json.load(open({spec!r}))
with open({spec!r} + ".calls", "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\\n")
mode = spec[sys.argv[1]]
if mode.get("pid"):  # before any output: the reader may be done with it at its first line
    with open(mode["pid"], "w") as fh:
        fh.write(str(os.getpid()))
if mode.get("copy"):
    shutil.copyfile(sys.argv[-1], mode["copy"])
sys.stdout.buffer.write(mode.get("stdout", "").encode("latin-1"))
sys.stdout.flush()
sys.stderr.write(mode.get("stderr", ""))
sys.stderr.flush()
sys.stderr.buffer.write(mode.get("stderr_raw", "").encode("latin-1"))
sys.stderr.flush()
if mode.get("close"):
    os.close(1)
time.sleep(mode.get("sleep", 0))
sys.exit(mode.get("rc", 0))
"""


def cuobjdump(tmp_path: Path, **modes: dict[str, object]) -> tuple[str, Path]:
    """A stand-in cuobjdump: per first argument ('-res-usage', '-elf'), its stdout, stderr and exit status;
    'copy' keeps the file it was given. Returns the executable and the file of its calls."""
    spec = tmp_path / "cuobjdump.json"
    spec.write_text(json.dumps({"-" + k.replace("_", "-"): v for k, v in modes.items()}))
    exe = tmp_path / "bin" / "cuobjdump"
    exe.parent.mkdir(exist_ok=True)
    exe.write_text(TOOL.format(python=sys.executable, spec=str(spec)))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe), Path(str(spec) + ".calls")


def res_usage(*entries: tuple[str, str]) -> str:
    """cuobjdump -res-usage output: per entry its kind block, an 'arch =' header and the usual lines."""
    out = ""
    for kind, arch in entries:
        out += (f"\nFatbin {kind} code:\n================\narch = {arch}\ncode version = [1,8]\nhost = linux\n"
                f"compile_size = 64bit\n\n\tResource usage:\n\t Function scale:REG:8 STACK:0 SHARED:0\n")
    return out


def write(tmp_path: Path, data: bytes, name: str = "libx.so") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# ------------------------------------------------------------------------------------------ BinaryTargets
def test_targets_are_one_sorted_list_of_every_group() -> None:
    b = BinaryTargets("x.so", 1, [("sm_121a", "compute_90", "sm_90"), ("sm_100", "sm_90", "compute_120f", "sm_120",
                                                                       "sm_120f", "sm_120a", "compute_120")],
                      TOOL_CUOBJDUMP, True)
    assert b.targets == ["sm_90", "compute_90", "sm_100", "sm_120", "compute_120", "sm_120a", "sm_120f",
                         "compute_120f", "sm_121a"]
    assert b.sass == ["sm_90", "sm_100", "sm_120", "sm_120a", "sm_120f", "sm_121a"]
    assert b.ptx == ["compute_90", "compute_120", "compute_120f"]


def test_a_target_of_no_known_form_sorts_first_by_name() -> None:
    b = BinaryTargets("x.so", 1, [("sm_90", "zz", "aa", "sm_9x")], TOOL_HEADER, False)
    assert b.targets == ["aa", "sm_9x", "zz", "sm_90"]
    assert binary._target_key("sm_121a") == (12, 1, "a", 0)
    assert binary._target_key("compute_90") == (9, 0, "", 1)
    assert binary._target_key("other") == (0, 0, "other", 0)


def test_a_result_round_trips_through_its_dict() -> None:
    b = BinaryTargets("lib/x.so", 123, [("sm_90a", "compute_90")], TOOL_CUOBJDUMP, True, grouped=False,
                      notes=["n1", "n2"])
    d = b.to_dict()
    assert d == {"path": "lib/x.so", "size": 123, "tool": "cuobjdump", "exact": True, "grouped": False,
                 "groups": [["sm_90a", "compute_90"]], "notes": ["n1", "n2"]}
    assert json.loads(json.dumps(d)) == d
    assert BinaryTargets.from_dict(d) == b
    d["notes"].append("changed")
    assert b.notes == ["n1", "n2"]  # a copy, not the result's own list


def test_an_old_dict_without_grouped_or_notes_reads_as_grouped_without_notes() -> None:
    old = {"path": "x.so", "size": 1, "groups": [["sm_90"]], "tool": "fatbin-header", "exact": False}
    assert BinaryTargets.from_dict(old) == BinaryTargets("x.so", 1, [("sm_90",)], TOOL_HEADER, False, True, [])


# ---------------------------------------------------------------------------------------- the fatbin parser
def test_a_container_is_found_with_its_entries_in_file_order() -> None:
    data = b"\x01" * 40 + container(entry(2, 90), entry(1, 90), entry(0x10, 120)) + b"\x02" * 8
    found, report = _scan(data)
    assert found == [(40, 40 + 16 + 3 * 64, [("sass", 90), ("ptx", 90), ("sass", 120)])]
    assert (report.malformed, report.first_malformed, report.stopped) == (0, None, None)
    assert fatbin_containers(data) == [[("sass", 90), ("ptx", 90), ("sass", 120)]]


def test_entries_of_another_kind_are_passed_over() -> None:
    data = container(entry(4, 0), entry(2, 90), entry(3, 5000), entry(1, 80))
    assert fatbin_containers(data) == [[("sass", 90), ("ptx", 80)]]


def test_a_container_with_only_other_kinds_is_no_container() -> None:
    assert fatbin_containers(container(entry(4, 90)) + container(sass(80))) == [[("sass", 80)]]


def test_payloads_are_stepped_over_by_their_declared_size() -> None:
    payload = FATBIN_MAGIC + struct.pack("<HHQ", 1, 16, 64) + sass(0)  # a container's bytes inside a payload
    data = container(entry(2, 90, payload=payload), entry(2, 100, header=96))
    found, report = _scan(data)
    assert [e for _, _, e in found] == [[("sass", 90), ("sass", 100)]] and report.malformed == 0


def test_the_architecture_range_is_sm_10_to_sm_999() -> None:
    for arch in (10, 999):
        assert fatbin_containers(container(sass(arch))) == [[("sass", arch)]]
    for arch in (0, 9, 1000, 0xFFFFFFFF):
        found, report = _scan(container(sass(arch)))
        assert found == [] and report.malformed == 1 and report.first_malformed == 0


def test_one_bad_entry_makes_the_whole_container_malformed() -> None:
    data = container(sass(90, 7, 100)) + container(sass(80))
    found, report = _scan(data)
    assert [e for _, _, e in found] == [[("sass", 80)]]
    assert report.malformed == 1 and report.first_malformed == 0


def test_the_first_malformed_offset_is_the_first_one() -> None:
    good, bad = container(sass(90)), container(sass(1))
    found, report = _scan(good + bad + good + bad)
    assert len(found) == 2 and report.malformed == 2 and report.first_malformed == len(good)


def test_entry_headers_out_of_bounds_end_the_container() -> None:
    # 63 or 4097 bytes of entry header, or a payload past the container's end: the entries before are kept
    for bad in (entry(2, 100, header=63 + 1)[:0] + struct.pack("<HHIQ", 2, 0, 63, 0) + b"\0" * 48,
                entry(2, 100, header=4097),  # whole, but one byte over the bound
                entry(2, 100, declared=1)):
        assert fatbin_containers(container(sass(90), bad)) == [[("sass", 90)]]
    assert fatbin_containers(container(sass(90), entry(2, 100, header=4096))) == [[("sass", 90), ("sass", 100)]]


def test_an_entry_header_cut_by_the_containers_end_is_not_read() -> None:
    # 31 bytes left in the container: no entry header fits
    data = container(sass(90), b"\0" * 31)
    assert fatbin_containers(data) == [[("sass", 90)]]
    # exactly 32 bytes of an entry whose header claims 64: out of bounds, not read
    assert fatbin_containers(container(sass(90), entry(2, 100)[:32])) == [[("sass", 90)]]


def test_a_container_larger_than_the_file_or_empty_is_no_container() -> None:
    inner = container(sass(90))
    for data in (container(sass(80), body=10 ** 6), container(body=0) + b"\0" * 8):
        found, report = _scan(data)
        assert found == [] and report.malformed == 0
    # the search goes on inside what was not a container
    found, _ = _scan(FATBIN_MAGIC + struct.pack("<HHQ", 1, 16, 10 ** 6) + inner)
    assert [e for _, _, e in found] == [[("sass", 90)]] and found[0][0] == 16


def test_a_container_exactly_as_large_as_the_file_is_read() -> None:
    data = container(sass(90))
    assert fatbin_containers(data) == [[("sass", 90)]]
    assert fatbin_containers(data[:-1]) == []


def test_only_a_16_byte_header_with_the_magic_is_a_container() -> None:
    wrong = FATBIN_MAGIC + struct.pack("<HHQ", 1, 24, 64) + sass(90)
    assert fatbin_containers(wrong) == []
    any_version = container(sass(90), version=0x10)
    assert fatbin_containers(any_version) == [[("sass", 90)]]
    assert fatbin_containers(container(sass(90))[:15]) == []  # a header cut short


def test_the_search_resumes_after_a_good_container_and_inside_a_malformed_one() -> None:
    inner = container(sass(90))
    outer_good = container(entry(2, 80, payload=inner))
    found, _ = _scan(outer_good)
    assert [e for _, _, e in found] == [[("sass", 80)]]  # not also the container inside its payload
    outer_bad = container(entry(2, 5, payload=inner))
    found, report = _scan(outer_bad)
    assert [e for _, _, e in found] == [[("sass", 90)]] and report.malformed == 1
    assert found[0][0] == 16 + 64


def test_the_parser_stops_at_the_container_bound_and_says_where(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binary, "MAX_CONTAINERS", 3)
    one = container(sass(90))
    found, report = _scan(one * 2 + container(sass(2)) + one * 2)
    assert len(found) == 2 and report.malformed == 1
    assert report.stopped == f"the header parser stopped at offset {3 * len(one)} after 3 containers"
    found, report = _scan(one * 3)
    assert len(found) == 3 and report.stopped is None  # the bound reached at the end: nothing left unread


def test_the_time_bound_is_said_in_seconds() -> None:
    found, report = _scan(container(sass(90)) * 3, seconds=-1.5)
    assert found == []
    assert report.stopped == "the header parser stopped at offset 0 after 0 containers and -1.5 s"


# ---------------------------------------------------------------------------------------------- bare cubins
def test_a_cubins_number_is_in_e_flags_by_abi_version() -> None:
    assert _cubin_number(cubin(100)) == 100
    assert _cubin_number(cubin(90, abi=7)) == 90  # the older layout: the low byte
    assert _cubin_number(cubin(121, abi=9)) == 121
    assert _cubin_number(elf(abi=8, flags=0x0000_7A05)) == 0x7A  # the low byte is not the number from ABI 8 on
    assert _cubin_number(elf(abi=7, flags=0x0000_7A05)) == 5


def test_what_is_not_a_64_bit_cuda_elf_has_no_cubin_number() -> None:
    good = cubin(100)
    assert _cubin_number(good[:51]) is None
    assert _cubin_number(good[:52]) == 100
    assert _cubin_number(elf(machine=62, flags=100 << 8)) is None  # x86-64
    assert _cubin_number(b"\x7fELX" + good[4:]) is None
    assert _cubin_number(elf(cls=1, flags=100 << 8)) is None  # 32-bit


def test_a_cubin_whose_header_is_cut_short_is_malformed_not_a_target(tmp_path: Path) -> None:
    good = cubin(100)
    cut = read_binary(write(tmp_path, good[:64] + b"\0" * 8, "cut.cubin"), None)
    assert cut is not None and cut.groups == [] and cut.targets == []
    assert cut.notes == [f"malformed cubin header: its {struct.unpack_from('<H', good, 0x3C)[0]} section header(s) at "
                         f"offset {struct.unpack_from('<Q', good, 0x28)[0]} lie outside its 72 bytes (a header cut "
                         "short); not counted as a target"]
    exact = read_binary(write(tmp_path, good, "whole.cubin"), None)
    assert exact is not None and exact.groups == [("sm_100",)]


@pytest.mark.parametrize("sm", [0, 9])
def test_a_cubin_naming_no_real_architecture_is_malformed(tmp_path: Path, sm: int) -> None:
    found = read_binary(write(tmp_path, cubin(sm), "x.cubin"), None)
    assert found is not None and found.groups == []
    assert found.notes == [f"malformed cubin header: e_flags name sm_{sm}, no real architecture; not counted as "
                           "a target"]
    assert read_binary(write(tmp_path, cubin(10), "ten.cubin"), None).groups == [("sm_10",)]  # type: ignore[union-attr]


def test_a_cubins_note_names_its_exact_target() -> None:
    assert _cubin_note_target(cubin(100, note=b"-arch sm_100f -m 64")) == "sm_100f"
    assert _cubin_note_target(cubin(90, note=b"ptxas -O3 -arch=sm_90a")) == "sm_90a"
    assert _cubin_note_target(cubin(120, note=b"-arch sm_120")) == "sm_120"


@pytest.mark.parametrize("note", [b"-arch sm_100fx", b"-arch sm_1000b", b"-arch  sm_100", b"-march sm_100x",
                                  b"--gpu-name sm_100"])
def test_a_note_without_a_clean_arch_option_names_nothing(note: bytes) -> None:
    assert _cubin_note_target(cubin(100, note=note)) is None


def test_a_cubin_without_the_note_names_nothing() -> None:
    assert _cubin_note_target(cubin(100)) is None
    other = elf(flags=100 << 8, sections=[(b".note.nv.tkinfo.x", b"-arch sm_100f"), (b".note.nv", b"-arch sm_100a")])
    assert _cubin_note_target(other) is None


def test_the_note_is_found_among_other_sections() -> None:
    data = elf(flags=100 << 8, sections=[(b".text", b"-arch sm_90a"), (b".nv.info", b"\0" * 8),
                                         (b".note.nv.tkinfo", b"-arch sm_100f")])
    assert _cubin_note_target(data) == "sm_100f"


@pytest.mark.parametrize("broken", [
    {"shentsize": 56},  # section headers smaller than ELF64's
    {"shnum": 0},
    {"shnum": 70000 & 0xFFFF, "shstrndx": 0},  # more headers than the file holds
    {"shstrndx": 4},  # the name table's index past the headers
    {"shnum": 3},  # the name table is the fourth header
    {"shoff_delta": 1},  # the headers run past the end of the file
    {"names_grow": 10 ** 6},  # the name table runs past the end
])
def test_section_headers_out_of_bounds_name_nothing(broken: dict[str, int]) -> None:
    assert _cubin_note_target(cubin(100, note=b"-arch sm_100f", **broken)) is None  # type: ignore[arg-type]


def test_a_cubin_of_one_section_is_read() -> None:
    """shnum 1 is inside the bounds: the one section is the name table and, by its own name, the note."""
    names = b"\0.note.nv.tkinfo\0-arch sm_90a -m 64\0"
    names += b"\0" * (-len(names) % 8)
    header = struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, 64, len(names), 0, 0, 1, 0)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0x33, 8]) + b"\0" * 7
    head = ident + struct.pack("<HHIQQQIHHHHHH", 2, EM_CUDA, 1, 0, 0, 64 + len(names), 90 << 8, 64, 0, 0, 64, 1, 0)
    assert _cubin_note_target(head + names + header) == "sm_90a"


def test_the_bounds_themselves_are_read() -> None:
    assert _cubin_note_target(cubin(100, note=b"-arch sm_100f", shentsize=72)) == "sm_100f"  # larger entries
    data = cubin(100, note=b"-arch sm_100f")
    assert _cubin_note_target(data + b"\0" * 8) == "sm_100f"


def test_a_note_out_of_bounds_or_too_large_names_nothing() -> None:
    big = b"-arch sm_100f" + b" " * (1 << 16)
    assert _cubin_note_target(elf(flags=100 << 8, sections=[(b".note.nv.tkinfo", big[: 1 << 16])])) == "sm_100f"
    assert _cubin_note_target(elf(flags=100 << 8, sections=[(b".note.nv.tkinfo", big[: (1 << 16) + 1])])) is None
    past = elf(flags=100 << 8, sections=[(b".note.nv.tkinfo", b"-arch sm_100f")], sizes={b".note.nv.tkinfo": 10 ** 7})
    assert _cubin_note_target(past) is None


def test_a_note_ending_exactly_at_the_files_end_is_read() -> None:
    data = elf(flags=100 << 8, sections=[(b".note.nv.tkinfo", b"-arch sm_100f")])
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    # move the note to the file's last bytes
    moved = data + b"-arch sm_120f"
    headers = bytearray(moved)
    struct.pack_into("<Q", headers, shoff + 64 + 24, len(data))
    assert _cubin_note_target(bytes(headers)) == "sm_120f"
    struct.pack_into("<Q", headers, shoff + 64 + 24, len(data) + 1)
    assert _cubin_note_target(bytes(headers)) is None


def headers_at(data: bytes) -> int:
    return struct.unpack_from("<Q", data, 0x28)[0]


def test_section_headers_smaller_than_elf64s_are_refused_even_when_readable() -> None:
    # 48-byte entries still hold the 40 bytes read of each: a reader that took them would find the note
    assert _cubin_note_target(cubin(100, note=b"-arch sm_100f", shentsize=48)) is None


def test_a_section_table_that_runs_past_the_end_is_refused_even_when_its_start_is_readable() -> None:
    data = cubin(100, note=b"-arch sm_100f")
    assert _cubin_note_target(data) == "sm_100f"
    assert _cubin_note_target(data[:-24]) is None  # the last entry's last 24 bytes (never read) are missing


def test_offsets_with_the_top_bit_set_are_past_the_end_not_from_the_end() -> None:
    data = bytearray(cubin(100, note=b"-arch sm_100f"))
    shoff = headers_at(bytes(data))
    table = len(data) - shoff
    struct.pack_into("<Q", data, 0x28, (1 << 64) - table)  # would be -table as a signed number
    assert _cubin_note_target(bytes(data)) is None
    data = bytearray(cubin(100, note=b"-arch sm_100f"))
    names_entry = shoff + 3 * 64  # .shstrtab, the fourth header
    names_off = struct.unpack_from("<Q", data, names_entry + 24)[0]
    struct.pack_into("<Q", data, names_entry + 24, (1 << 64) - (len(data) - names_off))
    assert _cubin_note_target(bytes(data)) is None


def test_a_name_table_index_of_0xffff_is_refused() -> None:
    # SHN_XINDEX: the real index would be elsewhere; as a signed number it would be the last header
    assert _cubin_note_target(cubin(100, note=b"-arch sm_100f", shstrndx=0xFFFF)) is None


def test_a_name_table_ending_at_the_files_end_is_read() -> None:
    data = bytearray(cubin(100, note=b"-arch sm_100f"))
    names_entry = headers_at(bytes(data)) + 3 * 64
    names_off, names_size = struct.unpack_from("<QQ", data, names_entry + 24)
    table = bytes(data[names_off:names_off + names_size])
    struct.pack_into("<Q", data, names_entry + 24, len(data))
    data += table
    assert _cubin_note_target(bytes(data)) == "sm_100f"


def test_a_note_running_past_the_files_end_is_not_read() -> None:
    data = bytearray(cubin(100, note=b"-arch sm_100f"))
    note_entry = headers_at(bytes(data)) + 2 * 64
    struct.pack_into("<QQ", data, note_entry + 24, len(data), 120)
    data += b"-arch sm_120f" + b" " * 100  # 113 of the 120 bytes declared
    assert _cubin_note_target(bytes(data)) is None
    data += b" " * 7
    assert _cubin_note_target(bytes(data)) == "sm_120f"


def test_the_most_sections_e_shnum_can_name_are_read() -> None:
    data = bytearray(cubin(100, note=b"-arch sm_100f"))
    data += b"\0" * 64 * (65535 - 4)  # empty section headers after the four
    struct.pack_into("<H", data, 0x3C, 65535)
    assert _cubin_note_target(bytes(data)) == "sm_100f"


def test_a_truncated_cubin_names_nothing_and_does_not_raise() -> None:
    data = cubin(100, note=b"-arch sm_100f")
    for cut in (0, 10, 0x28, 0x3A, 63):
        assert _cubin_note_target(data[:cut]) is None


# -------------------------------------------------------------------------------------- the re-wrapped ELF
def sections_of(path: Path) -> dict[str, tuple[int, int, int, int]]:
    """name -> (type, offset, size, align) of an ELF's sections, read as cuobjdump would."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = data[heads[shstrndx][4]:heads[shstrndx][4] + heads[shstrndx][5]]
    out = {}
    for name, typ, _f, _a, off, size, _l, _i, align, _e in heads[1:]:
        out[names[name:names.index(b"\0", name)].decode()] = (typ, off, size, align)
    return out


def test_the_wrapped_elf_holds_every_container_in_its_fatbin_section(tmp_path: Path) -> None:
    a, b = container(sass(90)), container(sass(100), entry(1, 100), b"\0" * 4)  # b: 20 bytes past the 8s
    data = b"\x11" * 100 + a + b"\x22" * 3 + b
    spans = [(100, 100 + len(a)), (103 + len(a), 103 + len(a) + len(b))]
    out = tmp_path / "w.elf"
    wrap_containers(data, spans, out)
    raw = out.read_bytes()
    secs = sections_of(out)
    assert set(secs) == {".nv_fatbin", ".shstrtab"}
    typ, off, size, align = secs[".nv_fatbin"]
    assert (typ, off, align) == (1, 0x100, 8)
    pad = -len(b) % 8
    assert pad and size == len(a) + len(b) + pad
    assert raw[off:off + size] == a + b + b"\0" * pad
    assert fatbin_containers(raw[off:off + size]) == fatbin_containers(a + b)
    assert secs[".shstrtab"][0] == 3
    header = struct.unpack_from("<HHIQQQIHHHHHH", raw, 16)
    assert header[0] == 3 and header[2] == 1  # ET_DYN, version 1
    assert header[1] == 62  # not an ELF: x86-64
    assert header[7:] == (64, 0, 0, 64, 3, 2)
    assert raw[4:8] == bytes([2, 1, 1, 0])
    assert raw[:0x100][64:] == b"\0" * (0x100 - 64)
    assert header[5] % 8 == 0  # the section headers aligned


def test_the_wrapped_elf_is_the_layout_cuobjdump_was_checked_against(tmp_path: Path) -> None:
    """Byte for byte the minimal ELF the real-cuobjdump tests (test_arch_scan) read: every header field pinned."""
    a = container(sass(90), b"\0" * 3)  # 83 bytes: five bytes of padding after it
    out = tmp_path / "w.elf"
    wrap_containers(a, [(0, len(a))], out)
    raw = out.read_bytes()
    names = b"\0.nv_fatbin\0.shstrtab\0"
    body = len(a) + 5
    names_at = 0x100 + body
    headers_at = names_at + len(names) + (-(names_at + len(names)) % 8)
    assert raw[0x100:names_at] == a + b"\0" * 5
    assert raw[names_at:headers_at] == names + b"\0" * (headers_at - names_at - len(names))
    assert raw[:16] == b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    assert struct.unpack_from("<HHIQQQIHHHHHH", raw, 16) == (3, 62, 1, 0, 0, headers_at, 0, 64, 0, 0, 64, 3, 2)
    heads = [struct.unpack_from("<IIQQQQIIQQ", raw, headers_at + 64 * i) for i in range(3)]
    assert heads == [(0,) * 10, (1, 1, 2, 0x100, 0x100, body, 0, 0, 8, 0), (12, 3, 0, 0, names_at, len(names), 0, 0, 1, 0)]
    assert len(raw) == headers_at + 3 * 64


def test_the_wrapped_elf_keeps_the_libraries_machine(tmp_path: Path) -> None:
    lib = elf(machine=183, flags=0) + container(sass(90))  # an aarch64 library
    start = len(lib) - len(container(sass(90)))
    out = tmp_path / "w.elf"
    wrap_containers(lib, [(start, len(lib))], out)
    assert struct.unpack_from("<H", out.read_bytes(), 18)[0] == 183
    odd = elf(machine=0xBEEF, flags=0) + container(sass(90))  # any 16-bit number, as the library has it
    wrap_containers(odd, [(start, len(odd))], out)
    assert struct.unpack_from("<H", out.read_bytes(), 18)[0] == 0xBEEF


def test_readelf_reads_the_wrapped_elf(tmp_path: Path) -> None:
    import shutil
    import subprocess

    if shutil.which("readelf") is None:
        pytest.skip("no readelf")
    data = container(sass(90)) + container(sass(120))
    out = tmp_path / "w.elf"
    wrap_containers(data, [(0, len(data) // 2), (len(data) // 2, len(data))], out)
    text = subprocess.run(["readelf", "-S", "-W", str(out)], capture_output=True, text=True, check=True)
    assert ".nv_fatbin" in text.stdout and "Warning" not in text.stderr + text.stdout


# ---------------------------------------------------------------------------------------------- cuobjdump
def test_cuobjdump_entries_are_read_in_file_order(tmp_path: Path) -> None:
    out = ("arch = sm_75\n"  # before any kind line: not an entry
           + res_usage(("elf", "sm_90a"), ("ptx", "sm_90"), ("elf", "sm_120f"), ("ptx", "sm_120f"))
           + "arch = sm_80\n")  # a second header line of the same entry: not an entry
    exe, calls = cuobjdump(tmp_path, res_usage={"stdout": out})
    target = tmp_path / "lib.elf"
    got = cuobjdump_entries(target, exe)
    assert got == [("sass", "sm_90a"), ("ptx", "compute_90"), ("sass", "sm_120f"), ("ptx", "compute_120f")]
    assert [json.loads(ln) for ln in calls.read_text().splitlines()] == [["-res-usage", str(target)]]


def test_only_exact_header_lines_are_entries(tmp_path: Path) -> None:
    out = ("Fatbin elf code:\n arch = sm_90\narch = sm_90 x\narch = compute_90\narch = sm_100b\n"
           "arch = sm_100a  \n"
           "Fatbin ptx code:\narch = sm_80\nFatbin elf code:\n" "Fatbin cubin code:\narch = sm_70\n"
           "Fatbin ptx code:\narch = sm_89f\n")
    exe, _ = cuobjdump(tmp_path, res_usage={"stdout": out})
    assert cuobjdump_entries(tmp_path / "x", exe) == [("sass", "sm_100a"), ("ptx", "compute_80"),
                                                      ("sass", "sm_70"), ("ptx", "compute_89f")]


def test_undecodable_output_is_read_not_raised(tmp_path: Path) -> None:
    exe, _ = cuobjdump(tmp_path, res_usage={"stdout": "\xff\xfe junk\n" + res_usage(("elf", "sm_90"))})
    assert cuobjdump_entries(tmp_path / "x", exe) == [("sass", "sm_90")]


def test_a_failing_cuobjdump_is_named_with_its_last_line(tmp_path: Path) -> None:
    err = "warning one\n" + "x" * 400 + "\n\n  \n"
    exe, _ = cuobjdump(tmp_path, res_usage={"stdout": res_usage(("elf", "sm_90")), "stderr": err, "rc": 2})
    with pytest.raises(ToolFailed) as failed:
        cuobjdump_entries(tmp_path / "lib.elf", exe)
    assert str(failed.value) == f"cuobjdump -res-usage: exit 2: {'x' * 300}"


def test_a_failure_with_nothing_on_stderr_is_still_named(tmp_path: Path) -> None:
    exe, _ = cuobjdump(tmp_path, elf={"rc": 1})
    with pytest.raises(ToolFailed, match=r"^cuobjdump -elf: exit 1: $"):
        cuobjdump_cubin_target(tmp_path / "x.cubin", exe)


def test_only_the_end_of_stderr_is_read(tmp_path: Path) -> None:
    err = "does not contain device code\n" + "y" * 3000 + "\nthe last\n"
    exe, _ = cuobjdump(tmp_path, res_usage={"stderr": err, "rc": 1})
    with pytest.raises(ToolFailed, match=r": exit 1: the last$"):
        cuobjdump_entries(tmp_path / "x", exe)


def test_a_file_without_device_code_is_no_failure(tmp_path: Path) -> None:
    exe, _ = cuobjdump(tmp_path, res_usage={"stderr": "cuobjdump info    : File 'x' does not contain device code\n",
                                            "rc": 255})
    assert cuobjdump_entries(tmp_path / "x", exe) == []


def test_a_cuobjdump_that_cannot_run_here_is_named(tmp_path: Path) -> None:
    exe = tmp_path / "cuobjdump"
    exe.write_bytes(b"\x7fELF" + b"\0" * 60)  # another machine's binary
    exe.chmod(0o755)
    with pytest.raises(ToolFailed, match=rf"^{exe}: \[Errno 8\] Exec format error"):
        cuobjdump_entries(tmp_path / "x", str(exe))
    with pytest.raises(ToolFailed, match="No such file"):
        cuobjdump_cubin_target(tmp_path / "x", str(tmp_path / "absent"))


@pytest.mark.parametrize("close", [False, True], ids=["output-open", "output-closed"])
def test_a_cuobjdump_that_hangs_is_killed_at_its_timeout_and_named(tmp_path: Path, close: bool) -> None:
    exe, _ = cuobjdump(tmp_path, res_usage={"stdout": res_usage(("elf", "sm_90")), "sleep": 60, "close": close})
    start = time.monotonic()
    with pytest.raises(ToolFailed) as failed:
        cuobjdump_entries(tmp_path / "lib.elf", exe, timeout_s=1.5)
    assert 1.5 <= time.monotonic() - start < 15
    assert str(failed.value) == "cuobjdump -res-usage: did not finish within 1.5 s"


def test_a_cuobjdump_reading_a_cubin_is_bounded_in_time_too(tmp_path: Path) -> None:
    exe, _ = cuobjdump(tmp_path, elf={"sleep": 60})
    start = time.monotonic()
    with pytest.raises(ToolFailed, match=r"^cuobjdump -elf: did not finish within 1 s$"):
        cuobjdump_cubin_target(tmp_path / "k.cubin", exe, timeout_s=1)
    assert time.monotonic() - start < 15


def test_a_cuobjdump_that_finishes_in_time_is_not_a_timeout(tmp_path: Path) -> None:
    exe, _ = cuobjdump(tmp_path, res_usage={"stdout": res_usage(("elf", "sm_90")), "sleep": 0.3})
    assert cuobjdump_entries(tmp_path / "lib.elf", exe, timeout_s=30) == [("sass", "sm_90")]


def test_a_hanging_cuobjdump_leaves_the_header_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import functools

    monkeypatch.setattr(binary, "cuobjdump_entries", functools.partial(cuobjdump_entries, timeout_s=1))
    path = write(tmp_path, b"\0" * 64 + container(sass(90)))
    exe, _ = cuobjdump(tmp_path, res_usage={"sleep": 60})
    found = read_binary(path, exe)
    assert found is not None and found.groups == [("sm_90",)] and found.tool == TOOL_HEADER
    assert found.notes == [f"cuobjdump -res-usage: did not finish within 1 s; {FALLBACK}"]


def test_a_cubins_exact_target_from_cuobjdumps_elf_line(tmp_path: Path) -> None:
    exe, calls = cuobjdump(tmp_path, elf={"stdout": "\nxsm=5 no\nELF file 1: x.sm_100.cubin\n"
                                                    "  arch = sm_100 EF_CUDA_SM100 sm=100a abi=8\n  sm=90\n"})
    assert cuobjdump_cubin_target(tmp_path / "x.cubin", exe) == "sm_100a"
    assert json.loads(calls.read_text()) == ["-elf", str(tmp_path / "x.cubin")]
    exe, _ = cuobjdump(tmp_path, elf={"stdout": "no number here\nsm=x\nxsm=90\n"})
    assert cuobjdump_cubin_target(tmp_path / "x.cubin", exe) is None


# -------------------------------------------------------------------------------------------- read_binary
def test_a_file_too_small_for_any_header_holds_no_device_code(tmp_path: Path) -> None:
    assert read_binary(write(tmp_path, b"\0" * 63), None) is None
    assert read_binary(write(tmp_path, b"\0" * 64), None) is None


def test_a_library_without_cuobjdump_gives_numbers_per_group_and_says_so(tmp_path: Path) -> None:
    path = write(tmp_path, b"\0" * 64 + container(sass(90), entry(1, 90)) + container(sass(120)))
    found = read_binary(path, None, label="pkg/lib/libx.so")
    assert found == BinaryTargets("pkg/lib/libx.so", path.stat().st_size, [("sm_90", "compute_90"), ("sm_120",)],
                                  TOOL_HEADER, exact=False, grouped=True, notes=[FALLBACK])
    assert read_binary(path, None).path == str(path)  # type: ignore[union-attr]


def test_a_file_of_no_device_code_is_none(tmp_path: Path) -> None:
    assert read_binary(write(tmp_path, elf(machine=62, flags=0) + b"\0" * 100), None) is None


def test_cuobjdump_entries_that_line_up_give_exact_groups(tmp_path: Path) -> None:
    path = write(tmp_path, b"\0" * 64 + container(sass(90), entry(1, 90)) + container(sass(1)) + container(sass(120)))
    seen = tmp_path / "seen.elf"
    exe, calls = cuobjdump(tmp_path, res_usage={
        "stdout": res_usage(("elf", "sm_90a"), ("ptx", "sm_90"), ("elf", "sm_120f")), "copy": str(seen)})
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    found = read_binary(path, exe, scratch=scratch)
    assert found is not None and found.exact and found.grouped and found.tool == TOOL_CUOBJDUMP
    assert found.groups == [("sm_90a", "compute_90"), ("sm_120f",)]
    assert found.notes == [f"1 malformed fatbin container header(s) (the first at offset {64 + 16 + 128}: an entry "
                           "for no real architecture), not counted as targets"]
    # cuobjdump read the re-wrapped containers (the good ones), in the scratch folder, which is left clean
    (arg,) = [json.loads(ln)[-1] for ln in calls.read_text().splitlines()]
    assert Path(arg) == scratch / ".libx.so.fatbins.elf" and list(scratch.iterdir()) == []
    off, size = sections_of(seen)[".nv_fatbin"][1:3]
    assert fatbin_containers(seen.read_bytes()[off:off + size]) == [[("sass", 90), ("ptx", 90)], [("sass", 120)]]


def test_the_wrapped_file_goes_to_a_private_folder_never_beside_the_binary(tmp_path: Path) -> None:
    """The arch-coverage smoke reads the image's libraries in the sandbox, where their folders are read-only: the
    re-wrapped containers go to a temporary folder of their own, removed afterwards."""
    path = write(tmp_path, b"\0" * 64 + container(sass(90)))
    exe, calls = cuobjdump(tmp_path, res_usage={"stdout": res_usage(("elf", "sm_90"))})
    before = set(tmp_path.iterdir())
    found = read_binary(path, exe)
    assert found is not None and found.groups == [("sm_90",)] and found.notes == [] and found.exact
    arg = Path(json.loads(calls.read_text())[-1])
    assert arg.name == ".libx.so.fatbins.elf" and arg.parent != tmp_path and arg.parent.name.startswith("pinmatrix-")
    assert not arg.parent.exists()
    assert set(tmp_path.iterdir()) == before | {calls}


def test_entries_that_do_not_line_up_are_the_union_and_say_so(tmp_path: Path) -> None:
    path = write(tmp_path, b"\0" * 64 + container(sass(90)) + container(sass(120)))
    exe, _ = cuobjdump(tmp_path, res_usage={"stdout": res_usage(("elf", "sm_90a"), ("elf", "sm_121a"),
                                                                ("elf", "sm_90a"))})
    found = read_binary(path, exe)
    assert found == BinaryTargets(str(path), path.stat().st_size, [("sm_90a", "sm_121a")], TOOL_CUOBJDUMP, True,
                                  grouped=False,
                                  notes=["cuobjdump's 3 entries do not line up with the 2 fatbin headers found: "
                                         "targets are the union, not per kernel group"])


def test_entries_in_another_order_do_not_line_up(tmp_path: Path) -> None:
    path = write(tmp_path, b"\0" * 64 + container(sass(90)) + container(sass(120)) + container(sass(3)))
    exe, _ = cuobjdump(tmp_path, res_usage={"stdout": res_usage(("elf", "sm_120"), ("elf", "sm_90"))})
    found = read_binary(path, exe)
    assert found is not None and not found.grouped and found.groups == [("sm_120", "sm_90")]
    assert len(found.notes) == 2 and found.notes[1].startswith("1 malformed fatbin container header(s)")


def test_cuobjdump_seeing_nothing_leaves_the_header_numbers(tmp_path: Path) -> None:
    path = write(tmp_path, b"\0" * 64 + container(sass(90)))
    exe, _ = cuobjdump(tmp_path, res_usage={"stdout": "nothing\n"})
    found = read_binary(path, exe)
    assert found == BinaryTargets(str(path), path.stat().st_size, [("sm_90",)], TOOL_HEADER, False, notes=[FALLBACK])


def test_a_failing_cuobjdump_leaves_the_header_numbers_and_names_the_failure(tmp_path: Path) -> None:
    path = write(tmp_path, b"\0" * 64 + container(sass(90)) + container(sass(0)))
    exe, _ = cuobjdump(tmp_path, res_usage={"stderr": "cuobjdump fatal : bad input\n", "rc": 1})
    found = read_binary(path, exe, scratch=tmp_path)
    assert found is not None and found.tool == TOOL_HEADER and not found.exact and found.groups == [("sm_90",)]
    assert found.notes[0] == f"cuobjdump -res-usage: exit 1: cuobjdump fatal : bad input; {FALLBACK}"
    assert found.notes[1].startswith("1 malformed")
    assert not (tmp_path / ".libx.so.fatbins.elf").exists()


def test_a_scratch_folder_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, b"\0" * 64 + container(sass(90)))
    exe, calls = cuobjdump(tmp_path, res_usage={"stdout": res_usage(("elf", "sm_90"))})
    found = read_binary(path, exe, scratch=tmp_path / "absent")
    assert found is not None and found.tool == TOOL_HEADER and found.groups == [("sm_90",)]
    assert found.notes[0].startswith("[Errno 2] No such file or directory") and found.notes[0].endswith(f"; {FALLBACK}")
    assert not calls.exists()


def test_only_malformed_headers_are_named_not_targets_even_with_cuobjdump(tmp_path: Path) -> None:
    path = write(tmp_path, b"\0" * 64 + container(sass(0)) * 3)
    exe, calls = cuobjdump(tmp_path, res_usage={"stdout": res_usage(("elf", "sm_90"))})
    found = read_binary(path, exe)
    assert found == BinaryTargets(str(path), path.stat().st_size, [], TOOL_HEADER, False, grouped=False,
                                  notes=["3 malformed fatbin container header(s) (the first at offset 64: an entry "
                                         "for no real architecture), not counted as targets"])
    assert not calls.exists()


class Clock:
    """time.monotonic for the parser: the first reading, then every later one ``step`` seconds further on."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def monotonic(self) -> float:
        now, self.now = self.now, self.now + self.step
        return now


def test_a_stopped_parse_with_nothing_found_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binary, "time", Clock(100.0))  # the default 60 s are gone at the first container
    path = write(tmp_path, b"\0" * 64 + container(sass(90)))
    found = read_binary(path, None)
    assert found == BinaryTargets(str(path), path.stat().st_size, [], TOOL_HEADER, False, grouped=False,
                                  notes=["the header parser stopped at offset 64 after 0 containers and 60 s"])


def test_the_time_bound_is_sixty_seconds_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binary, "time", Clock(59.0))
    found, report = _scan(container(sass(90)) * 3)  # read at 0 (deadline 60), 59, 118: stops at the second
    assert len(found) == 1 and report.stopped == f"the header parser stopped at offset {16 + 64} after 1 containers and 60 s"


def test_a_stopped_parse_with_containers_found_keeps_them_and_says_so(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binary, "MAX_CONTAINERS", 1)
    path = write(tmp_path, b"\0" * 64 + container(sass(90)) * 2)
    found = read_binary(path, None)
    assert found is not None and found.groups == [("sm_90",)] and found.grouped
    assert found.notes == [FALLBACK, f"the header parser stopped at offset {64 + 80} after 1 containers"]


def test_a_bare_cubin_with_its_note_is_exact_without_cuobjdump(tmp_path: Path) -> None:
    path = write(tmp_path, cubin(100, note=b"-arch sm_100f -m 64"), "k.cubin")
    exe, calls = cuobjdump(tmp_path, elf={"stdout": "sm=100\n"})
    for tool in (None, exe):
        assert read_binary(path, tool) == BinaryTargets(str(path), path.stat().st_size, [("sm_100f",)], TOOL_TKINFO,
                                                        True)
    assert not calls.exists()


def test_a_cubin_note_for_another_number_is_not_believed(tmp_path: Path) -> None:
    path = write(tmp_path, cubin(100, note=b"-arch sm_90a"), "k.cubin")
    assert read_binary(path, None) == BinaryTargets(str(path), path.stat().st_size, [("sm_100",)], TOOL_HEADER,
                                                    False, notes=[FALLBACK])


def test_a_bare_cubin_without_a_note_asks_cuobjdump(tmp_path: Path) -> None:
    path = write(tmp_path, cubin(120), "k.cubin")
    exe, calls = cuobjdump(tmp_path, elf={"stdout": "x sm=120a y\n"})
    assert read_binary(path, exe, label="k") == BinaryTargets("k", path.stat().st_size, [("sm_120a",)],
                                                              TOOL_CUOBJDUMP, True)
    assert json.loads(calls.read_text()) == ["-elf", str(path)]


def test_a_bare_cubin_cuobjdump_cannot_read_falls_back_naming_why(tmp_path: Path) -> None:
    path = write(tmp_path, cubin(120), "k.cubin")
    exe, _ = cuobjdump(tmp_path, elf={"stderr": "bad elf\n", "rc": 3})
    assert read_binary(path, exe) == BinaryTargets(str(path), path.stat().st_size, [("sm_120",)], TOOL_HEADER, False,
                                                   notes=[f"cuobjdump -elf: exit 3: bad elf; {FALLBACK}"])
    exe, _ = cuobjdump(tmp_path, elf={"stdout": "nothing\n"})
    assert read_binary(path, exe) == BinaryTargets(str(path), path.stat().st_size, [("sm_120",)], TOOL_HEADER, False,
                                                   notes=[FALLBACK])


def test_a_cubin_beside_malformed_headers_is_still_read(tmp_path: Path) -> None:
    data = cubin(120) + container(sass(0))
    path = write(tmp_path, data, "k.cubin")
    found = read_binary(path, None)
    assert found is not None and found.groups == [("sm_120",)] and found.tool == TOOL_HEADER


def test_a_library_with_containers_is_not_read_as_a_cubin(tmp_path: Path) -> None:
    path = write(tmp_path, cubin(120, note=b"-arch sm_120f") + container(sass(90)), "k.cubin")
    found = read_binary(path, None)
    assert found is not None and found.groups == [("sm_90",)] and found.tool == TOOL_HEADER


def test_the_fallback_note_is_the_rules_and_words_when_they_cannot_be_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from pinmatrix import archflag

    assert binary._fallback_note() == archflag.arch_rules()["notes"]["fallback"]

    def broken() -> dict[str, object]:
        raise KeyError("notes")

    monkeypatch.setattr(binary, "arch_rules", broken)  # the name binary reads
    assert binary._fallback_note() == "fatbin header parser: it cannot see the 'a' / 'f' suffixes"


def test_names_and_numbers_of_targets() -> None:
    assert binary._names([("sass", 90), ("ptx", 120)]) == ("sm_90", "compute_120")
    assert binary._number("sm_120f") == ("sass", 120)
    assert binary._number("compute_90a") == ("ptx", 90)
    assert binary._number("sm_100") == ("sass", 100)
    with pytest.raises(AssertionError):
        binary._number("sm_90x")


def test_nothing_is_left_open(tmp_path: Path) -> None:
    path = write(tmp_path, b"\0" * 64 + container(sass(90)))
    before = set(os.listdir("/proc/self/fd"))
    read_binary(path, None)
    assert set(os.listdir("/proc/self/fd")) == before


class Clock2:
    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def monotonic(self) -> float:
        now, self.now = self.now, self.now + self.step
        return now


def test_a_parse_exactly_at_its_deadline_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binary, "time", Clock2(60.0))  # deadline 60; the first check reads 60: not past it
    found, report = _scan(container(sass(90)) * 3)
    assert len(found) == 1 and report.stopped == f"the header parser stopped at offset {16 + 64} after 1 containers and 60 s"


def test_a_count_stop_exactly_at_the_deadline_names_no_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binary, "MAX_CONTAINERS", 1)
    monkeypatch.setattr(binary, "time", Clock2(30.0))  # deadline 60; the message reads 60
    found, report = _scan(container(sass(90)) * 2)
    assert len(found) == 1 and report.stopped == f"the header parser stopped at offset {16 + 64} after 1 containers"


def test_a_containers_body_is_stepped_over_even_when_it_holds_no_entry() -> None:
    inner = container(sass(90))
    # a one-byte body that is the first byte of the next magic, and a 20-byte body holding a container header
    assert fatbin_containers(FATBIN_MAGIC + struct.pack("<HHQ", 1, 16, 1) + inner) == []
    assert fatbin_containers(container(inner[:20]) + b"\0" * 64) == []


def test_a_payload_size_with_the_top_bit_set_ends_the_container() -> None:
    wild = struct.pack("<HHIQ", 2, 0, 64, (1 << 64) - 64) + b"\0" * 12 + struct.pack("<I", 100) + b"\0" * 32
    assert fatbin_containers(container(sass(90), wild, sass(80))) == [[("sass", 90)]]


def test_stderr_that_is_not_utf_8_is_read_with_replacement(tmp_path: Path) -> None:
    exe, _ = cuobjdump(tmp_path, res_usage={"stderr_raw": "fatal \xff\xfe here\n", "rc": 2})
    with pytest.raises(ToolFailed) as failed:
        cuobjdump_entries(tmp_path / "x", exe)
    assert str(failed.value) == "cuobjdump -res-usage: exit 2: fatal \ufffd\ufffd here"


def test_only_the_last_2000_bytes_of_stderr_are_read(tmp_path: Path) -> None:
    line = "".join(chr(65 + i % 26) for i in range(3000))
    exe, _ = cuobjdump(tmp_path, res_usage={"stderr": line, "rc": 2})
    with pytest.raises(ToolFailed) as failed:
        cuobjdump_entries(tmp_path / "x", exe)
    assert str(failed.value) == f"cuobjdump -res-usage: exit 2: {line[1000:1300]}"


def test_a_cuobjdump_left_running_once_its_answer_is_read_is_killed(tmp_path: Path) -> None:
    pid = tmp_path / "pid"
    exe, _ = cuobjdump(tmp_path, elf={"stdout": "x sm=120a\n", "sleep": 60, "pid": str(pid)})
    start = time.monotonic()
    assert cuobjdump_cubin_target(tmp_path / "k.cubin", exe, timeout_s=30) == "sm_120a"
    assert time.monotonic() - start < 15
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid.read_text()}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state in ("Z", "X"):
            break
        time.sleep(0.05)
    else:
        pytest.fail("cuobjdump still running")


def test_the_smallest_file_read_is_a_bare_cubins_elf_header(tmp_path: Path) -> None:
    header = cubin(100)[:64]  # read, and named: its section table is cut off
    path = write(tmp_path, header, "k.cubin")
    found = read_binary(path, None)
    assert found is not None and found.size == 64 and found.groups == []
    assert found.notes[0].startswith("malformed cubin header: ")
    assert read_binary(write(tmp_path, header[:63], "short.cubin"), None) is None


def test_a_file_above_the_bound_is_a_whole_result_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, b"\0" * 64 + container(sass(90)))
    size = path.stat().st_size
    monkeypatch.setattr(binary, "MAX_BINARY_BYTES", size - 1)
    assert read_binary(path, None, label="pkg/x.so") == BinaryTargets(
        "pkg/x.so", size, [], TOOL_HEADER, exact=False, grouped=False,
        notes=[f"not read: {size} bytes, more than the {size - 1} a binary may have"])


def test_three_groups_line_up_entry_by_entry(tmp_path: Path) -> None:
    path = write(tmp_path, b"\0" * 64 + container(sass(90)) + container(sass(100)) + container(sass(120), entry(1, 120)))
    exe, _ = cuobjdump(tmp_path, res_usage={"stdout": res_usage(("elf", "sm_90a"), ("elf", "sm_100f"), ("elf", "sm_120a"),
                                                                ("ptx", "sm_120"))})
    assert read_binary(path, exe, label="lib/x.so") == BinaryTargets(
        "lib/x.so", path.stat().st_size, [("sm_90a",), ("sm_100f",), ("sm_120a", "compute_120")], TOOL_CUOBJDUMP, True)
