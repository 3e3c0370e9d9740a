"""``doctor --bundle DIR``: a shipped bundle's manifest (``bundle/model.py``) against this host before anything is
unpacked: the wheels' platform (machine and glibc), their Python, every part present at its recorded size (not
hashed: unbundle.py does that when it unpacks), and the cell's driver floor and GPU architecture (from its
known-good entry, else from the matrix's cell: the manifest names the cell, not its requirements)."""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pinmatrix.bundle.model import MANIFEST_NAME, MAX_MANIFEST_BYTES, BundleManifest
from pinmatrix.cell import Cell
from pinmatrix.errors import PinmatrixError
from pinmatrix.hostprobe import HostFingerprint
from pinmatrix.release.hostmatch import HostFacts, Requirements, host_meets, requirements_of
from pinmatrix.sizes import read_capped

_MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


class BundleCheckError(PinmatrixError):
    """The folder is no bundle, or its manifest is not one pinmatrix wrote (exit status 2)."""


def read_manifest(folder: Path) -> BundleManifest:
    path = folder / MANIFEST_NAME
    body = read_capped(path, MAX_MANIFEST_BYTES, "the bundle manifest", BundleCheckError)
    try:
        return BundleManifest.model_validate(json.loads(body))
    except (ValueError, ValidationError) as err:
        first = err.errors()[0] if isinstance(err, ValidationError) else None
        where = ".".join(str(p) for p in first["loc"]) + ": " if first and first["loc"] else ""
        raise BundleCheckError(f"{path}: not a pinmatrix bundle manifest: {where}"
                               f"{first['msg'] if first else err}") from None


def host_glibc() -> tuple[int, int] | None:
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return None
    parts = text.split()[-1].split(".") if text.startswith("glibc ") else []
    return (int(parts[0]), int(parts[1])) if len(parts) >= 2 and all(p.isdigit() for p in parts[:2]) else None


@dataclass(frozen=True)
class BundleCheck:
    folder: str
    kind: str
    cell_id: str | None
    checks: tuple[tuple[str, bool | None, str], ...]  # (what, ok: None = not decided here, words)

    @property
    def fits(self) -> bool:
        return all(ok is not False for _, ok, _ in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"folder": self.folder, "kind": self.kind, "cell": self.cell_id, "fits": self.fits,
                "checks": [{"check": what, "ok": ok, "words": words} for what, ok, words in self.checks]}


def _platform_checks(m: BundleManifest) -> list[tuple[str, bool | None, str]]:
    if not m.platform:
        return [("platform", None, "the manifest names no platform")]
    machine, _, tag = m.platform.partition("-")
    here = _MACHINES.get(platform.machine().lower(), platform.machine())
    out: list[tuple[str, bool | None, str]] = [("machine", machine == here, f"built for {machine}, this host is {here}")]
    need = tuple(int(p) for p in tag.removeprefix("manylinux_").split("_"))
    have = host_glibc()
    out.append(("glibc", None if have is None else have >= need,
                f"needs glibc >= {need[0]}.{need[1]}, this host has "
                + (f"{have[0]}.{have[1]}" if have else "no glibc this Python can name")))
    return out


def _requirements(cell_id: str | None, entries: Sequence[Mapping[str, Any]], cells: Sequence[Cell]
                  ) -> tuple[Requirements | None, str]:
    for e in reversed(entries):  # the newest promotion of the cell
        if e.get("cell_id") == cell_id:
            return requirements_of(dict(e)), "known-good.toml"
    cell = next((c for c in cells if c.id == cell_id), None)
    if cell is None:
        return None, ""
    return Requirements(cell.gpu_required, cell.min_driver, cell.compute_capability, tuple(cell.arch_flags)), "the matrix"


def check_bundle(folder: Path, host: HostFingerprint, entries: Sequence[Mapping[str, Any]] = (),
                 cells: Sequence[Cell] = ()) -> BundleCheck:
    m = read_manifest(folder)
    checks = _platform_checks(m)
    if m.python:
        mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
        checks.append(("python", m.python == mine, f"wheels chosen for Python {m.python}, this Python is {mine}"))
    missing = [p.name for p in m.parts if not (folder / p.name).is_file() or (folder / p.name).stat().st_size != p.size]
    checks.append(("parts", not missing, f"{len(m.parts) - len(missing)} of {len(m.parts)} parts present at their "
                   "recorded size" + (f" (missing or short: {', '.join(missing[:3])})" if missing else "")))
    req, source = _requirements(m.cell_id, entries, cells)
    if req is None:
        checks.append(("driver and arch", None, f"cell {m.cell_id or '?'} is in neither known-good.toml nor the "
                                                 "matrix: its driver floor and GPU arch are not known here"))
    else:
        ok, reasons = host_meets(req, HostFacts(host.driver, host.capability, host.gpu_count))
        checks.append(("driver and arch", ok, f"{'; '.join(reasons)} (requirements from {source})"))
    return BundleCheck(str(folder), m.kind, m.cell_id, tuple(checks))
