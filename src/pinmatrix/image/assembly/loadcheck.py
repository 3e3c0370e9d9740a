"""Will the image's programs start? A static check, as data, without running anything (no emulation): the
image's layers are read in order into one file tree (whiteouts applied, symlinks followed), and every ELF file
built for the image's architecture must find its interpreter (``PT_INTERP``) and each library it needs
(``DT_NEEDED``) inside that tree, searched the way the dynamic loader does: ``DT_RPATH`` (when there is no
``DT_RUNPATH``) with ``$ORIGIN`` honoured, the config's ``LD_LIBRARY_PATH``, ``DT_RUNPATH``, the ld.so.cache
directories (when the image has a cache) and the system directories (``data/runnable.toml``, its model in
``project/runnable_rules``). A library
found by none of them but shipped elsewhere in the image under that name counts as found: the loader reuses
an already loaded library of that soname (torch loads its CUDA libraries before the extensions that need
them). The GPU driver's libraries (libcuda.so.1, ...) come from the host at run time: an allow-list with the
reason, as data."""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import posixpath
import shutil
import tarfile
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from pinmatrix.atomic import atomic_write_text
from pinmatrix.image.assembly.elf import MACHINES, ElfError, ElfInfo, is_elf, read_elf
from pinmatrix.oci.layer import open_layer
from pinmatrix.project.runnable_rules import RunnableRules, default_rules

PREFIX = 64 << 20  # bytes of an ELF file kept while its layer streams past (its headers and string table)
MAX_CONF = 64 << 10  # bytes of one ld.so.conf file read
MAX_LINKS = 40  # symlinks followed for one path (the kernel's limit)
MAX_SHOWN = 400  # ELF paths named in one error line group
SCAN_FORMAT = 1  # what a kept layer scan holds (layer_scan); another format is read again
Op = tuple[str, str, "str | bytes | ElfInfo"]  # (what, path, its link target, text, ELF headers or error)


@dataclass(frozen=True)
class Problem:
    path: str  # the ELF file, absolute in the image
    what: str  # "its interpreter /lib/ld-linux-aarch64.so.1 is not in the image"
    optional: str = ""  # why it does not fail the build: the file is loaded only when asked (runnable.toml)


@dataclass
class ImageTree:
    """The image's files after every layer: path (no leading '/') -> kind ('file', 'dir', 'link') and a link's
    target; the ELF headers of its files; ELF files whose headers are malformed; small config files."""

    entries: dict[str, tuple[str, str]] = field(default_factory=dict)
    elves: dict[str, ElfInfo] = field(default_factory=dict)
    malformed: dict[str, str] = field(default_factory=dict)
    texts: dict[str, bytes] = field(default_factory=dict)

    def copy(self) -> ImageTree:
        """Another tree with the same entries (its values are never changed in place, so one level is enough)."""
        return ImageTree(dict(self.entries), dict(self.elves), dict(self.malformed), dict(self.texts))

    def remove(self, path: str) -> None:
        below = path + "/"
        for table in (self.entries, self.elves, self.malformed, self.texts):
            for key in [k for k in table if k == path or k.startswith(below)]:
                del table[key]

    def add(self, path: str, kind: str, target: str = "") -> None:
        """An entry of a later layer replaces what was at its path (a directory's contents too, unless it is a
        directory again: then the layers' contents merge)."""
        parts = path.split("/")
        for i in range(1, len(parts)):
            self.entries.setdefault("/".join(parts[:i]), ("dir", ""))
        previous = self.entries.get(path, ("", ""))[0]
        if previous and not (previous == "dir" and kind == "dir"):
            self.remove(path)
        self.entries[path] = (kind, target)

    def resolve(self, path: str) -> str | None:
        """The path with every symlink followed (None: it does not exist, or loops)."""
        parts = [p for p in path.split("/") if p and p != "."]
        current: list[str] = []
        hops = 0
        while parts:
            part = parts.pop(0)
            if part == "..":
                if current:
                    current.pop()
                continue
            candidate = "/".join([*current, part])
            kind, target = self.entries.get(candidate, ("", ""))
            if not kind:
                return None
            if kind == "link":
                hops += 1
                if hops > MAX_LINKS:
                    return None
                if target.startswith("/"):
                    current = []
                parts = [p for p in target.split("/") if p and p != "."] + parts
                continue
            current.append(part)
        return "/".join(current)

    def file(self, path: str) -> str | None:
        real = self.resolve(path)
        return real if real is not None and self.entries.get(real, ("", ""))[0] == "file" else None


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class _Window:
    """Random reads of a file that streams past once: the first ``PREFIX`` bytes are kept, later ones can be read
    only in order. A read behind the stream raises _Behind (the file is then read again, whole, from a copy)."""

    def __init__(self, stream: _Readable, prefix: int = PREFIX) -> None:
        self.stream = stream
        self.prefix = prefix
        self.kept = bytearray()
        self.position = 0  # bytes taken from the stream

    def _take(self, size: int) -> bytes:
        data = self.stream.read(size)
        self.position += len(data)
        return data

    def read_at(self, offset: int, size: int) -> bytes:
        end = offset + size
        if end <= self.prefix:
            while self.position < end:
                chunk = self._take(min(1 << 20, end - self.position))
                if not chunk:
                    break
                self.kept += chunk
            return bytes(self.kept[offset:end])
        if offset < self.position:
            raise _Behind
        while self.position < offset:
            skipped = self._take(min(1 << 20, offset - self.position))
            if not skipped:
                return b""
            if len(self.kept) < self.prefix:
                self.kept += skipped[: self.prefix - len(self.kept)]
        data = self._take(size)
        if len(self.kept) < self.prefix:
            self.kept += data[: self.prefix - len(self.kept)]
        return data


