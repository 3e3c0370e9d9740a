"""Compatibility rules as data (``data/compat.toml``, each table naming its source) and the checks that
prune a combination with the rule's words, or attach a note where the combination works with a caveat."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from pinmatrix.archflag import (  # ArchFlag re-exported: the one parser of arch flags and what runs where
    ArchFlag,
    parse_capability,
)
from pinmatrix.index.wheel_metadata import MetadataCache, requirement_pins
from pinmatrix.paths import CACHE_DIR
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

METADATA_DIR = CACHE_DIR / "wheel-metadata"  # under the project root: the wheels' own METADATA, per (name, version)


class UnknownVersion(Exception):
    """A version the compatibility tables do not know: the matrix names something pinmatrix cannot check."""


@dataclass(frozen=True)
class WheelPins:
    """What one release's wheel requires, from its METADATA: canonical name -> specifier, and the words that cite
    it in a prune reason."""

    pins: dict[str, str]
    source: str

    def get(self, name: str) -> str | None:
        return self.pins.get(name)


def cuda_of_torch_pins(pins: dict[str, str]) -> str:
    """The CUDA a torch wheel is built for, from its exact cuda-toolkit or nvidia-cuda-runtime pin ("13.0");
    "cpu" where it requires neither."""
    for name in ("cuda-toolkit", "nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu13"):
        spec = pins.get(name, "")
        if spec.startswith("=="):
            parts = spec[2:].split(".")
            return ".".join(parts[:2])
    return "cpu"


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

    def __init__(self, data: Mapping[str, Any] | CompatDoc, metadata: MetadataCache | None = None,
                 python: str = "3.13") -> None:
        self.doc = data if isinstance(data, CompatDoc) else parse_partial(data)
        self._tables: dict[str, CompatTable] = dict(self.doc)
        self.metadata = metadata  # the wheels' own Requires-Dist (a cache: read here, filled by outdated/propose)
        self.python = python

    @classmethod
    def default(cls) -> CompatRules:
        return _default_rules()

    def with_metadata(self, metadata: MetadataCache, python: str) -> CompatRules:
        """These tables, with the wheels' own metadata in ``metadata`` read first where it knows a release."""
        return CompatRules(self.doc, metadata, python)

    def wheel_pins(self, name: str, version: str, platform: str | None = None) -> WheelPins | None:
        """What the cached METADATA of ``name`` ``version``'s wheel for ``platform``'s arch requires; None
        where nothing of it is cached."""
        if self.metadata is None:
            return None
        arch = platform_arch(platform) or "x86_64"
        meta = self.metadata.wheel_for(name, version, arch)
        if meta is None:
            return None
        return WheelPins(requirement_pins(meta, self.python, arch),
                         f"Requires-Dist of {meta.filename}, read {meta.fetched_at:%Y-%m-%d}")

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

    def torch_series(self, torch: str) -> TorchSeries | None:
        """The hand table's series of ``torch``; None where only its wheel's cached metadata knows it."""
        if self.wheel_pins("torch", torch) is not None and not self._knows_series(torch):
            return None
        return self._hand_series(torch)

    def _knows_series(self, torch: str) -> bool:
        v = cached_version(torch)
        return str(v.public) in self.doc.torch.series or f"{v.major}.{v.minor}" in self.doc.torch.series

    def torch_facts(self, torch: str, platform: str | None = None) -> tuple[str, tuple[str, ...], str, str]:
        """(the triton specifier torch ``torch`` pins, its CUDA variants, the variant the default index serves
        for ``platform`` ("cpu": a CPU build), the source): its wheel's metadata where cached (which knows the
        served variant only), else the hand table."""
        wheel = self.wheel_pins("torch", torch, platform)
        if wheel is not None:  # the PyTorch index's variants are the hand table's, where it has the series
            served = cuda_of_torch_pins(wheel.pins)
            variants = tuple(self._hand_series(torch).cuda) if self._knows_series(torch) else (
                (served,) if served != "cpu" else ())
            return wheel.get("triton") or "", variants, served, f"torch {torch}'s own {wheel.source}"
        series = self._hand_series(torch)
        served = series.default_cuda
        if platform_arch(platform) == "aarch64" and series.aarch64_default is not None:
            served = series.aarch64_default
        return f"=={series.triton}", tuple(series.cuda), served, self.source("torch")

    def _hand_series(self, torch: str) -> TorchSeries:
        series = self.doc.torch.series
        v = cached_version(torch)
        if str(v.public) in series:
            return series[str(v.public)]
        key = f"{v.major}.{v.minor}"
        if key in series:
            return series[key]
        raise UnknownVersion(f"unknown torch version {torch!r} (known series: {', '.join(series)})")

    def xformers_torch(self, xformers: str) -> str:
        return self._xformers_torch(xformers)[0]

    def _xformers_torch(self, xformers: str) -> tuple[str, str]:
        """The torch specifier xformers ``xformers`` requires, and its source: the wheel's metadata where cached,
        else the hand table."""
        wheel = self.wheel_pins("xformers", xformers)
        if wheel is not None:
            return wheel.get("torch") or ">=0", f"xformers {xformers}'s own {wheel.source}"
        table = self.doc.xformers.torch
        if xformers in table:
            return table[xformers], self.source("xformers")
        raise UnknownVersion(f"unknown xformers version {xformers!r} (known: {', '.join(table)})")

    def vllm_rule(self, vllm: str) -> VllmRule:
        """The torch and FlashInfer pins of vllm ``vllm``: its wheel's metadata where cached, else the first hand
        rule that covers it."""
        return self._vllm_rule(vllm)[0]

    def _vllm_rule(self, vllm: str) -> tuple[VllmRule, str]:
        wheel = self.wheel_pins("vllm", vllm)
        if wheel is not None:
            rule = VllmRule(versions=f"=={vllm}", torch=wheel.get("torch") or ">=0",
                            flashinfer=wheel.get("flashinfer-python") or None)
            return rule, f"vllm {vllm}'s own {wheel.source}"
        return self._hand_vllm_rule(vllm), self.source("vllm")

    def _hand_vllm_rule(self, vllm: str) -> VllmRule:
        for rule in self.doc.vllm.rules:
            if cached_version(vllm) in cached_specifier(rule.versions):
                return rule
        raise UnknownVersion(f"unknown vllm version {vllm!r} (no rule in compat.toml covers it and no metadata of "
                             "its wheel is cached: `pinmatrix propose` or `pinmatrix outdated --metadata` reads it)")

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
        return self.torch_facts(torch, platform)[2]

    @cache  # noqa: B019
    def torch_pins(self, torch: str, triton: str | None, cuda: str | None, platform: str | None = None) -> CompatFinding:
        triton_spec, variants, served, src = self.torch_facts(torch, platform)
        from_wheel = self.wheel_pins("torch", torch, platform) is not None
        prune: list[str] = []
        notes: list[str] = []
        needs: list[str] = []
        if triton is not None and triton_spec and cached_version(triton) not in cached_specifier(triton_spec):
            prune.append(f"torch {torch} pins triton{triton_spec}, not {triton} ({src})")
        if cuda is not None:
            if cuda not in variants and (not from_wheel or self._knows_series(torch)):
                prune.append(f"torch {torch} has no CUDA {cuda} build (variants {', '.join(variants)}; {src})")
            elif cuda != served:
                arch = platform_arch(platform)
                series = None if from_wheel else self._hand_series(torch)
                on = f" {arch}" if arch == "aarch64" and series is not None and series.aarch64_default is not None else ""
                cite = self.doc.torch.aarch64_source if on and self.doc.torch.aarch64_source else src
                what = "a CPU build" if served == "cpu" else f"CUDA {served}"
                notes.append(f"torch {torch} for CUDA {cuda} comes from the PyTorch index "
                             f"(the default index serves {what})")
                needs.append(f"the PyTorch index: the default index's torch {torch}{on} wheel is {what}, "
                             f"not CUDA {cuda} ({cite})")
        return CompatFinding(tuple(prune), tuple(notes), tuple(needs))

    @cache  # noqa: B019
    def xformers_pins(self, xformers: str, torch: str | None) -> CompatFinding:
        spec, src = self._xformers_torch(xformers)
        if torch is not None and cached_version(torch) not in cached_specifier(spec):
            return CompatFinding(prune=(f"xformers {xformers} pins torch{spec}, not {torch} ({src})",))
        return CompatFinding()

    @cache  # noqa: B019
    def vllm_pins(self, vllm: str, torch: str | None, flashinfer: str | None, source_build: bool) -> CompatFinding:
        rule, src = self._vllm_rule(vllm)
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


