"""A cell's lock file (``uv pip compile --generate-hashes`` output) read as data: global options, and one entry
per distribution with its exact version, its sha256 hashes and the distributions that require it (``# via``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from pinmatrix.cell import Cell
from pinmatrix.errors import PinmatrixError

_REQ_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?:==|===|@|;|\s|$)")
_HEADER_CELL = re.compile(r"^# pinmatrix lock for cell ([0-9a-f]{12})\b")


class LockFileError(PinmatrixError):
    """A lock file cannot be read."""


@dataclass(frozen=True)
class LockEntry:
    name: str  # canonical distribution name
    version: str
    text: str  # the requirement with its hashes, continuation lines joined: "six==1.17.0 --hash=sha256:..."
    via: tuple[str, ...]  # canonical names that require it ("-r requirements.in" is dropped)

    @property
    def hashes(self) -> tuple[str, ...]:
        return tuple(re.findall(r"--hash=(sha256:[0-9a-f]{64})", self.text))

    @property
    def pinned(self) -> bool:
        return bool(re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[^\]]*\])?\s*===?\s*[^\s;]+", self.text))


@dataclass(frozen=True)
class ParsedLock:
    options: tuple[str, ...]  # global lines such as "--index-url ..."
    entries: tuple[LockEntry, ...]
    cell_id: str | None = None  # from the header pinmatrix writes

    def by_name(self) -> dict[str, LockEntry]:
        return {e.name: e for e in self.entries}


def parse_lock(text: str, source: str = "lock") -> ParsedLock:
    """Parse a ``uv pip compile --generate-hashes`` output (pip requirements format with ``# via`` notes)."""
    options: list[str] = []
    entries: list[LockEntry] = []
    current: list[str] | None = None
    via: list[str] = []
    in_via_block = False
    cell_id: str | None = None

    def flush() -> None:
        nonlocal current, via
        if current is None:
            return
        text_line = " ".join(part.strip() for part in current)
        m = _REQ_NAME.match(text_line)
        if not m:
            raise LockFileError(f"{source}: cannot read requirement {text_line[:60]!r}")
        version_m = re.search(r"===?\s*([^\s;\\]+)", text_line)
        entries.append(LockEntry(name=canonicalize_name(m.group(1)), version=version_m.group(1) if version_m else "",
                                 text=text_line, via=tuple(sorted(set(via)))))
        current, via = None, []

    pending_continuation = False
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if pending_continuation and current is not None:
            current.append(stripped.rstrip("\\").strip())
            pending_continuation = stripped.endswith("\\")
            continue
        if not stripped:
            in_via_block = False
            continue
        if stripped.startswith("#"):
            header = _HEADER_CELL.match(stripped)
            if header and cell_id is None:
                cell_id = header.group(1)
            note = stripped.lstrip("#").strip()
            if note.startswith("via"):
                rest = note[3:].strip()
                in_via_block = not rest
                if rest:
                    via.extend(_via_names(rest))
            elif in_via_block and raw.startswith(" "):
                via.extend(_via_names(note))
            else:
                in_via_block = False
            continue
        in_via_block = False
        if stripped.startswith("-") and not raw.startswith(" "):
            flush()
            options.append(stripped)
            continue
        flush()
        current = [stripped.rstrip("\\").strip()]
        pending_continuation = stripped.endswith("\\")
    flush()
    return ParsedLock(tuple(options), tuple(entries), cell_id)


def _via_names(text: str) -> list[str]:
    names: list[str] = []
    for part in text.split(","):
        part = part.strip()
        if not part or part.startswith("-r") or part.startswith("-c") or " " in part:
            continue
        names.append(canonicalize_name(part))
    return names


LOCK_DIR = Path("locks")  # a project's locks: locks/<cell id>.txt


def lock_path(cell: Cell, root: Path = Path(".")) -> Path:
    return root / LOCK_DIR / f"{cell.id}.txt"