class _Behind(Exception):
    pass


def _read_member(stream: _Readable, size: int) -> ElfInfo:
    window = _Window(stream)
    return read_elf(window.read_at, size)


def _member_name(member: tarfile.TarInfo) -> str:
    return posixpath.normpath("/" + member.name.removeprefix("./")).lstrip("/")


def read_tree(layers: Iterable[tuple[Path, str]], arch: str, scans: Path | None = None) -> ImageTree:
    """The file tree of layers (blob path, media type) applied in order; the ELF headers of every file built for
    ``arch`` (amd64, arm64) that has an interpreter or a dynamic segment. ``scans``: a folder where each
    content-addressed blob's reading is kept (``LayerScan``), so a layer shared by many images is read once.

    With ``scans`` and every blob named by its digest (as ``layer_scan`` keeps scans), the tree before each of an
    image's last ``KEPT_TAIL`` layers is kept in this process, by the layers' digests: an image that shares all but its last few layers with one just checked
    (the int64 cell's patch layer after the plain cell's wheels) starts from there. A kept tree is copied both ways,
    so no caller changes another's."""
    layers = list(layers)
    machine = next((m for m, name in MACHINES.items() if name == arch), None)
    addressed = all(_scan_path(scans, blob, machine) is not None for blob, _ in layers)
    where = (machine, str(scans))
    names = tuple(f"{blob.name} {media_type}" for blob, media_type in layers) if addressed else None
    start, tree = _kept_prefix(where, names) if names is not None else (0, ImageTree())
    for i in range(start, len(layers)):
        if names is not None and 0 < i and len(layers) - i <= KEPT_TAIL:
            _keep_prefix(where, names[:i], tree)
        _apply(tree, layer_scan(*layers[i], machine, scans))
    return tree


KEPT_TAIL = 6  # trees kept before each of an image's last layers (where sibling cells' images part)
KEPT_TREES = 12  # kept trees in all, the least recently used dropped first
_Where = tuple[int | None, str]  # the ELF machine and the scans folder a kept tree was read with
_kept: dict[tuple[_Where, tuple[str, ...]], ImageTree] = {}
_kept_lock = threading.Lock()


