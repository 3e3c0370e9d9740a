"""Read the GPU code targets of one binary (a shared library, a fatbin file or a bare cubin).

A CUDA fat binary is a chain of containers (magic 0xBA55ED50), one per compiled unit; each holds entries of
SASS (a cubin for one ``sm_XY``) or PTX (``compute_XY``). At launch the runtime picks, within the kernel's
own container, the best entry for the GPU: so targets are kept per container ("kernel group") and a group
whose entries all miss the GPU is a set of kernels that cannot run, even when the library as a whole has
other groups that do.

Exact targets (with the 'a' / 'f' suffix) come from ``cuobjdump -res-usage``, which prints each entry's
``arch = sm_120f`` header in file order. cuobjdump reads only the ELF section .nv_fatbin, while some
libraries (cuFFT, cuBLASLt) keep most of their kernels in containers elsewhere and load them themselves:
so the header parser here finds every container by its magic, they are copied into one scratch ELF whose
.nv_fatbin holds them all, and cuobjdump's entries for it are matched to the parser's, entry by entry.
Without cuobjdump the parser alone reports numbers only and says so: it cannot see the suffixes.

Standard library only (see the package docstring).
"""

from __future__ import annotations

import mmap
import re
import shutil
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from pinmatrix.archflag import arch_rules

FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)
# A container header: the magic, a 2-byte version, a header size of 16 (searched for in C, not per magic).
_CONTAINER = re.compile(re.escape(FATBIN_MAGIC) + rb"..\x10\x00", re.DOTALL)
MAX_BINARY_BYTES = 4 << 30  # larger files are named, not read (the largest CUDA libraries are ~1.5 GB)
# An archive member (a wheel's .so, a layer's file) is extracted only while it stays near what it declares: at
# most MAX_INFLATION times its compressed size once above INFLATION_FLOOR (real libraries deflate 1-5x; a
# 510 KB member declaring 512 MiB is 1000x), never past its declared size, and at most MAX_EXTRACTED_BYTES
# from one archive in total.
MAX_INFLATION = 100
INFLATION_FLOOR = 16 << 20
MAX_EXTRACTED_BYTES = 24 << 30
MAX_CONTAINERS = 65536  # fatbin containers read from one file
SCAN_SECONDS = 60.0  # the header parser's time for one file
_ARCHS = range(10, 1000)  # sm_10 ... sm_999: an entry naming another number is a malformed header
ELF_MAGIC = b"\x7fELF"
EM_CUDA = 190
# Entry kinds in a fatbin entry header: 1 = PTX, 2 = ELF (SASS); 0x10 is taken as SASS too.
_PTX_KINDS = {1}
_SASS_KINDS = {2, 0x10}
_ARCH_LINE = re.compile(r"^arch = (sm_\d+[af]?)\s*$")
_KIND_LINE = re.compile(r"^Fatbin (elf|ptx) code:")
_ELF_SM = re.compile(r"\bsm=(\d+[af]?)\b")

TOOL_CUOBJDUMP = "cuobjdump"
TOOL_HEADER = "fatbin-header"
TOOL_TKINFO = "cubin-note"  # a bare cubin's .note.nv.tkinfo (ptxas's -arch, suffix included)


