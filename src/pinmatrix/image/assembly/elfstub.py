"""A link stub written as data: a 64-bit little-endian ELF shared object with a ``DT_SONAME``, no symbols and no
code, for ``-lcuda`` at link time (the driver's own libcuda.so.1 is what loads at run time).

The stub used to be compiled with the build host's C compiler, so its bytes, hence the link layer and every image
digest above it, changed with the host's gcc and binutils (a build on another distribution gave another digest
from the same inputs). Here every byte follows from the machine and the SONAME alone. The file holds what the
GNU linker reads of a shared library (``.dynsym``, ``.dynstr``, ``.dynamic`` and their section headers) and what
the dynamic loader needs to map it (one ``PT_LOAD``, ``PT_DYNAMIC``, a ``DT_HASH`` table)."""

from __future__ import annotations

import struct

# e_machine of the machines a cell may be built for (the names aot_plan.cell_machine gives)
E_MACHINE = {"x86_64": 62, "aarch64": 183}

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")  # Elf64_Ehdr
_PHDR = struct.Struct("<IIQQQQQQ")  # Elf64_Phdr
_SHDR = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr
_DYN = struct.Struct("<qQ")  # Elf64_Dyn
_SYM_SIZE = 24  # Elf64_Sym
ET_DYN, EV_CURRENT = 3, 1
PT_LOAD, PT_DYNAMIC = 1, 2
PF_W, PF_R = 2, 4
SHT_STRTAB, SHT_HASH, SHT_DYNAMIC, SHT_DYNSYM = 3, 5, 6, 11
SHF_WRITE, SHF_ALLOC = 1, 2
DT_NULL, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SYMENT, DT_SONAME = 0, 4, 5, 6, 10, 11, 14
_SECTIONS = (".dynsym", ".dynstr", ".hash", ".dynamic", ".shstrtab")  # indexes 1..5, 0 is the null section


class StubError(ValueError):
    """The stub cannot be written for this machine or name."""


def _align(offset: int, to: int = 8) -> int:
    return (offset + to - 1) // to * to


def link_stub(machine: str, soname: str) -> bytes:
    """The bytes of a shared object for ``machine`` (x86_64, aarch64) whose ``DT_SONAME`` is ``soname``."""
    if machine not in E_MACHINE:
        raise StubError(f"no link stub for machine {machine!r} (known: {', '.join(sorted(E_MACHINE))})")
    if not soname or not soname.isascii() or not soname.isprintable() or "/" in soname:
        raise StubError(f"a link stub's SONAME is a file name, not {soname!r}")
    dynstr = b"\0" + soname.encode() + b"\0"
    shstrtab = b"\0" + b"".join(name.encode() + b"\0" for name in _SECTIONS)
    dynsym_at = _EHDR.size + 2 * _PHDR.size
    dynstr_at = dynsym_at + _SYM_SIZE  # one symbol: the null one
    hash_at = _align(dynstr_at + len(dynstr))
    hash_table = struct.pack("<4I", 1, 1, 0, 0)  # nbucket, nchain, bucket[0], chain[0]: no symbol to find
    dynamic_at = hash_at + len(hash_table)
    dynamic = b"".join(_DYN.pack(tag, value) for tag, value in (
        (DT_HASH, hash_at), (DT_STRTAB, dynstr_at), (DT_SYMTAB, dynsym_at), (DT_STRSZ, len(dynstr)),
        (DT_SYMENT, _SYM_SIZE), (DT_SONAME, 1), (DT_NULL, 0)))
    loaded_end = dynamic_at + len(dynamic)
    shstrtab_at = loaded_end
    sections_at = _align(shstrtab_at + len(shstrtab))

    def name(section: str) -> int:
        return shstrtab.index(b"\0" + section.encode() + b"\0") + 1

    ident = b"\x7fELF" + bytes([2, 1, EV_CURRENT]) + bytes(9)  # ELFCLASS64, ELFDATA2LSB, System V ABI
    header = _EHDR.pack(ident, ET_DYN, E_MACHINE[machine], EV_CURRENT, 0, _EHDR.size, sections_at, 0, _EHDR.size,
                        _PHDR.size, 2, _SHDR.size, len(_SECTIONS) + 1, len(_SECTIONS))
    programs = (_PHDR.pack(PT_LOAD, PF_R | PF_W, 0, 0, 0, loaded_end, loaded_end, 0x1000)
                + _PHDR.pack(PT_DYNAMIC, PF_R | PF_W, dynamic_at, dynamic_at, dynamic_at, len(dynamic), len(dynamic), 8))
    sections = bytes(_SHDR.size) + b"".join((
        _SHDR.pack(name(".dynsym"), SHT_DYNSYM, SHF_ALLOC, dynsym_at, dynsym_at, _SYM_SIZE, 2, 1, 8, _SYM_SIZE),
        _SHDR.pack(name(".dynstr"), SHT_STRTAB, SHF_ALLOC, dynstr_at, dynstr_at, len(dynstr), 0, 0, 1, 0),
        _SHDR.pack(name(".hash"), SHT_HASH, SHF_ALLOC, hash_at, hash_at, len(hash_table), 1, 0, 8, 4),
        _SHDR.pack(name(".dynamic"), SHT_DYNAMIC, SHF_WRITE | SHF_ALLOC, dynamic_at, dynamic_at, len(dynamic), 2, 0,
                   8, _DYN.size),
        _SHDR.pack(name(".shstrtab"), SHT_STRTAB, 0, 0, shstrtab_at, len(shstrtab), 0, 0, 1, 0),
    ))
    body = header + programs + bytes(_SYM_SIZE) + dynstr
    body += bytes(hash_at - len(body)) + hash_table + dynamic + shstrtab
    return body + bytes(sections_at - len(body)) + sections
