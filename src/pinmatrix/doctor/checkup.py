"""``pinmatrix doctor``: one look at a GPU host, from files and ``nvidia-smi`` only (no network, no CUDA library):
its GPUs, the matrix's known issues that match it, a sandbox's prerequisites, the promoted images that fit it
and the drivers their evidence covers, per ``--cell`` what would compile at first use, and a shipped bundle; on
request (``--leak-check``) a few seconds of the unified-memory leak measurement in a child process (leak_check.py).

Exit status, for a job script to gate on: 0 nothing in the way; 1 a known issue hits this host (or a chosen cell
on it), no promoted image fits this GPU host, the bundle does not fit, or the leak check found a leak; 2 bad input
(cli.py); 3 no NVIDIA GPU (nvidia-smi missing or failing), unless ``--allow-no-gpu``."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pinmatrix.cell import Cell
from pinmatrix.doctor.bundle_check import BundleCheck, check_bundle
from pinmatrix.doctor.first_use import FirstUse, first_use
from pinmatrix.doctor.images import ImageFit, promoted_images
from pinmatrix.doctor.known_issues import HITS, IssueMatch, host_issues, installed_packages
from pinmatrix.doctor.leak_check import LeakCheck, run_leak_check
from pinmatrix.doctor.sandbox import SandboxCheck, check_sandbox
from pinmatrix.errors import PinmatrixError
from pinmatrix.hostprobe import GpuProbe, HostFingerprint, probe
from pinmatrix.matrix.selection import choose_cells, expand_matrix
from pinmatrix.project.known_good import read_known_good
from pinmatrix.project.matrix_toml import Matrix, load_matrix

SCHEMA = "pinmatrix-doctor/1"
EXIT_OK, EXIT_HIT, EXIT_NO_GPU = 0, 1, 3


@dataclass(frozen=True)
class DoctorSettings:
    matrix: Path
    matrix_required: bool  # given on the command line: a missing file is an error, not a skipped section
    known_good: Path
    results: Path
    cells: tuple[str, ...] = ()
    arch_scans: tuple[Path, ...] = ()
    bundle: Path | None = None
    allow_no_gpu: bool = False
    smi_timeout: float = 10.0
    leak_seconds: float | None = None  # --leak-check: run the leak measurement this long (None: not asked)


@dataclass(frozen=True)
class CellCheck:
    id: str
    name: str
    issues: tuple[IssueMatch, ...]
    first_use: FirstUse

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "known_issues": [i.to_dict() for i in self.issues],
                "first_use": self.first_use.to_dict()}


@dataclass
class Checkup:
    gpus: GpuProbe
    host: HostFingerprint
    allow_no_gpu: bool
    python: str = sys.executable
    matrix: str | None = None  # the matrix read, or why none was
    issues: list[IssueMatch] = field(default_factory=list)
    sandbox: SandboxCheck | None = None
    known_good: str | None = None
    images: list[ImageFit] = field(default_factory=list)
    cells: list[CellCheck] = field(default_factory=list)
    bundle: BundleCheck | None = None
    leak: LeakCheck | None = None
    elapsed_s: float = 0.0

    @property
    def no_gpu(self) -> bool:
        return not self.gpus.gpus

    def findings(self) -> list[str]:
        """Why the exit status is not 0, one line each."""
        if self.no_gpu and not self.allow_no_gpu:
            return [no_gpu_line(self.gpus)]
        out = [f"known issue {i.id} hits this host" for i in self.issues if i.verdict == HITS]
        out += [f"known issue {i.id} hits cell {c.id} on this host" for c in self.cells for i in c.issues
                if i.verdict == HITS]
        if self.images and not self.no_gpu and not any(i.fits for i in self.images):
            out.append(f"none of the {len(self.images)} promoted images fits this host")
        if self.bundle is not None and not self.bundle.fits:
            out.append(f"the bundle in {self.bundle.folder} does not fit this host")
        leak = self.leak.finding() if self.leak is not None else None
        return out + ([leak] if leak else [])

    def exit_status(self) -> int:
        if self.no_gpu and not self.allow_no_gpu:
            return EXIT_NO_GPU
        return EXIT_HIT if self.findings() else EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "exit_status": self.exit_status(), "findings": self.findings(),
                "elapsed_s": round(self.elapsed_s, 3), "host": self.host.to_dict(), "nvidia_smi": self.gpus.to_dict(),
                "python": self.python, "matrix": self.matrix, "known_issues": [i.to_dict() for i in self.issues],
                "sandbox": self.sandbox.to_dict() if self.sandbox else None, "known_good": self.known_good,
                "promoted_images": [i.to_dict() for i in self.images], "cells": [c.to_dict() for c in self.cells],
                "bundle": self.bundle.to_dict() if self.bundle else None,
                "leak_check": self.leak.to_dict() if self.leak else None}


def no_gpu_line(gpus: GpuProbe) -> str:
    why = "nvidia-smi is not on PATH" if gpus.nvidia_smi is None else (gpus.problems[0] if gpus.problems
                                                                        else "nvidia-smi lists no GPU")
    return f"no NVIDIA GPU on this host: {why}"


def _matrix(settings: DoctorSettings) -> Matrix | None:
    if not settings.matrix.is_file() and not settings.matrix_required:
        return None
    return load_matrix(settings.matrix)


def _cells(matrix: Matrix | None, settings: DoctorSettings) -> tuple[list[Cell], list[Cell]]:
    """(the --cell cells, every cell of the matrix for --bundle); expanded only when one of them is asked for."""
    if settings.cells and matrix is None:
        raise PinmatrixError(f"{settings.matrix}: no such matrix file: --cell needs the matrix")
    if matrix is None or not (settings.cells or settings.bundle is not None):
        return [], []
    expansion = expand_matrix(matrix)
    chosen = choose_cells(matrix, expansion, cells=settings.cells) if settings.cells else []
    return chosen, list(expansion.cells)


def run_checkup(settings: DoctorSettings) -> Checkup:
    started = time.monotonic()
    gpus = probe(settings.smi_timeout)
    up = Checkup(gpus, gpus.fingerprint(), settings.allow_no_gpu)
    if up.no_gpu and not settings.allow_no_gpu:
        up.elapsed_s = time.monotonic() - started
        return up
    matrix = _matrix(settings)
    up.matrix = str(settings.matrix) if matrix else f"no {settings.matrix}: known issues not checked"
    if matrix is not None:
        up.issues = host_issues(matrix.known_issues, gpus, installed_packages())
    up.sandbox = check_sandbox()
    entries = read_known_good(settings.known_good)
    up.known_good = str(settings.known_good) if entries else f"no promoted image in {settings.known_good}"
    up.images = promoted_images(settings.known_good, settings.results, up.host)
    chosen, cells = _cells(matrix, settings)
    for cell in chosen:
        up.cells.append(CellCheck(cell.id, cell.name, tuple(host_issues(matrix.known_issues if matrix else [], gpus,
                                                                           {}, cell)),
                                  first_use(list(settings.arch_scans), cell.id, next(iter(gpus.capabilities), None))))
    if settings.bundle is not None:
        up.bundle = check_bundle(settings.bundle, up.host, entries, cells)
    if settings.leak_seconds is not None:
        up.leak = run_leak_check(up.python, settings.leak_seconds)  # the Python whose packages were read
    up.elapsed_s = time.monotonic() - started
    return up