@dataclass
class BinaryTargets:
    """The targets of one binary. ``groups``: one tuple per fatbin container, its entries in file order,
    as 'sm_121a' (SASS) / 'compute_120f' (PTX); numbers only ('sm_121') when ``exact`` is False."""

    path: str
    size: int
    groups: list[tuple[str, ...]]
    tool: str
    exact: bool
    grouped: bool = True  # False: the groups could not be told apart, ``groups`` is one union
    notes: list[str] = field(default_factory=list)

    @property
    def targets(self) -> list[str]:
        found = {t for g in self.groups for t in g}
        return sorted(found, key=_target_key)

    @property
    def sass(self) -> list[str]:
        return [t for t in self.targets if t.startswith("sm_")]

    @property
    def ptx(self) -> list[str]:
        return [t for t in self.targets if t.startswith("compute_")]

    def to_dict(self) -> dict:
        return {"path": self.path, "size": self.size, "tool": self.tool, "exact": self.exact,
                "grouped": self.grouped, "groups": [list(g) for g in self.groups], "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, data: dict) -> BinaryTargets:
        return cls(path=data["path"], size=data["size"], groups=[tuple(g) for g in data["groups"]],
                   tool=data["tool"], exact=data["exact"], grouped=data.get("grouped", True),
                   notes=list(data.get("notes", [])))


def _target_key(t: str) -> tuple[int, int, str, int]:
    m = re.match(r"^(sm|compute)_(\d+?)(\d)([af]?)$", t)
    if not m:
        return (0, 0, t, 0)
    return (int(m.group(2)), int(m.group(3)), m.group(4), 0 if m.group(1) == "sm" else 1)


# --- the fatbin header parser ------------------------------------------------------------------------------
@dataclass
class _Scan:
    malformed: int = 0  # containers whose entries name no real architecture
    first_malformed: int | None = None  # offset of the first
    stopped: str | None = None  # why the parser stopped before the end of the file


def _scan(data: bytes | mmap.mmap, seconds: float = SCAN_SECONDS) -> tuple[list[tuple[int, int, list[tuple[str, int]]]],
                                                                          _Scan]:
    """(start, end, entries) of every fatbin container: those the CUDA runtime registers (the ELF section
    .nv_fatbin) and those a library keeps elsewhere and loads itself (cuFFT, cuBLASLt keep most kernels in
    .data), found by their magic and checked header by header; and what it refused: a container with an entry
    for an architecture outside sm_10 .. sm_999 (sm_0 is a malformed header, not a target) is counted as
    malformed, not found; at most ``MAX_CONTAINERS`` containers and ``seconds`` of parsing."""
    found: list[tuple[int, int, list[tuple[str, int]]]] = []
    report = _Scan()
    size = len(data)
    deadline = time.monotonic() + seconds
    m = _CONTAINER.search(data)
    while m is not None and m.start() + 16 <= size:
        pos = m.start()
        if len(found) + report.malformed >= MAX_CONTAINERS or time.monotonic() > deadline:
            report.stopped = (f"the header parser stopped at offset {pos} after {len(found) + report.malformed} "
                              f"containers" + ("" if time.monotonic() <= deadline else f" and {seconds:g} s"))
            break
        _, _version, header, body = struct.unpack_from("<IHHQ", data, pos)
        end = pos + header + body
        if end > size or body == 0:
            m = _CONTAINER.search(data, pos + 4)
            continue
        entries: list[tuple[str, int]] = []
        bad = False
        entry = pos + header
        while entry + 32 <= end:
            kind, _unknown, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            if entry_header < 64 or entry_header > 4096 or entry + entry_header + payload > end:
                break
            if kind in _PTX_KINDS or kind in _SASS_KINDS:
                if arch not in _ARCHS:
                    bad = True
                    break
                entries.append(("ptx" if kind in _PTX_KINDS else "sass", arch))
            entry += entry_header + payload
        if bad:
            report.malformed += 1
            report.first_malformed = pos if report.first_malformed is None else report.first_malformed
        elif entries:
            found.append((pos, end, entries))
        m = _CONTAINER.search(data, max(end, pos + 4) if not bad else pos + 4)
    return found, report


def wrap_containers(data: bytes | mmap.mmap, spans: list[tuple[int, int]], out: Path) -> None:
    """Write the containers at ``spans`` into a minimal ELF file whose one .nv_fatbin section holds them, so
    that cuobjdump, which reads only that section, lists every one of them in order."""
    machine = struct.unpack_from("<H", data, 18)[0] if data[:4] == ELF_MAGIC else 62  # EM_X86_64
    names = b"\0.nv_fatbin\0.shstrtab\0"
    body_at = 0x100
    with open(out, "wb") as fh:
        fh.write(b"\0" * body_at)
        for start, end in spans:
            fh.write(data[start:end])
            fh.write(b"\0" * (-(end - start) % 8))
        names_at = fh.tell()
        fh.write(names)
        fh.write(b"\0" * (-fh.tell() % 8))
        headers_at = fh.tell()
        body = names_at - body_at
        fh.write(b"\0" * 64)  # SHN_UNDEF
        fh.write(struct.pack("<IIQQQQIIQQ", 1, 1, 2, body_at, body_at, body, 0, 0, 8, 0))  # .nv_fatbin
        fh.write(struct.pack("<IIQQQQIIQQ", 12, 3, 0, 0, names_at, len(names), 0, 0, 1, 0))  # .shstrtab
        fh.seek(0)
        fh.write(b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
                 + struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, 0, headers_at, 0, 64, 0, 0, 64, 3, 2))


