"""One cell's arch scan: fetch its wheels, read every CUDA binary, judge each against the cell's GPU, sum
per package, check the cell's arch flags against what the binaries carry, and confirm or flag the known
issues that ``data/arch_rules.toml`` ties to binaries."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from pinmatrix.archflag import ArchFlag, arch_rules
from pinmatrix.archscan import verdict as V
from pinmatrix.archscan.binary import BinaryTargets
from pinmatrix.archscan.fetch import cell_pins, fetch_wheels
from pinmatrix.archscan.tools import cache_dir, cuobjdump, cuobjdump_version
from pinmatrix.archscan.wheels import WheelScan, scan_wheel
from pinmatrix.cell import AXIS_DISTRIBUTION, NON_PACKAGE_AXES, Cell

SCHEMA = "pinmatrix-arch-scan/1"
STACK_PACKAGES: tuple[str, ...] = ("torch", "triton", "xformers", "flashinfer-python", "vllm")


@dataclass
class PackageScan:
    name: str
    version: str | None
    wheel: str | None
    verdict: str
    summary: str
    binaries: list[V.BinaryVerdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "wheel": self.wheel, "verdict": self.verdict,
                "summary": self.summary, "notes": self.notes, "binaries": [b.to_dict() for b in self.binaries]}


@dataclass
class CellScan:
    id: str
    name: str
    stack: str
    gpu: str | None
    arch_flags: list[str]
    platform: str
    python: str
    source: str  # "lock" or "resolved"
    packages: list[PackageScan]
    notes: list[str]
    arch_flag_checks: list[dict[str, Any]]
    known_issues: list[dict[str, Any]]

    def package(self, name: str) -> PackageScan | None:
        return next((p for p in self.packages if p.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "stack": self.stack, "gpu": self.gpu, "arch_flags": self.arch_flags,
                "platform": self.platform, "python": self.python, "source": self.source, "notes": self.notes,
                "arch_flag_checks": self.arch_flag_checks, "known_issues": self.known_issues,
                "packages": [p.to_dict() for p in self.packages]}


def _package_summary(binaries: list[V.BinaryVerdict], verdict: str) -> str:
    if not binaries:
        return V.WORDS[verdict]
    worst = [b for b in binaries if b.verdict == V.worst_verdict([b.verdict for b in binaries])]
    counts = ", ".join(f"{sum(b.verdict == v for b in binaries)} {v}" for v in V.ORDER
                       if any(b.verdict == v for b in binaries))
    head = f"{len(binaries)} binaries ({counts})" if len(binaries) > 1 else ""
    detail = "; ".join(f"{Path(b.path).name}: {b.summary}" for b in worst[:2])
    return f"{head}; {detail}" if head else detail


def _cell_packages(cell: Cell) -> dict[str, str]:
    """The distributions the cell pins through its axes: name -> version."""
    out: dict[str, str] = {}
    for axis, value in cell.pins.items():
        if axis in NON_PACKAGE_AXES:
            continue
        out[canonicalize_name(AXIS_DISTRIBUTION.get(axis, axis))] = str(value)
    return out


def _evidence(cell: Cell, gpu: str, scans: dict[str, list[BinaryTargets]],
              verdicts: dict[str, list[V.BinaryVerdict]]) -> list[dict[str, Any]]:
    filed = {k.id for k in cell.known_issues}
    out: list[dict[str, Any]] = []
    cap = V.parse_gpu(gpu)
    all_sass = {t for bins in scans.values() for b in bins for t in b.sass}
    for rule in arch_rules().get("evidence", []):
        if rule["gpu"] != gpu:
            continue
        specific = set(rule["arch_specific"])
        found: list[str] = []
        for package, bins in scans.items():
            for b in bins:
                n = sum(1 for g in b.groups if specific & set(g) and V.group_verdict(g, cap).verdict == V.CANNOT)
                if n:
                    found.append(f"{package}: {b.path}: {n} kernel group(s) hold {'/'.join(sorted(specific & {t for g in b.groups for t in g}))} "
                                 f"code and nothing that runs on {gpu}")
        has_native = rule["native_target"] in all_sass
        is_filed = rule["known_issue"] in filed
        if found and not has_native:
            status = "confirmed" if is_filed else "flagged"
        elif is_filed:
            status = "not-seen"
        else:
            continue
        if status == "confirmed":
            words = f"confirmed from the binaries: {rule['mechanism']}"
        elif status == "flagged":
            words = (f"flagged: the cell is not filed under {rule['known_issue']} (its arch flags "
                     f"{' '.join(cell.arch_flags) or 'none'}), but its binaries show the mechanism: {rule['mechanism']}")
        else:
            words = ("filed against this cell, but no binary read here shows it"
                     + (f" ({rule['native_target']} is present)" if has_native else ""))
        out.append({"known_issue": rule["known_issue"], "status": status, "message": words, "evidence": found,
                    "native_target_present": has_native, "source": rule["source"]})
    return out


def _arch_flag_checks(cell: Cell, scans: dict[str, list[BinaryTargets]]) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = []
    for text in cell.arch_flags:
        try:
            flag = ArchFlag.parse(text)
        except ValueError:
            continue  # a bare '+PTX' marker
        honoured = [f"{pkg}: {b.path}" for pkg, bins in scans.items() for b in bins if V.honours(b, flag) is True]
        unknown = [f"{pkg}: {b.path}" for pkg, bins in scans.items() for b in bins if V.honours(b, flag) is None]
        if honoured:
            words = f"{len(honoured)} binary(ies) carry {flag.sass_name}"
        elif unknown:
            words = f"{len(unknown)} binary(ies) carry {flag.major}{flag.minor} code of unknown suffix (no cuobjdump)"
        else:
            words = (f"no binary in this cell honours {text}: none carries {flag.sass_name}; the flag reaches only "
                     "code built for the cell (JIT modules, source builds)")
        checks.append({"flag": text, "target": flag.sass_name, "honoured_by": honoured, "unknown": unknown,
                       "ok": bool(honoured), "message": words})
    return checks


def scan_cell(cell: Cell, root: Path, exclude_newer: str | None, *, tool: str | None, tool_label: str,
              cache: Path | None = None, log: Callable[[str], None] | None = None) -> CellScan:
    cache = cache or cache_dir()
    pins = cell_pins(cell, root, exclude_newer, cache / "arch-scan")
    wheels = fetch_wheels(pins, cache, log=log)
    gpu = cell.pins.get("gpu")
    cap = V.parse_gpu(gpu) if gpu else None
    jit_words = arch_rules().get("jit_packages", {})
    packages: list[PackageScan] = []
    scans: dict[str, list[BinaryTargets]] = {}
    verdicts: dict[str, list[V.BinaryVerdict]] = {}
    wanted = _cell_packages(cell)
    for w in wheels:
        name = w.pin.name
        if w.path is None:
            packages.append(PackageScan(name, w.pin.version, None, V.MISSING, w.reason))
            continue
        if log:
            log(f"  reading {w.path.name}")
        scan: WheelScan = scan_wheel(w.path, tool, tool_label, cache / "arch-scan" / "wheels", sha256=w.sha256)
        scans[name] = scan.binaries
        bins = [V.binary_verdict(b, cap) for b in scan.binaries] if cap else []
        verdicts[name] = bins
        verdict = V.package_verdict(bins) if cap else (V.NO_DEVICE_CODE if not scan.binaries else "no-gpu")
        notes: list[str] = []
        if name in pins.substituted:
            notes.append(pins.substituted[name])
            if not scan.binaries:  # e.g. the default index's aarch64 torch: a CPU build
                verdict = V.MISSING
        if name in jit_words and not scan.binaries:
            notes.append(str(jit_words[name]))
        summary = _package_summary(bins, verdict) if cap else f"{len(scan.binaries)} CUDA binaries"
        if verdict == V.MISSING:
            summary = (f"the cell's own {name} was not fetched; the default index's {w.path.name} holds no CUDA "
                       "device code (a CPU build)")
        packages.append(PackageScan(name, w.pin.version, w.path.name, verdict, summary, bins, notes))
    fetched = {w.pin.name for w in wheels}
    for name, version in wanted.items():
        if name not in fetched:
            why = pins.missing.get(f"{name}=={version}") or next(
                (n for n in cell.notes if n.startswith(f"{name} ") and "source" in n), None) or "not in the cell's pins"
            packages.append(PackageScan(name, version, None, V.MISSING, why))
    notes = list(pins.notes)
    notes += [f"{req}: {why}" for req, why in pins.missing.items()]
    if not cap:
        notes.append("the cell names no GPU: targets are listed without a verdict")
    packages.sort(key=lambda p: (p.name not in STACK_PACKAGES, p.name))
    return CellScan(
        id=cell.id, name=cell.name, stack=cell.stack, gpu=gpu, arch_flags=list(cell.arch_flags),
        platform=pins.platform, python=pins.python, source=pins.source, packages=packages, notes=notes,
        arch_flag_checks=_arch_flag_checks(cell, scans),
        known_issues=_evidence(cell, gpu, scans, verdicts) if gpu else [],
    )


def scan_tool(use_cuobjdump: bool = True) -> tuple[str | None, str]:
    """(cuobjdump path or None, the label recorded with each result)."""
    if not use_cuobjdump:
        return None, "fatbin-header"
    exe = cuobjdump()
    return exe, f"cuobjdump {cuobjdump_version(exe)}" if exe else "fatbin-header"


def scan_document(cells: list[CellScan], tool_label: str, command: str) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "tool": tool_label,
        "command": command,
        "rules": "src/pinmatrix/data/arch_rules.toml",
        "cells": [c.to_dict() for c in cells],
    }
