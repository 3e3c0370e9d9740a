"""Compatibility rules as data (``data/compat.toml``, each table naming its source) and the checks that
prune a combination with the rule's words, or attach a note where the combination works with a caveat."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import resources
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from pinmatrix.archflag import (  # ArchFlag re-exported: the one parser of arch flags and what runs where
    ArchFlag,
    parse_capability,
)
from pinmatrix.project.compat_toml import (  # CompatError re-exported: what a malformed compat.toml raises
    COMPAT_FILE,
    CompatDoc,
    CompatError,  # noqa: F401
    CompatTable,
    TorchSeries,
    VllmRule,
    load_compat,
    parse_partial,
)


class UnknownVersion(Exception):
    """A version the compatibility tables do not know: the matrix names something pinmatrix cannot check."""


@dataclass(frozen=True)
class CompatFinding:
    prune: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    # What the cell needs beyond a lock from the default index (another index, a source build): the cell is
    # kept, and ``validate``/``cells``/``lock`` say it once per need instead of failing per cell.
    needs: tuple[str, ...] = ()


def platform_arch(platform: str | None) -> str | None:
    """'aarch64-manylinux_2_35' -> 'aarch64'; None stays None."""
    return platform.split("-", 1)[0] if platform else None


@cache
def cached_version(text: str) -> Version:
    return Version(text)


@cache
def cached_specifier(text: str) -> SpecifierSet:
    return SpecifierSet(text)


def gpu_capability(gpu: str) -> tuple[int, int]:
    """'sm_121' -> (12, 1); 'sm_90' -> (9, 0) (``archflag.parse_capability``; the schema checked the form)."""
    capability = parse_capability(gpu)
    if capability is None:
        raise ValueError(f"gpu {gpu!r} names no compute capability")
    return capability


def capability_string(gpu: str) -> str:
    major, minor = gpu_capability(gpu)
    return f"{major}.{minor}"


class CompatRules:
    """Loaded ``compat.toml`` (a CompatDoc, compat_model.py). Methods return CompatFindings; unknown versions
    raise UnknownVersion. Built from a dict of tables (in memory), tables and sources may be left out."""

    def __init__(self, data: Mapping[str, Any] | CompatDoc) -> None:
        self.doc = data if isinstance(data, CompatDoc) else parse_partial(data)
        self._tables: dict[str, CompatTable] = dict(self.doc)

    @classmethod
    def default(cls) -> CompatRules:
        return _default_rules()

    @classmethod
    def from_toml(cls, text: str, name: str = COMPAT_FILE) -> CompatRules:
        """Rules from compat.toml's text; CompatError (one line naming ``name`` and the key) if malformed."""
        return cls(load_compat(text, name))

    # -- sources, for messages
    def source(self, table: str) -> str:
        return self._tables[table].source

    @cached_property
    def forward_compat_gpus(self) -> frozenset[str]:
        return frozenset(self.doc.cuda_min_driver.forward_compat_gpus)

    def min_driver(self, cuda: str) -> str:
        versions = self.doc.cuda_min_driver.versions
        try:
            return versions[cuda]
        except KeyError:
            known = ", ".join(versions)
            raise UnknownVersion(f"unknown CUDA version {cuda!r} (known: {known})") from None

    def torch_series(self, torch: str) -> TorchSeries:
        series = self.doc.torch.series
        v = cached_version(torch)
        if str(v.public) in series:
            return series[str(v.public)]
        key = f"{v.major}.{v.minor}"
        if key in series:
            return series[key]
        raise UnknownVersion(f"unknown torch version {torch!r} (known series: {', '.join(series)})")

    def xformers_torch(self, xformers: str) -> str:
        table = self.doc.xformers.torch
        if xformers in table:
            return table[xformers]
        raise UnknownVersion(f"unknown xformers version {xformers!r} (known: {', '.join(table)})")

    def vllm_rule(self, vllm: str) -> VllmRule:
        for rule in self.doc.vllm.rules:
            if cached_version(vllm) in cached_specifier(rule.versions):
                return rule
        raise UnknownVersion(f"unknown vllm version {vllm!r} (no rule in compat.toml covers it)")

    def arch_min_cuda(self, flag: ArchFlag) -> str:
        table = self.doc.arch.min_cuda
        key = flag.base + ("a" if flag.suffix == "a" else "")
        if key not in table:
            raise UnknownVersion(f"unknown arch {flag.base}{flag.suffix} (known: {', '.join(table)})")
        need = table[key]
        if flag.suffix == "f":
            need = max(need, self.doc.arch.family_min_cuda, key=cached_version)
        return need

    # -- the rules
    @cache  # noqa: B019 - the rules object lives as long as the process
    def driver_cuda(self, driver: str, cuda: str, gpu: str | None) -> CompatFinding:
        need = self.min_driver(cuda)
        if cached_version(driver) >= cached_version(need):
            return CompatFinding()
        words = f"driver {driver} is older than CUDA {cuda}'s minimum {need}"
        if gpu is not None and gpu in self.forward_compat_gpus:
            return CompatFinding(notes=(f"{words}: needs the cuda-compat forward-compatibility package ({gpu} is a datacenter GPU)",))
        return CompatFinding(prune=(f"{words} ({self.source('cuda_min_driver')})",))

    def default_cuda(self, torch: str, platform: str | None = None) -> str:
        """What the default index serves of torch ``torch`` for ``platform``: a CUDA version, or "cpu"."""
        series = self.torch_series(torch)
        if platform_arch(platform) == "aarch64" and series.aarch64_default is not None:
            return series.aarch64_default
        return series.default_cuda

    @cache  # noqa: B019
    def torch_pins(self, torch: str, triton: str | None, cuda: str | None, platform: str | None = None) -> CompatFinding:
        series = self.torch_series(torch)
        prune: list[str] = []
        notes: list[str] = []
        needs: list[str] = []
        src = self.source("torch")
        if triton is not None and cached_version(triton) != cached_version(series.triton):
            prune.append(f"torch {torch} pins triton=={series.triton}, not {triton} ({src})")
        if cuda is not None:
            served = self.default_cuda(torch, platform)
            if cuda not in series.cuda:
                prune.append(f"torch {torch} has no CUDA {cuda} build (variants {', '.join(series.cuda)}; {src})")
            elif cuda != served:
                arch = platform_arch(platform)
                on = f" {arch}" if arch == "aarch64" and series.aarch64_default is not None else ""
                cite = self.doc.torch.aarch64_source if on and self.doc.torch.aarch64_source else src
                what = "a CPU build" if served == "cpu" else f"CUDA {served}"
                notes.append(f"torch {torch} for CUDA {cuda} comes from the PyTorch index "
                             f"(the default index serves {what})")
                needs.append(f"the PyTorch index: the default index's torch {torch}{on} wheel is {what}, "
                             f"not CUDA {cuda} ({cite})")
        return CompatFinding(tuple(prune), tuple(notes), tuple(needs))

    @cache  # noqa: B019
    def xformers_pins(self, xformers: str, torch: str | None) -> CompatFinding:
        spec = self.xformers_torch(xformers)
        if torch is not None and cached_version(torch) not in cached_specifier(spec):
            return CompatFinding(prune=(f"xformers {xformers} pins torch{spec}, not {torch} ({self.source('xformers')})",))
        return CompatFinding()

    @cache  # noqa: B019
    def vllm_pins(self, vllm: str, torch: str | None, flashinfer: str | None, source_build: bool) -> CompatFinding:
        rule = self.vllm_rule(vllm)
        src = self.source("vllm")
        prune: list[str] = []
        notes: list[str] = []
        needs: list[str] = []
        if torch is not None and cached_version(torch) not in cached_specifier(rule.torch):
            if source_build:
                notes.append(f"vllm {vllm} is built from source against torch {torch} "
                             f"(its wheel pins torch{rule.torch})")
            else:
                prune.append(f"vllm {vllm} pins torch{rule.torch}, not {torch} ({src}); "
                             "build it from source (source_build = true) to use another torch")
        pinned = rule.flashinfer
        if source_build:
            needs.append(f"a source build of vllm {vllm} (source_build = true): the lock leaves it out and the "
                         "image build installs no source build")
        elif flashinfer is not None and pinned is not None and cached_version(flashinfer) not in cached_specifier(pinned):
            needs.append(f"a source build of vllm {vllm}: its wheel pins torch{rule.torch} and flashinfer-python{pinned}, "
                         f"not flashinfer {flashinfer} ({src})")
        return CompatFinding(tuple(prune), tuple(notes), tuple(needs))

    @cache  # noqa: B019
    def arch_flags(self, flags: tuple[str, ...], cuda: str | None, gpu: str | None) -> CompatFinding:
        prune: list[str] = []
        parsed = [ArchFlag.parse(f) for f in flags]
        src = self.source("arch")
        if cuda is not None:
            for text, flag in zip(flags, parsed):
                need = self.arch_min_cuda(flag)
                if cached_version(cuda) < cached_version(need):
                    prune.append(f"arch {text} needs CUDA >= {need}, the cell has CUDA {cuda} ({src})")
        if gpu is not None:
            major, minor = gpu_capability(gpu)
            if not any(f.runs_on(major, minor) for f in parsed):
                prune.append(f"arch flags {' '.join(flags)} build no code that runs on {gpu} (capability {major}.{minor})")
        return CompatFinding(tuple(prune))


@cache
def _default_rules() -> CompatRules:
    text = resources.files("pinmatrix").joinpath(f"data/{COMPAT_FILE}").read_text(encoding="utf-8")
    return CompatRules.from_toml(text)