def _kept_prefix(where: _Where, names: tuple[str, ...]) -> tuple[int, ImageTree]:
    """The longest kept prefix of the layers ``names``: how many layers it has and a copy of its tree (0 and an
    empty tree: none)."""
    with _kept_lock:
        for length in range(len(names), 0, -1):
            found = _kept.pop((where, names[:length]), None)
            if found is not None:
                _kept[(where, names[:length])] = found  # the most recently used last
                return length, found.copy()
    return 0, ImageTree()


def _keep_prefix(where: _Where, names: tuple[str, ...], tree: ImageTree) -> None:
    with _kept_lock:
        _kept.pop((where, names), None)
        _kept[(where, names)] = tree.copy()
        while len(_kept) > KEPT_TREES:
            del _kept[next(iter(_kept))]


def layer_scan(blob: Path, media_type: str, machine: int | None, scans: Path | None = None) -> list[Op]:
    """What one layer does to the tree, as operations in order (``_apply``); kept in ``scans`` under the blob's
    digest, which is its file name in an OCI layout."""
    kept = _scan_path(scans, blob, machine)
    if kept is not None:
        found = _read_scan(kept)
        if found is not None:
            return found
    ops = _scan(blob, media_type, machine)
    if kept is not None:
        kept.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(kept, json.dumps({"format": SCAN_FORMAT, "ops": [_op_json(op) for op in ops]}))
    return ops


@contextmanager
def scanned_beside(layers: Sequence[tuple[Path, str]], arch: str, scans: Path) -> Iterator[None]:
    """While the caller's block runs (a long step that leaves a core idle, such as nvcc), each layer's scan is
    made in a thread and kept in ``scans``, so the check after the block reads them from there. A layer whose
    scan fails here is left to that check, which reads it again and reports what is wrong; the block's own
    error stops the thread at its next layer."""
    machine = next((m for m, name in MACHINES.items() if name == arch), None)
    stop = threading.Event()

    def scan_all() -> None:
        for blob, media_type in layers:
            if stop.is_set():
                return
            try:
                layer_scan(blob, media_type, machine, scans)
            except Exception:  # noqa: BLE001, S112 - the check after the block reads this layer again and says why
                continue

    thread = threading.Thread(target=scan_all, name="runnable-scans", daemon=True)
    thread.start()
    try:
        yield
    except BaseException:
        stop.set()
        raise
    finally:
        thread.join()


def _scan_path(scans: Path | None, blob: Path, machine: int | None) -> Path | None:
    name = blob.name
    if scans is None or len(name) != 64 or any(c not in "0123456789abcdef" for c in name):
        return None
    return scans / f"{name}-{machine}-v{SCAN_FORMAT}.json"


def _op_json(op: Op) -> list[object]:
    kind, path, extra = op
    if isinstance(extra, ElfInfo):
        return [kind, path, dataclasses.asdict(extra)]
    if isinstance(extra, bytes):
        return [kind, path, extra.decode("latin-1")]
    return [kind, path, extra]


