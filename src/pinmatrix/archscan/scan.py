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

from pinmatrix.archflag import ArchFlag
from pinmatrix.archscan import verdict as V
from pinmatrix.archscan.binary import BinaryTargets
from pinmatrix.archscan.fetch import cell_pins, fetch_wheels
from pinmatrix.archscan.layers import aot_layer, scan_aot_layer
from pinmatrix.archscan.tools import cache_dir, cuobjdump, cuobjdump_version
from pinmatrix.archscan.wheels import WheelScan, scan_wheel
from pinmatrix.cell import AXIS_DISTRIBUTION, NON_PACKAGE_AXES, Cell
from pinmatrix.project.arch_rules import shipped_arch_rules

SCHEMA = "pinmatrix-arch-scan/1"
STACK_PACKAGES: tuple[str, ...] = ("torch", "triton", "xformers", "flashinfer-python", "vllm", "flashinfer-aot")
AOT_PACKAGE = "flashinfer-aot"  # the image's layer of FlashInfer modules compiled for the cell (image/assembly/aot_plan.py)


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


def own_packages(cell: Cell, names: list[str] | None = None) -> list[str]:
    """The stack's own packages among ``names`` (default: the cell's pins): its pinned packages but the prebuilt
    bases (torch, triton) and the companions that hold its kernels (``[own_packages]`` in data/arch_rules.toml)."""
    rules = shipped_arch_rules().own_packages
    not_own = {canonicalize_name(n) for n in rules.not_own}
    own = [n for n in _cell_packages(cell) if n not in not_own]
    own += [canonicalize_name(n) for n in rules.also if canonicalize_name(n) not in own]
    return [n for n in own if names is None or n in names]


def _fp4_groups(bins: list[BinaryTargets], fp4: set[str], native: str) -> tuple[list[str], list[str]]:
    """(lines for the binaries whose FP4 groups lack ``native``, lines for those whose FP4 groups carry it)."""
    lacking: list[str] = []
    carrying: list[str] = []
    for b in bins:
        groups = [g for g in b.groups if fp4 & set(g)]
        without = [g for g in groups if native not in g]
        if without:
            held = " ".join(sorted({t for g in without for t in g if t in fp4}))
            lacking.append(f"{b.path}: {len(without)}/{len(b.groups)} kernel group(s) hold {held} and no {native}")
        if len(without) < len(groups) or any(native in g for g in b.groups):
            n = sum(1 for g in b.groups if native in g)
            carrying.append(f"{b.path}: {n} kernel group(s) carry {native}")
    return lacking, carrying


def aot_fp4_binaries(bins: list[BinaryTargets], modules: dict[str, str], fp4_modules: list[str]) -> list[BinaryTargets]:
    """The AOT layer's binaries that hold FP4 kernels: those whose module (its manifest's ``module``, by path) is
    one of ``fp4_modules``; a binary whose module the manifest does not name is kept. A decode module built for
    12.0f holds sm_120f too, but no FP4 kernel."""
    return [b for b in bins if modules.get(b.path) is None or modules[b.path] in fp4_modules]


