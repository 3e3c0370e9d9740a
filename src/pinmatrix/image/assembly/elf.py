"""A small, bounded ELF reader (standard library only): what the dynamic loader needs of a file, namely its
machine, its interpreter (``PT_INTERP``), the libraries it needs (``DT_NEEDED``), its ``DT_SONAME`` and its
search paths (``DT_RPATH``, ``DT_RUNPATH``). Reads go through ``read_at(offset, size)``, so a file inside a
layer's tar stream can be read without unpacking it. Every size read from the file is checked against caps
and the file's own size; a malformed header is an ``ElfError`` that says what is wrong, never a crash."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

MAGIC = b"\x7fELF"
PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 14, 15, 29
ET_EXEC, ET_DYN = 2, 3
# e_machine -> the architecture name the image config uses (others, CUDA cubins included, are not host code).
MACHINES = {62: "amd64", 183: "arm64"}
MAX_PHNUM = 4096  # program headers of one file
MAX_INTERP = 4096  # bytes of the interpreter path
MAX_DYNAMIC = 1 << 20  # bytes of the dynamic segment (64k entries)
MAX_STRSZ = 256 << 20  # bytes of the dynamic string table (a large C++ library has tens of MiB)
MAX_NEEDED = 4096  # DT_NEEDED entries of one file

ReadAt = Callable[[int, int], bytes]


class ElfError(Exception):
    """The file starts like an ELF file but its headers are malformed (the message says which)."""


@dataclass(frozen=True)
class ElfInfo:
    machine: int  # e_machine
    kind: int  # e_type
    interpreter: str | None  # PT_INTERP
    needed: tuple[str, ...]  # DT_NEEDED in order
    soname: str | None
    rpath: tuple[str, ...]  # DT_RPATH entries, split on ':'
    runpath: tuple[str, ...]  # DT_RUNPATH entries
    dynamic: bool  # has a PT_DYNAMIC segment

    @property
    def arch(self) -> str | None:
        return MACHINES.get(self.machine)


def is_elf(head: bytes) -> bool:
    return head[:4] == MAGIC


def _exact(read_at: ReadAt, offset: int, size: int, file_size: int, what: str) -> bytes:
    if offset < 0 or size < 0 or offset + size > file_size:
        raise ElfError(f"{what} (offset {offset}, {size} bytes) lies outside the file ({file_size} bytes)")
    data = read_at(offset, size)
    if len(data) != size:
        raise ElfError(f"{what}: the file ends early")
    return data


def read_elf(read_at: ReadAt, file_size: int) -> ElfInfo:
    """Parse the headers of an ELF file of ``file_size`` bytes. ElfError names what is malformed."""
    head = _header(read_at, file_size)
    loads, interp_at, dynamic_at = _segments(read_at, file_size, head)
    interpreter = None
    if interp_at is not None:
        offset, size = interp_at
        if size > MAX_INTERP:
            raise ElfError(f"PT_INTERP of {size} bytes is longer than {MAX_INTERP}")
        interpreter = _exact(read_at, offset, size, file_size, "PT_INTERP").split(b"\0", 1)[0].decode(
            "utf-8", "replace")
    if dynamic_at is None:
        return ElfInfo(head.machine, head.type, interpreter, (), None, (), (), dynamic=False)
    entries = _dynamic_entries(read_at, file_size, head, dynamic_at)
    wanted = [(t, v) for t, v in entries if t in (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH)]
    if len(wanted) > MAX_NEEDED:
        raise ElfError(f"{len(wanted)} DT_NEEDED/SONAME/RPATH entries are more than {MAX_NEEDED}")
    if not wanted:
        return ElfInfo(head.machine, head.type, interpreter, (), None, (), (), dynamic=True)
    text = _string_reader(read_at, file_size, entries, loads)
    needed = tuple(text(v) for t, v in wanted if t == DT_NEEDED)
    soname = next((text(v) for t, v in wanted if t == DT_SONAME), None)
    rpath = tuple(p for t, v in wanted if t == DT_RPATH for p in text(v).split(":") if p)
    runpath = tuple(p for t, v in wanted if t == DT_RUNPATH for p in text(v).split(":") if p)
    return ElfInfo(head.machine, head.type, interpreter, needed, soname, rpath, runpath, dynamic=True)


@dataclass(frozen=True)
class _Header:
    end: str  # struct byte order: "<" or ">"
    is64: bool
    type: int
    machine: int
    phoff: int
    phentsize: int
    phnum: int


def _header(read_at: ReadAt, file_size: int) -> _Header:
    ident = _exact(read_at, 0, 16, file_size, "the ELF identification")
    if ident[:4] != MAGIC:
        raise ElfError("not an ELF file (no \\x7fELF magic)")
    elf_class, data_enc = ident[4], ident[5]
    if elf_class not in (1, 2):
        raise ElfError(f"unknown ELF class {elf_class} (1: 32-bit, 2: 64-bit)")
    if data_enc not in (1, 2):
        raise ElfError(f"unknown ELF data encoding {data_enc} (1: little, 2: big endian)")
    end = "<" if data_enc == 1 else ">"
    is64 = elf_class == 2
    header_fmt = end + ("HHIQQQIHHHHHH" if is64 else "HHIIIIIHHHHHH")
    fields = struct.unpack(header_fmt, _exact(read_at, 16, struct.calcsize(header_fmt), file_size, "the ELF header"))
    e_type, e_machine, _, _, e_phoff, _, _, _, e_phentsize, e_phnum = fields[:10]
    return _Header(end, is64, e_type, e_machine, e_phoff, e_phentsize, e_phnum)


def _segments(read_at: ReadAt, file_size: int, head: _Header) -> tuple[
        list[tuple[int, int, int]], tuple[int, int] | None, tuple[int, int] | None]:
    """The PT_LOAD segments as (vaddr, offset, filesz), and where PT_INTERP and PT_DYNAMIC are (offset, size)."""
    ph_fmt = head.end + ("IIQQQQQQ" if head.is64 else "IIIIIIII")
    ph_size = struct.calcsize(ph_fmt)
    if head.phnum > MAX_PHNUM:
        raise ElfError(f"{head.phnum} program headers are more than the {MAX_PHNUM} this reader accepts")
    if head.phnum and head.phentsize < ph_size:
        raise ElfError(f"program header entries of {head.phentsize} bytes are smaller than the {ph_size} of the format")
    table = (_exact(read_at, head.phoff, head.phentsize * head.phnum, file_size, "the program header table")
             if head.phnum else b"")
    loads: list[tuple[int, int, int]] = []
    interp_at: tuple[int, int] | None = None
    dynamic_at: tuple[int, int] | None = None
    for i in range(head.phnum):
        raw = table[i * head.phentsize:i * head.phentsize + ph_size]
        if head.is64:
            p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack(ph_fmt, raw)
        else:
            p_type, p_offset, p_vaddr, _, p_filesz, _, _, _ = struct.unpack(ph_fmt, raw)
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_INTERP:
            interp_at = (p_offset, p_filesz)
        elif p_type == PT_DYNAMIC:
            dynamic_at = (p_offset, p_filesz)
    return loads, interp_at, dynamic_at


def _dynamic_entries(read_at: ReadAt, file_size: int, head: _Header,
                     dynamic_at: tuple[int, int]) -> list[tuple[int, int]]:
    """The dynamic segment's (tag, value) entries up to DT_NULL."""
    offset, size = dynamic_at
    if size > MAX_DYNAMIC:
        raise ElfError(f"the dynamic segment of {size} bytes is larger than {MAX_DYNAMIC}")
    dyn_fmt = head.end + ("qQ" if head.is64 else "iI")
    dyn_size = struct.calcsize(dyn_fmt)
    dynamic = _exact(read_at, offset, size - size % dyn_size, file_size, "the dynamic segment")
    entries: list[tuple[int, int]] = []
    for i in range(0, len(dynamic), dyn_size):
        tag, value = struct.unpack(dyn_fmt, dynamic[i:i + dyn_size])
        if tag == DT_NULL:
            break
        entries.append((tag, value))
    return entries