def _cubin_number(data: bytes | mmap.mmap) -> int | None:
    """The sm number of a bare cubin (an ELF for EM_CUDA) from its e_flags, or None for other files."""
    if len(data) < 52 or data[:4] != ELF_MAGIC or data[4] != 2:  # 64-bit ELF only
        return None
    machine = struct.unpack_from("<H", data, 18)[0]
    if machine != EM_CUDA:
        return None
    flags = struct.unpack_from("<I", data, 48)[0]
    abi = data[8]
    return (flags >> 8) & 0xFF if abi >= 8 else flags & 0xFF


def _cubin_malformed(data: bytes | mmap.mmap, number: int) -> str | None:
    """Why a bare cubin's header is malformed (its number is no real architecture, or its section table lies
    outside the file: a header cut short), or None."""
    if number not in _ARCHS:
        return f"malformed cubin header: e_flags name sm_{number}, no real architecture; not counted as a target"
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    if shentsize < 64 or shnum == 0 or shoff + shnum * shentsize > len(data):
        return (f"malformed cubin header: its {shnum} section header(s) at offset {shoff} lie outside its "
                f"{len(data)} bytes (a header cut short); not counted as a target")
    return None


_TKINFO_ARCH = re.compile(rb"-arch[ =](sm_\d+[af]?)(?![0-9a-z])")