def _evidence(cell: Cell, gpu: str, scans: dict[str, list[BinaryTargets]],
              aot_modules: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Known issues confirmed or flagged from the FP4 kernel groups of the stack's own packages (of the image's
    AOT layer, only its FP4 modules: ``aot_fp4_modules`` of the rule)."""
    filed = {k.id for k in cell.known_issues}
    own = own_packages(cell, list(scans))
    out: list[dict[str, Any]] = []
    for rule in shipped_arch_rules().evidence:
        if rule.gpu != gpu:
            continue
        fp4, native = set(rule.fp4_targets), rule.native_target
        found: list[str] = []
        carriers: list[str] = []
        for package in own:
            bins = scans[package]
            if package == AOT_PACKAGE and rule.aot_fp4_modules is not None:
                bins = aot_fp4_binaries(bins, aot_modules or {}, list(rule.aot_fp4_modules))
            lacking, carrying = _fp4_groups(bins, fp4, native)
            found += [f"{package}: {line}" for line in lacking]
            carriers += [f"{package}: {line}" for line in carrying]
        is_filed = rule.known_issue in filed
        if found:
            status = "confirmed" if is_filed else "flagged"
        elif is_filed:
            status = "not-seen"
        else:
            continue
        also = (f"; {native} is carried by " + "; ".join(carriers)) if carriers else f"; no own package carries {native}"
        if status == "confirmed":
            words = f"confirmed from the stack's own FP4 kernels: {rule.mechanism}{also}"
        elif status == "flagged":
            words = (f"flagged: the cell is not filed under {rule.known_issue} (its arch flags "
                     f"{' '.join(cell.arch_flags) or 'none'}), but its own packages show the mechanism: "
                     f"{rule.mechanism}{also}")
        else:
            words = (f"filed against this cell, but no FP4 kernel group of its own packages ({', '.join(own) or 'none read'}) "
                     f"lacks {native}" + (f"; {'; '.join(carriers)}" if carriers else ""))
        out.append({"known_issue": rule.known_issue, "status": status, "message": words, "evidence": found,
                    "native_target_present": bool(carriers), "carriers": carriers, "packages": own,
                    "source": rule.source})
    return out


def _arch_flag_checks(cell: Cell, scans: dict[str, list[BinaryTargets]]) -> list[dict[str, Any]]:
    """Per arch flag: which of the stack's own packages carry its exact SASS (what the flag reached), and which
    other packages carry it whatever the flag (torch's prebuilt FP8 unit, cuSPARSELt)."""
    own = set(own_packages(cell, list(scans)))
    checks: list[dict[str, Any]] = []
    for text in cell.arch_flags:
        try:
            flag = ArchFlag.parse(text)
        except ValueError:
            continue  # a bare '+PTX' marker
        honoured = [f"{pkg}: {b.path}" for pkg, bins in scans.items() if pkg in own for b in bins
                    if V.honours(b, flag) is True]
        unknown = [f"{pkg}: {b.path}" for pkg, bins in scans.items() if pkg in own for b in bins
                   if V.honours(b, flag) is None]
        prebuilt = [f"{pkg}: {b.path}" for pkg, bins in scans.items() if pkg not in own for b in bins
                    if V.honours(b, flag) is True]
        packages = sorted({h.split(":", 1)[0] for h in honoured})
        if honoured:
            words = (f"honoured by {', '.join(packages)}: {len(honoured)} binary(ies) carry {flag.sass_name}")
        elif unknown:
            words = f"{len(unknown)} binary(ies) of the stack carry {flag.major}{flag.minor} code of unknown suffix (no cuobjdump)"
        else:
            words = (f"no package of the stack honours {text}: none of {', '.join(sorted(own & set(scans))) or 'its packages'} "
                     f"carries {flag.sass_name}; the flag reaches only code built for the cell (JIT or AOT modules, "
                     "source builds)")
        if prebuilt:
            names = sorted({p.split(":", 1)[0] for p in prebuilt})
            words += f"; carried whatever the flag by prebuilt {', '.join(names)} ({len(prebuilt)} binary(ies))"
        checks.append({"flag": text, "target": flag.sass_name, "honoured_by": honoured, "unknown": unknown,
                       "prebuilt": prebuilt, "packages": packages, "ok": bool(honoured), "message": words})
    return checks


def scan_cell(cell: Cell, root: Path, exclude_newer: str | None, *, tool: str | None, tool_label: str,
              cache: Path | None = None, log: Callable[[str], None] | None = None,
              build_cache: Path | None = None, layout: Path | None = None) -> CellScan:
    """``build_cache``: the build's cache, whose wheels are read where it holds them; ``layout``: the OCI layout
    whose image of the cell adds its AOT layer (FlashInfer modules built for the cell's arch list) as a row."""
    cache = cache or cache_dir()
    pins = cell_pins(cell, root, exclude_newer, cache / "arch-scan")
    wheels = fetch_wheels(pins, cache, log=log, build_cache=build_cache)
    gpu = cell.pins.get("gpu")
    cap = V.parse_gpu(gpu) if gpu else None
    jit_words = shipped_arch_rules().jit_packages
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
            notes.append(jit_words[name])
        summary = _package_summary(bins, verdict) if cap else f"{len(scan.binaries)} CUDA binaries"
        if verdict == V.MISSING:
            summary = (f"the cell's own {name} was not fetched; the default index's {w.path.name} holds no CUDA "
                       "device code (a CPU build)")
        packages.append(PackageScan(name, w.pin.version, w.path.name, verdict, summary, bins, notes))
    aot_modules: dict[str, str] = {}  # the AOT layer binary path -> its module key (image/assembly/aot_plan.py manifest)
    found = aot_layer(layout, cell.id) if layout is not None else None
    if found is not None:
        image, digest, media_type = found
        assert layout is not None
        if log:
            log(f"  reading the AOT layer {digest[:19]} of image {image[:19]}")
        layer = scan_aot_layer(layout, digest, media_type, tool, tool_label, cache / "arch-scan" / "layers")
        scans[AOT_PACKAGE] = layer.binaries
        aot_modules = {f"{b['name']}/{b['name']}.so": str(b["module"]) for b in layer.manifest.get("built", [])
                       if isinstance(b, dict) and "name" in b and "module" in b}
        bins = [V.binary_verdict(b, cap) for b in layer.binaries] if cap else []
        verdict = V.package_verdict(bins) if cap else "no-gpu"
        built = layer.manifest.get("built", [])
        notes = [f"built at image build time for FLASHINFER_CUDA_ARCH_LIST={layer.manifest.get('arch_list', '?')!r}: "
                 + "; ".join(f"{b['name']} ({' '.join(g.rsplit('code=', 1)[-1] for g in b.get('gencode', []))})"
                             for b in built)]
        packages.append(PackageScan(AOT_PACKAGE, str(layer.manifest.get("flashinfer", "")), f"layer {digest}",
                                    verdict, _package_summary(bins, verdict) if cap else f"{len(layer.binaries)} CUDA binaries",
                                    bins, notes))
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
        known_issues=_evidence(cell, gpu, scans, aot_modules) if gpu else [],
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