def _string_reader(read_at: ReadAt, file_size: int, entries: list[tuple[int, int]],
                   loads: list[tuple[int, int, int]]) -> Callable[[int], str]:
    """A reader of the dynamic string table (DT_STRTAB, DT_STRSZ), located through the PT_LOAD segments."""
    strtab = next((v for t, v in entries if t == DT_STRTAB), None)
    strsz = next((v for t, v in entries if t == DT_STRSZ), None)
    if strtab is None or strsz is None:
        raise ElfError("the dynamic segment names libraries but has no DT_STRTAB/DT_STRSZ")
    if strsz > MAX_STRSZ:
        raise ElfError(f"the dynamic string table of {strsz} bytes is larger than {MAX_STRSZ}")
    str_offset = next((off + strtab - vaddr for vaddr, off, filesz in loads if vaddr <= strtab < vaddr + filesz),
                      None)
    if str_offset is None:
        raise ElfError(f"DT_STRTAB {strtab:#x} lies in no PT_LOAD segment")
    strings = _exact(read_at, str_offset, strsz, file_size, "the dynamic string table")

    def text(index: int) -> str:
        if index >= len(strings):
            raise ElfError(f"a dynamic entry points at string {index}, past the table's {len(strings)} bytes")
        stop = strings.find(b"\0", index)
        return strings[index:stop if stop >= 0 else len(strings)].decode("utf-8", "replace")

    return text