def _cubin_note_target(data: bytes | mmap.mmap) -> str | None:
    """The exact target of a bare cubin from its ``.note.nv.tkinfo`` note: ptxas records its command line there
    (``-arch sm_100f -m 64``). e_flags and cuobjdump's ``sm=`` field drop the family suffix (an sm_100f cubin
    reads as sm_100 in both), the note keeps it. None when the cubin has no such note."""
    try:
        shoff = struct.unpack_from("<Q", data, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        if shentsize < 64 or not 0 < shnum <= 65535 or shstrndx >= shnum or shoff + shnum * shentsize > len(data):
            return None
        sections = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
        names_at, names_size = sections[shstrndx][4], sections[shstrndx][5]
        if names_at + names_size > len(data):
            return None
        names = bytes(data[names_at:names_at + names_size])
        for name, _type, _flags, _addr, offset, size in sections:
            end = names.find(b"\0", name)
            if names[name:end] == b".note.nv.tkinfo" and offset + size <= len(data) and size <= 1 << 16:
                m = _TKINFO_ARCH.search(bytes(data[offset:offset + size]))
                return m.group(1).decode() if m else None
    except struct.error:
        return None
    return None


# --- extraction from an archive ------------------------------------------------------------------------------
@dataclass
class Extraction:
    """The bytes one archive (a wheel, a layer) may still extract; ``refusal`` says why a member is not taken."""

    limit: int = field(default_factory=lambda: MAX_EXTRACTED_BYTES)
    extracted: int = 0

    def refusal(self, declared: int, compressed: int | None) -> str | None:
        """Why a member declaring ``declared`` bytes from ``compressed`` (None: unknown) is not extracted."""
        if declared > MAX_BINARY_BYTES:
            return f"not read: {declared} bytes, more than the {MAX_BINARY_BYTES} a binary may have"
        if compressed is not None and declared > INFLATION_FLOOR and declared > MAX_INFLATION * max(compressed, 1):
            return (f"not extracted: it declares {declared} bytes from {compressed} compressed, more than "
                    f"{MAX_INFLATION} times its size")
        if self.extracted + declared > self.limit:
            return (f"not extracted: {declared} more bytes would pass the {self.limit} one archive may extract "
                    f"({self.extracted} so far)")
        return None

    def copy(self, src: IO[bytes], dst: Path, declared: int) -> str | None:
        """Copy at most ``declared`` bytes of ``src`` into ``dst``; why not, when it holds more (the copy is
        removed) or cannot be read."""
        try:
            with open(dst, "wb") as out:
                shutil.copyfileobj(_Capped(src, declared + 1), out, 1 << 20)
                written = out.tell()
        except Exception as exc:  # noqa: BLE001 - zipfile.BadZipFile, zlib.error, tarfile's: named, never a crash
            dst.unlink(missing_ok=True)
            return f"not extracted: {type(exc).__name__}: {str(exc)[:200]}"
        self.extracted += min(written, declared)
        if written > declared:
            dst.unlink(missing_ok=True)
            return f"not extracted: it holds more than the {declared} bytes it declares"
        return None


class _Capped:
    """A reader that gives at most ``left`` bytes of ``src``."""

    def __init__(self, src: IO[bytes], left: int) -> None:
        self._src, self._left = src, left

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        data = self._src.read(n) if n else b""
        self._left -= len(data)
        return data


# --- cuobjdump ------------------------------------------------------------------------------------------------
class ToolFailed(Exception):
    """cuobjdump could not read a file it was given."""


def _lines(argv: list[str], timeout_s: float) -> Iterator[str]:
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: obfuscated entries warn once each
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, errors="replace")
        except OSError as exc:  # not executable here (an x86_64 cuobjdump in an aarch64 image, say)
            raise ToolFailed(f"{argv[0]}: {exc}") from None
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            proc.kill()

        # the time bound holds while its output is read too: a tool that hangs with its stdout open is killed
        timer = threading.Timer(timeout_s, expire)
        timer.start()
        try:
            assert proc.stdout is not None
            yield from proc.stdout
            proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err.seek(0)
        tail = err.read()[-2000:].decode("utf-8", "replace")
    if expired.is_set():
        raise ToolFailed(f"{Path(argv[0]).name} {' '.join(argv[1:-1])}: did not finish within {timeout_s:g} s")
    if proc.returncode not in (0, None) and "does not contain device code" not in tail:
        last = [ln for ln in tail.splitlines() if ln.strip()][-1:] or [""]
        raise ToolFailed(f"{Path(argv[0]).name} {' '.join(argv[1:-1])}: exit {proc.returncode}: {last[0][:300]}")


def cuobjdump_entries(path: Path, exe: str, timeout_s: float = 900) -> list[tuple[str, str]]:
    """('sass' | 'ptx', exact target) per fatbin entry of ``path``, in file order, from the ``arch =``
    header cuobjdump prints for each entry (``-res-usage``: headers plus one line per function; the
    ``--list-elf`` names drop the family suffix, sm_120f cubins list as sm_120)."""
    out: list[tuple[str, str]] = []
    kind: str | None = None
    for line in _lines([exe, "-res-usage", str(path)], timeout_s):
        m = _KIND_LINE.match(line)
        if m:
            kind = "sass" if m.group(1) == "elf" else "ptx"
            continue
        if kind is not None:
            a = _ARCH_LINE.match(line)
            if a:
                name = a.group(1)
                out.append((kind, name if kind == "sass" else name.replace("sm_", "compute_", 1)))
                kind = None
    return out


def cuobjdump_cubin_target(path: Path, exe: str, timeout_s: float = 300) -> str | None:
    """The exact target of a bare cubin: the ``sm=`` field of cuobjdump's ELF header line."""
    for line in _lines([exe, "-elf", str(path)], timeout_s):
        m = _ELF_SM.search(line)
        if m:
            return f"sm_{m.group(1)}"
    return None


# --- one binary -----------------------------------------------------------------------------------------------
def _number(target: str) -> tuple[str, int]:
    m = re.match(r"^(sm|compute)_(\d+)[af]?$", target)
    assert m, target
    return ("sass" if m.group(1) == "sm" else "ptx", int(m.group(2)))


def _names(entries: list[tuple[str, int]]) -> tuple[str, ...]:
    return tuple(f"{'sm' if k == 'sass' else 'compute'}_{n}" for k, n in entries)