def _read_scan(path: Path) -> list[Op] | None:
    """A kept scan, or None where it is missing or not one (then the layer is read again)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != SCAN_FORMAT:
            return None
        ops: list[Op] = []
        for kind, name, extra in data["ops"]:
            if kind == "elf":
                extra = _elf_info(extra)
            elif kind == "text":
                extra = extra.encode("latin-1")
            ops.append((kind, name, extra))
        return ops
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _elf_info(data: dict[str, object]) -> ElfInfo:
    """ElfInfo from a kept scan, each field of its type (ValueError otherwise)."""
    def strings(key: str) -> tuple[str, ...]:
        value = data[key]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(key)
        return tuple(value)

    def optional(key: str) -> str | None:
        value = data[key]
        if value is not None and not isinstance(value, str):
            raise ValueError(key)
        return value

    machine, kind, dynamic = data["machine"], data["kind"], data["dynamic"]
    if type(machine) is not int or type(kind) is not int or type(dynamic) is not bool:
        raise ValueError("machine")
    return ElfInfo(machine=machine, kind=kind, interpreter=optional("interpreter"), needed=strings("needed"),
                   soname=optional("soname"), rpath=strings("rpath"), runpath=strings("runpath"), dynamic=dynamic)


def _scan(blob: Path, media_type: str, machine: int | None) -> list[Op]:
    ops: list[Op] = []
    again: list[str] = []
    with open_layer(blob, media_type) as tar:
        for member in tar:
            name = _member_name(member)
            if not name:
                continue
            base = posixpath.basename(name)
            if base.startswith(".wh."):
                parent = posixpath.dirname(name)
                if base == ".wh..wh..opq":
                    ops.append(("opaque", parent, ""))
                else:
                    ops.append(("whiteout", posixpath.join(parent, base.removeprefix(".wh.")), ""))
                continue
            if member.isdir():
                ops.append(("dir", name, ""))
            elif member.issym():
                ops.append(("link", name, member.linkname))
            elif member.islnk():
                ops.append(("hardlink", name, _member_name(tarfile.TarInfo(member.linkname))))
            elif member.isreg():
                ops.append(("file", name, ""))
                handle = tar.extractfile(member)
                if handle is None:
                    continue
                if (name == "etc/ld.so.conf" or name.startswith("etc/ld.so.conf.d/")) and member.size <= MAX_CONF:
                    ops.append(("text", name, handle.read(MAX_CONF)))
                    continue
                if member.size < 52 or not is_elf(head := handle.read(4)):
                    continue
                try:
                    info = _read_member(_Prefixed(head, handle), member.size)
                except _Behind:
                    again.append(name)
                    continue
                except ElfError as err:
                    ops.append(("malformed", name, str(err)))
                    continue
                if info.machine == machine and (info.interpreter or info.dynamic):
                    ops.append(("elf", name, info))
    if again:
        ops += _read_again(blob, media_type, set(again), machine)
    return ops


def _apply(tree: ImageTree, ops: Iterable[Op]) -> None:
    for kind, name, extra in ops:
        if kind == "opaque":
            for key in [k for k in tree.entries if k.startswith(name + "/")]:
                tree.remove(key)
        elif kind == "whiteout":
            tree.remove(name)
        elif kind in ("dir", "file"):
            tree.add(name, kind)
        elif kind == "link":
            tree.add(name, "link", str(extra))
        elif kind == "hardlink":
            tree.add(name, "file")
            if str(extra) in tree.elves:
                tree.elves[name] = tree.elves[str(extra)]
        elif kind == "text" and isinstance(extra, bytes):
            tree.texts[name] = extra
        elif kind == "malformed":
            tree.malformed[name] = str(extra)
        elif kind == "elf" and isinstance(extra, ElfInfo):
            tree.elves[name] = extra


class _Prefixed:
    """A stream whose first bytes were already read (the ELF magic)."""

    def __init__(self, head: bytes, stream: IO[bytes]) -> None:
        self.head = head
        self.stream = stream

    def read(self, size: int = -1) -> bytes:
        if self.head:
            out, self.head = self.head[:size] if size >= 0 else self.head, self.head[size:] if size >= 0 else b""
            if size < 0 or len(out) == size:
                return out
            return out + self.stream.read(size - len(out))
        return self.stream.read(size)


def _read_again(blob: Path, media_type: str, names: set[str], machine: int | None) -> list[Op]:
    """ELF files whose string table lies past the kept prefix: read from a copy on disk."""
    ops: list[Op] = []
    with open_layer(blob, media_type) as tar:
        for member in tar:
            name = _member_name(member)
            if name not in names or not member.isreg():
                continue
            handle = tar.extractfile(member)
            if handle is None:
                continue
            with tempfile.TemporaryFile() as copy:
                shutil.copyfileobj(handle, copy, 1 << 20)

                def read_at(offset: int, size: int, f: IO[bytes] = copy) -> bytes:
                    f.seek(offset)
                    return f.read(size)

                try:
                    info = read_elf(read_at, member.size)
                except ElfError as err:
                    ops.append(("malformed", name, str(err)))
                    continue
            if info.machine == machine and (info.interpreter or info.dynamic):
                ops.append(("elf", name, info))
    return ops


def _cache_dirs(tree: ImageTree) -> list[str]:
    """The directories ld.so.cache holds, from /etc/ld.so.conf and what it includes (only when the image has a
    cache: without one, ldconfig never ran and the loader reads no conf file)."""
    if tree.file("etc/ld.so.cache") is None:
        return []
    out: list[str] = []

    def read(path: str, depth: int) -> None:
        data = tree.texts.get(path)
        if data is None or depth > 4:
            return
        for raw in data.decode("utf-8", "replace").splitlines():
            line = raw.split("#", 1)[0].strip()
            if line.startswith("include "):
                pattern = line.split(None, 1)[1].lstrip("/")
                for name in sorted(k for k in tree.texts if fnmatch.fnmatch(k, pattern)):
                    read(name, depth + 1)
            elif line.startswith("/"):
                out.append(line)

    read("etc/ld.so.conf", 0)
    return out


def _expand(entry: str, origin: str) -> str:
    for token in ("${ORIGIN}", "$ORIGIN"):
        entry = entry.replace(token, "/" + origin)
    return entry.replace("${LIB}", "lib").replace("$LIB", "lib")


def check_tree(tree: ImageTree, arch: str, env: dict[str, str], rules: RunnableRules | None = None) -> list[Problem]:
    """Every ELF of ``tree`` whose interpreter or a needed library does not resolve, with what it lacks."""
    rules = rules or default_rules()
    system = rules.loader.system_dirs.get(arch, [])
    library_path = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    cached = _cache_dirs(tree)
    by_name: set[str] = set()
    for path, info in tree.elves.items():
        if path in tree.entries:
            by_name.add(posixpath.basename(path))
            if info.soname:
                by_name.add(info.soname)
    for path, (kind, _) in tree.entries.items():  # symlinks to a library: libfoo.so.1 -> libfoo.so.1.2
        if kind == "link" and (real := tree.file(path)) is not None and real in tree.elves:
            by_name.add(posixpath.basename(path))
    problems: list[Problem] = []
    for path, info in sorted(tree.elves.items()):
        origin = posixpath.dirname(path)
        if info.interpreter and tree.file(info.interpreter) is None:
            problems.append(Problem("/" + path, f"its interpreter {info.interpreter} is not in the image"))
        dirs = [_expand(d, origin) for d in (info.rpath if not info.runpath else ())]
        dirs += library_path + [_expand(d, origin) for d in info.runpath] + cached + list(system)
        for lib in info.needed:
            if "/" in lib:
                found = tree.file(lib) is not None
            else:
                found = any(_is_library(tree, posixpath.join(d, lib), info.machine) for d in dirs)
            if found or lib in by_name or rules.host_library(lib) is not None:
                continue
            searched = ", ".join(dict.fromkeys(dirs)) or "no directory"
            optional = rules.optional_file(path)
            problems.append(Problem("/" + path, f"needs {lib}, which is nowhere in the image (searched {searched})",
                                    optional.reason if optional else ""))
    for path, why in sorted(tree.malformed.items()):
        problems.append(Problem("/" + path, f"malformed ELF file: {why}"))
    return problems


def _is_library(tree: ImageTree, path: str, machine: int) -> bool:
    real = tree.file(path)
    if real is None:
        return False
    info = tree.elves.get(real)
    return info is None or info.machine == machine  # a file the reader skipped (not dynamic) is taken as found


def summary(problems: Sequence[Problem]) -> str:
    """One line naming every ELF file, grouped by what it lacks."""
    groups: dict[str, list[str]] = {}
    for p in problems:
        key = p.what.split(" (searched ", 1)[0]
        groups.setdefault(key, []).append(p.path)
    parts = []
    for what, paths in groups.items():
        shown = ", ".join(paths[:MAX_SHOWN]) + (f" and {len(paths) - MAX_SHOWN} more" if len(paths) > MAX_SHOWN else "")
        parts.append(f"{what}: {shown}")
    return f"{len(problems)} ELF problem(s): " + "; ".join(parts)


def check_layers(layers: Iterable[tuple[Path, str]], arch: str, env: dict[str, str],
                 rules: RunnableRules | None = None, scans: Path | None = None) -> list[Problem]:
    return check_tree(read_tree(layers, arch, scans), arch, env, rules)
