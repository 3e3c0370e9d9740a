"""For ``doctor --cell ID``: what of the cell's code would compile at first use on this GPU, from an arch scan
(``pinmatrix arch-scan --out DIR`` writes DIR/arch-scan.json): binaries whose kernel groups run only through the
driver's PTX JIT, packages that compile their kernels at run time (``data/arch_rules.toml`` ``jit_packages``),
and what cannot run at all. Without a scan of the cell, or with one made for another GPU, it says "not scanned"
and guesses nothing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pinmatrix.archflag import arch_rules, parse_capability
from pinmatrix.archscan.verdict import CANNOT, JIT, PARTIAL
from pinmatrix.report.archscan import load_arch_scans

NOT_SCANNED = "not scanned"


@dataclass(frozen=True)
class FirstUse:
    status: str  # "scanned" or NOT_SCANNED
    words: str
    jit: tuple[str, ...] = ()  # 'torch lib/libtorch_cuda.so: 12/444 kernel groups via PTX JIT'
    runtime_compile: tuple[str, ...] = ()  # 'flashinfer-python: compiles its kernels at first use ...'
    cannot: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "words": self.words, "ptx_jit": list(self.jit),
                "compiles_at_run_time": list(self.runtime_compile), "cannot_run": list(self.cannot)}


def _scanned_cell(scans: list[Path], cell_id: str) -> dict[str, Any] | None:
    found = None
    for doc in load_arch_scans(scans):
        for cell in doc["cells"]:
            if isinstance(cell, dict) and cell.get("id") == cell_id:
                found = cell  # a later file's scan replaces an earlier one's, as in the report
    return found


def _binaries(packages: list[Any]) -> tuple[list[str], list[str]]:
    jit, cannot = [], []
    for p in packages:
        for b in p.get("binaries") or []:
            counts = b.get("counts") or {}
            if counts.get(JIT):
                jit.append(f"{p.get('name')} {b.get('path')}: {counts[JIT]}/{b.get('groups')} kernel groups via PTX JIT")
            if b.get("verdict") in (CANNOT, PARTIAL) and counts.get(CANNOT):
                cannot.append(f"{p.get('name')} {b.get('path')}: {counts[CANNOT]}/{b.get('groups')} kernel groups "
                              "cannot run")
    return jit, cannot


def first_use(scans: list[Path], cell_id: str, host_capability: str | None) -> FirstUse:
    """The cell's scan read for this host's GPU (``9.0``); NOT_SCANNED when there is no scan of the cell or its
    scan judged another GPU."""
    cell = _scanned_cell(scans, cell_id) if scans else None
    if cell is None:
        where = ", ".join(map(str, scans)) or "no --arch-scan file given"
        return FirstUse(NOT_SCANNED, f"{NOT_SCANNED}: no arch scan of cell {cell_id} ({where}); "
                                     "`pinmatrix arch-scan --cell ID --out DIR` makes one")
    scanned_for = parse_capability(str(cell.get("gpu") or ""))
    if scanned_for is None or scanned_for != parse_capability(host_capability):
        return FirstUse(NOT_SCANNED, f"{NOT_SCANNED} for this GPU: the scan of cell {cell_id} judged "
                                     f"{cell.get('gpu') or 'no GPU'}, this host has {host_capability or 'none'}")
    packages = [p for p in cell.get("packages") or [] if isinstance(p, dict)]
    jit, cannot = _binaries(packages)
    words = arch_rules().get("jit_packages", {})
    runtime = [f"{p['name']} {p.get('version') or ''}: {words[p['name']]}".replace("  ", " ")
               for p in packages if p.get("name") in words]
    summary = (f"scanned for {cell.get('gpu')}: {len(jit)} binaries with PTX-JIT kernel groups, "
               f"{len(runtime)} packages that compile at run time, {len(cannot)} binaries with kernels that cannot run")
    return FirstUse("scanned", summary, tuple(jit), tuple(runtime), tuple(cannot))