def rules_for(root: Path, python: str) -> CompatRules:
    """The shipped tables with the project's cached wheel metadata (``METADATA_DIR`` under ``root``)
    read first: what expansion checks cells against. Reading the cache only, it asks no index."""
    return CompatRules.default().with_metadata(MetadataCache(root / METADATA_DIR), python)


def hand_rule_disagreements(rules: CompatRules) -> list[str]:
    """Each hand rule of compat.toml that a cached wheel's own metadata contradicts, one line each (what
    ``validate`` reports): vllm's torch and FlashInfer pins, xformers' torch pin, torch's triton and default CUDA."""
    if rules.metadata is None:
        return []
    out: list[str] = []
    for version in rules.metadata.versions("vllm"):
        wheel = rules.wheel_pins("vllm", version)
        try:
            hand = rules._hand_vllm_rule(version)
        except UnknownVersion:
            continue
        for axis, dist, said in (("torch", "torch", hand.torch), ("flashinfer", "flashinfer-python", hand.flashinfer)):
            pinned = wheel.get(dist) if wheel else None
            if said and pinned and pinned.startswith("==") and cached_version(pinned[2:]) not in cached_specifier(said):
                out.append(f"compat.toml [vllm] rule {hand.versions}: says vllm {version} pins {axis}{said}, its wheel "
                           f"requires {dist}{pinned} ({wheel.source if wheel else ''})")
    for version in rules.metadata.versions("xformers"):
        wheel, said = rules.wheel_pins("xformers", version), rules.doc.xformers.torch.get(version)
        if wheel and said and cached_specifier(said) != cached_specifier(wheel.get("torch") or ""):
            out.append(f"compat.toml [xformers.torch] {version!r}: says torch{said}, its wheel requires "
                       f"torch{wheel.get('torch') or ' (none)'} ({wheel.source})")
    for version in rules.metadata.versions("torch"):
        if not rules._knows_series(version):
            continue
        series, (triton, _, served, src) = rules._hand_series(version), rules.torch_facts(version)
        if triton and cached_version(series.triton) not in cached_specifier(triton):
            out.append(f"compat.toml [torch.series] for {version}: says triton {series.triton}, its wheel requires "
                       f"triton{triton} ({src})")
        if served != series.default_cuda:
            out.append(f"compat.toml [torch.series] for {version}: says the default index serves CUDA "
                       f"{series.default_cuda}, its wheel is built for {served} ({src})")
    return out


@cache
def _default_rules() -> CompatRules:
    text = resources.files("pinmatrix").joinpath(f"data/{COMPAT_FILE}").read_text(encoding="utf-8")
    return CompatRules.from_toml(text)
