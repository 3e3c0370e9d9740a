"""The CUDA toolchain a cell's image carries when its smokes compile CUDA at run time (FlashInfer's JIT).

``data/toolchains.toml`` says which smokes need which toolchain and, per CUDA version, which PyPI wheels hold
it. Expansion adds those requirements to the cell (so they are locked and installed like any other pin);
the image's environment gets ``CUDA_HOME`` (the wheels' tree in the venv) and its ``bin`` on ``PATH``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from pydantic import Field, field_validator

from pinmatrix.datamodel import Strict
from pinmatrix.errors import PinmatrixError
from pinmatrix.names import check_requirement_text
from pinmatrix.project.catalogue import matches
from pinmatrix.project.document import load_document

DATA_FILE = "data/toolchains.toml"


class ToolchainError(PinmatrixError):
    """data/toolchains.toml is not valid."""


class CudaWheels(Strict):
    """The wheels of one CUDA version and where they install under site-packages."""

    requirements: tuple[str, ...]
    home: str  # site-packages-relative folder holding bin/nvcc, include, lib
    cudart: str  # the runtime library's file name in <home>/lib, e.g. libcudart.so.13

    @field_validator("requirements")
    @classmethod
    def _reqs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("must name at least one requirement")
        return tuple(check_requirement_text(r) for r in value)

    @field_validator("home")
    @classmethod
    def _home(cls, value: str) -> str:
        parts = value.split("/")
        if not value or value.startswith("/") or any(p in ("", ".", "..") for p in parts) or not value.isascii():
            raise ValueError(f"{value!r} must be a relative folder under site-packages, like nvidia/cu13")
        return value

    @field_validator("cudart")
    @classmethod
    def _cudart(cls, value: str) -> str:
        if "/" in value or not value.startswith("libcudart.so."):
            raise ValueError(f"{value!r} must be a file name like libcudart.so.13")
        return value


class ToolchainSpec(Strict):
    name: str
    smokes: tuple[str, ...]
    source: str
    cuda: dict[str, CudaWheels] = Field(default_factory=dict)


class AotSpec(Strict):
    """The FlashInfer modules a smoke loads, compiled ahead of time (names known to shipped/flashinfer_aot.py)."""

    smoke: str
    modules: tuple[str, ...]
    fp4: bool = False  # only for arch lists with a native-FP4 target (10.x and up)

    @field_validator("modules")
    @classmethod
    def _modules(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value or any(not m.replace("-", "").isalnum() or not m.isascii() for m in value):
            raise ValueError("must be a non-empty list of module names (letters, digits and '-')")
        return value


class CrossSpec(Strict):
    """How a cell of ``machine`` gets its AOT modules on a builder of another architecture: FlashInfer's generator
    runs in a builder root of the builder's architecture (the cell's base and the builder wheels of the cell's own
    pins that ``generator_imports`` need), the host code is compiled by ``compiler`` (Debian's ``package``)."""

    machine: str
    compiler: str
    package: str
    generator_imports: tuple[str, ...]
    modules: tuple[str, ...]  # the AOT modules built this way; the cell's others are compiled at run time
    libraries_from: tuple[str, ...]  # the cell's wheels whose <home>/lib holds the libraries the modules link
    why: str = ""

    @field_validator("machine")
    @classmethod
    def _machine(cls, value: str) -> str:
        if value not in ("x86_64", "aarch64"):
            raise ValueError(f"{value!r} must be x86_64 or aarch64")
        return value

    @field_validator("compiler", "package")
    @classmethod
    def _word(cls, value: str) -> str:
        if not value or not value.isascii() or not all(c.isalnum() or c in "-_.+" for c in value):
            raise ValueError(f"{value!r} must be one program or package name (letters, digits, '-', '_', '.', '+')")
        return value

    @field_validator("generator_imports", "modules", "libraries_from")
    @classmethod
    def _names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value or any(not m.replace("-", "").replace("_", "").isalnum() or not m.isascii() for m in value):
            raise ValueError("must be a non-empty list of names (letters, digits, '-' and '_')")
        return value


class ToolchainDoc(Strict):
    toolchain: tuple[ToolchainSpec, ...]
    aot: tuple[AotSpec, ...] = ()
    cross: tuple[CrossSpec, ...] = ()


@dataclass(frozen=True)
class Toolchain:
    """The toolchain one cell needs: its name, the CUDA it is for and the wheels that hold it."""

    name: str
    cuda: str
    wheels: CudaWheels

    def cuda_home(self, site_packages: str) -> str:
        return f"{site_packages.rstrip('/')}/{self.wheels.home}"

    def env(self, site_packages: str, path: str) -> dict[str, str]:
        """CUDA_HOME for FlashInfer (and torch's cpp_extension), nvcc's folder after the venv's on ``path``, and
        CXX=g++: FlashInfer links with $CXX (default ``c++``, an alternative no extract base sets up)."""
        home = self.cuda_home(site_packages)
        first, sep, rest = path.partition(":")
        return {"CUDA_HOME": home, "PATH": f"{first}{sep}{home}/bin:{rest}" if sep else f"{path}:{home}/bin",
                "CXX": "g++"}


def parse(text: str, where: str = DATA_FILE) -> ToolchainDoc:
    """data/toolchains.toml's text -> ToolchainDoc; ToolchainError, one line ``WHERE:LINE: key: message``."""
    return load_document(Path(where), ToolchainDoc, what="a toolchain table", content=text, error=ToolchainError)


@cache
def shipped() -> ToolchainDoc:
    return parse(resources.files("pinmatrix").joinpath(DATA_FILE).read_text(encoding="utf-8"))


def needing(smokes: Iterable[str], doc: ToolchainDoc | None = None) -> list[ToolchainSpec]:
    """The toolchains some of ``smokes`` (a stack's selectors) need."""
    chosen = list(smokes)
    return [spec for spec in (doc or shipped()).toolchain
            if any(matches(sel, smoke) for sel in chosen for smoke in spec.smokes)]


def for_cell(smokes: Iterable[str], cuda: str | None,
             doc: ToolchainDoc | None = None) -> tuple[list[Toolchain], list[str]]:
    """(the toolchains a cell with these smokes and this CUDA gets, notes for those it needs but cannot get)."""
    found: list[Toolchain] = []
    notes: list[str] = []
    for spec in needing(smokes, doc):
        wheels = spec.cuda.get(cuda) if cuda else None
        if wheels is None:
            known = ", ".join(sorted(spec.cuda)) or "none"
            notes.append(f"its smokes compile CUDA at run time ({spec.name}) but {DATA_FILE} declares no wheels for "
                         f"CUDA {cuda or '(no cuda axis)'} (declared: {known}): the image has no nvcc")
            continue
        found.append(Toolchain(name=spec.name, cuda=cuda or "", wheels=wheels))
    return found, notes