def read_binary(path: Path, cuobjdump: str | None, *, label: str | None = None,
                scratch: Path | None = None) -> BinaryTargets | None:
    """The GPU targets of ``path``; None when it holds no device code. ``label`` names it in the result
    (e.g. the path inside a wheel); ``scratch`` is a folder for the re-wrapped containers (default: a private
    temporary folder, removed afterwards: never beside ``path``, whose folder may be read-only, as an image's root
    in the sandbox is)."""
    path = Path(path)
    size = path.stat().st_size
    name = label or str(path)
    if size < 64:
        return None
    if size > MAX_BINARY_BYTES:
        return BinaryTargets(name, size, [], TOOL_HEADER, exact=False, grouped=False,
                             notes=[f"not read: {size} bytes, more than the {MAX_BINARY_BYTES} a binary may have"])
    fallback_note = _fallback_note()
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        found, scanned = _scan(data)
        refused = ([f"{scanned.malformed} malformed fatbin container header(s) (the first at offset "
                    f"{scanned.first_malformed}: an entry for no real architecture), not counted as targets"]
                   if scanned.malformed else []) + ([scanned.stopped] if scanned.stopped else [])
        if refused and not found and _cubin_number(data) is None:
            return BinaryTargets(name, size, [], TOOL_HEADER, exact=False, grouped=False, notes=refused)
        cubin = _cubin_number(data) if not found else None
        containers = [entries for _, _, entries in found]
        malformed = _cubin_malformed(data, cubin) if cubin is not None else None
        if malformed is not None:
            return BinaryTargets(name, size, [], TOOL_HEADER, exact=False, grouped=False, notes=[malformed])
        if cubin is not None:
            noted = _cubin_note_target(data)
            if noted is not None and _number(noted) == ("sass", cubin):
                return BinaryTargets(name, size, [(noted,)], TOOL_TKINFO, exact=True)
            if cuobjdump:
                try:
                    target = cuobjdump_cubin_target(path, cuobjdump)
                except ToolFailed as err:
                    target = None
                    fallback_note = f"{err}; {fallback_note}"
                if target:
                    return BinaryTargets(name, size, [(target,)], TOOL_CUOBJDUMP, exact=True)
            return BinaryTargets(name, size, [(f"sm_{cubin}",)], TOOL_HEADER, exact=False, notes=[fallback_note])
        if not containers:
            return None
        entries: list[tuple[str, str]] | None = None
        if cuobjdump:
            own = Path(tempfile.mkdtemp(prefix="pinmatrix-fatbins-")) if scratch is None else None
            wrapped = (scratch or own or path.parent) / f".{path.name}.fatbins.elf"
            try:
                wrap_containers(data, [(start, end) for start, end, _ in found], wrapped)
                entries = cuobjdump_entries(wrapped, cuobjdump)
            except (ToolFailed, OSError) as err:
                fallback_note = f"{err}; {fallback_note}"
            finally:
                if own is not None:
                    shutil.rmtree(own, ignore_errors=True)
                else:
                    wrapped.unlink(missing_ok=True)
    if entries is not None:
        flat = [e for c in containers for e in c]
        if [_number(t) for _, t in entries] == flat:
            groups: list[tuple[str, ...]] = []
            i = 0
            for c in containers:
                groups.append(tuple(t for _, t in entries[i:i + len(c)]))
                i += len(c)
            return BinaryTargets(name, size, groups, TOOL_CUOBJDUMP, exact=True, notes=refused)
        if entries:
            return BinaryTargets(
                name, size, [tuple(dict.fromkeys(t for _, t in entries))], TOOL_CUOBJDUMP, exact=True,
                grouped=False,
                notes=[f"cuobjdump's {len(entries)} entries do not line up with the {len(flat)} fatbin "
                       "headers found: targets are the union, not per kernel group", *refused])
    return BinaryTargets(name, size, [_names(c) for c in containers], TOOL_HEADER, exact=False,
                         notes=[fallback_note, *refused])


def _fallback_note() -> str:
    try:
        return str(arch_rules()["notes"]["fallback"])
    except Exception:  # noqa: BLE001 - the note is words only
        return "fatbin header parser: it cannot see the 'a' / 'f' suffixes"
