"""compat.toml: the typed model of the compatibility tables (each table names its source) and the loader that
turns a malformed file into one line ``compat.toml:LINE: key.path: message``. The rules that read it: compat.py."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationInfo, field_validator

from pinmatrix import names
from pinmatrix.datamodel import Strict
from pinmatrix.errors import PinmatrixError
from pinmatrix.names import OneLine, VersionText
from pinmatrix.project.document import load_document

COMPAT_FILE = "compat.toml"
_GPU = re.compile(r"sm_\d\d+")  # as the matrix's gpu axis writes it
_ARCH = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)a?")  # ArchFlag.base, with "a" for an arch-specific target


class CompatError(PinmatrixError):
    """compat.toml is malformed: one line that names the file and the key."""


def _check_gpu(value: str) -> str:
    if not _GPU.fullmatch(value):
        raise ValueError(f"gpu {names.shown(value)} must look like sm_90, sm_100 or sm_121")
    return value


def _check_arch(value: str) -> str:
    if not _ARCH.fullmatch(value):
        raise ValueError(f"arch {names.shown(value)} must look like 9.0 or 9.0a")
    return value


Specifier = Annotated[str, AfterValidator(partial(names.check_specifier, example="'==2.7.0' or '>=2.11,<2.12'"))]
Gpu = Annotated[str, AfterValidator(_check_gpu)]
ArchKey = Annotated[str, AfterValidator(_check_arch)]


class CompatTable(Strict):
    """One table of compat.toml. ``source`` is where its facts come from; every prune of its rules cites it."""

    source: OneLine


class CudaMinDriverTable(CompatTable):
    # Datacenter GPUs that may run a newer CUDA on an older driver (the cuda-compat package).
    forward_compat_gpus: list[Gpu] = Field(default_factory=list)
    versions: dict[VersionText, VersionText]  # CUDA version -> minimum driver


class TorchSeries(Strict):
    """A torch minor series ("2.9") or a patch release that pins another triton ("2.9.1")."""

    triton: VersionText  # the triton it pins
    cuda: list[VersionText] = Field(min_length=1)  # its CUDA variants
    default_cuda: VersionText  # the variant the default index serves
    # What the default index serves for aarch64 where that differs: "cpu" (a CPU build) or a CUDA version. Left
    # out: the same as default_cuda.
    aarch64_default: str | None = None

    @field_validator("aarch64_default")
    @classmethod
    def _cpu_or_variant(cls, value: str | None) -> str | None:
        return value if value in (None, "cpu") else names.check_version(str(value))

    @field_validator("default_cuda")
    @classmethod
    def _a_variant(cls, value: str, info: ValidationInfo) -> str:
        cuda = info.data.get("cuda")
        if cuda is not None and value not in cuda:
            raise ValueError(f"{value!r} is not one of the series' CUDA variants ({', '.join(cuda)})")
        return value

    def __getitem__(self, key: str) -> Any:
        """The series read by key, as the TOML table: ``series["default_cuda"]``."""
        if key not in type(self).model_fields:
            raise KeyError(key)
        return getattr(self, key)


class TorchTable(CompatTable):
    series: dict[VersionText, TorchSeries]
    aarch64_source: OneLine = ""  # where the series' aarch64_default facts come from


class XformersTable(CompatTable):
    torch: dict[VersionText, Specifier]  # xformers version -> the torch its wheel pins


class VllmRule(Strict):
    versions: Specifier  # the vllm versions the rule covers
    torch: Specifier  # the torch the PyPI wheel pins
    flashinfer: Specifier | None = None  # the flashinfer-python it pins, where it pins one


class VllmTable(CompatTable):
    rules: list[VllmRule]  # the first rule whose versions hold a vllm version applies


class ArchTable(CompatTable):
    family_min_cuda: VersionText  # the first CUDA that builds family ('f') targets
    min_cuda: dict[ArchKey, VersionText]  # "9.0" / "9.0a" -> the first CUDA that builds it


class CompatDoc(Strict):
    """compat.toml: every table is required."""

    cuda_min_driver: CudaMinDriverTable
    torch: TorchTable
    xformers: XformersTable
    vllm: VllmTable
    arch: ArchTable


def parse_compat(data: Mapping[str, Any], name: str = COMPAT_FILE) -> CompatDoc:
    """Parsed TOML -> CompatDoc; CompatError with one line ``NAME: key.path: message`` for the first problem
    (an unknown key first: a misspelt key is also a missing one)."""
    return _load(data, name)


def load_compat(text: str, name: str = COMPAT_FILE) -> CompatDoc:
    """compat.toml's text -> CompatDoc; CompatError with one line ``NAME:LINE: key.path: message``."""
    return _load(text, name)


def _load(content: str | Mapping[str, Any], name: str) -> CompatDoc:
    return load_document(Path(name), CompatDoc, what="a compatibility table", content=content, error=CompatError)


# A table left out of rules built in memory (CompatRules(dict), as tests do): it knows no version. A family
# floor of "0" is no floor (and is never read: an empty min_cuda knows no arch).
_EMPTY_TABLES: dict[str, dict[str, Any]] = {
    "cuda_min_driver": {"versions": {}}, "torch": {"series": {}}, "xformers": {"torch": {}}, "vllm": {"rules": []},
    "arch": {"min_cuda": {}, "family_min_cuda": "0"},
}


def parse_partial(data: Mapping[str, Any]) -> CompatDoc:
    """Tables built in memory, checked by the same model, where tables and sources may be left out (empty)."""
    filled: dict[str, Any] = dict(data)
    for table, empty in _EMPTY_TABLES.items():
        given = filled.get(table, empty)
        filled[table] = {"source": "", **given} if isinstance(given, Mapping) else given
    return parse_compat(filled)
