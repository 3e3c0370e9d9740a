"""Every CUDA binary inside one wheel: shared libraries (``*.so``, ``*.so.N``), ``*.cubin`` and ``*.fatbin``
members are extracted one at a time to a scratch file and read with ``binary.read_binary``. The result is
cached by the wheel's sha256 and the reader's version, so a wheel shared by many cells is read once."""

from __future__ import annotations

import json
import re
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pinmatrix.archscan.binary import TOOL_HEADER, BinaryTargets, Extraction, read_binary
from pinmatrix.atomic import atomic_write_text
from pinmatrix.hashing import sha256_bytes, sha256_file

SCAN_VERSION = 3  # bump when what read_binary reports changes (3: bare cubins keep their f suffix)
_CANDIDATE = re.compile(r"(\.so(\.\d+)*|\.cubin|\.fatbin)$")


@dataclass
class WheelScan:
    filename: str
    sha256: str
    binaries: list[BinaryTargets]  # only members with device code
    candidates: int  # members opened
    seconds: float
    tool: str  # "cuobjdump <version>" or "fatbin-header"

    def to_dict(self) -> dict:
        return {"filename": self.filename, "sha256": self.sha256, "candidates": self.candidates,
                "seconds": round(self.seconds, 2), "tool": self.tool,
                "binaries": [b.to_dict() for b in self.binaries]}

    @classmethod
    def from_dict(cls, data: dict) -> WheelScan:
        return cls(data["filename"], data["sha256"], [BinaryTargets.from_dict(b) for b in data["binaries"]],
                   data["candidates"], data["seconds"], data["tool"])




def scan_wheel(path: Path, cuobjdump: str | None, tool_label: str, cache: Path | None = None,
               sha256: str | None = None) -> WheelScan:
    digest = sha256 or sha256_file(path)
    cached = scan_cache_file(cache, digest, tool_label)
    if cached and cached.is_file():
        return WheelScan.from_dict(json.loads(cached.read_text()))
    t0 = time.monotonic()
    binaries: list[BinaryTargets] = []
    candidates = 0
    extraction = Extraction()
    with zipfile.ZipFile(path) as zf, tempfile.TemporaryDirectory(prefix="pinmatrix-wheel-") as tmp:
        for info in zf.infolist():
            if info.is_dir() or not _CANDIDATE.search(info.filename) or info.file_size < 64:
                continue
            candidates += 1
            scratch = Path(tmp) / "member"
            why = extraction.refusal(info.file_size, info.compress_size)
            if why is None:
                with zf.open(info) as src:
                    why = extraction.copy(src, scratch, info.file_size)
            if why is not None:  # named, not extracted (or its cut copy removed)
                binaries.append(BinaryTargets(info.filename, info.file_size, [], TOOL_HEADER, exact=False,
                                              grouped=False, notes=[why]))
                continue
            found = read_binary(scratch, cuobjdump, label=info.filename)
            if found is not None:
                binaries.append(found)
            scratch.unlink()
    scan = WheelScan(path.name, digest, binaries, candidates, time.monotonic() - t0, tool_label)
    if cached:
        write_scan_cache(cached, scan.to_dict())
    return scan


def scan_cache_file(cache: Path | None, stem: str, tool_label: str) -> Path | None:
    """Where a scan of ``stem`` (a wheel's sha256, ``layer-<hex>``) by ``tool_label`` is kept: the key changes
    with the reader's version and the tool, so a scan is never reused by another reader."""
    if cache is None:
        return None
    return cache / f"{stem}-{sha256_bytes(f'{SCAN_VERSION}|{tool_label}'.encode())[:8]}.json"


def write_scan_cache(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data))
