"""Coherent candidates: the pins that must move together, read from the packages' own METADATA. A vLLM release
brings the torch and FlashInfer it pins exactly (and FlashInfer's sibling wheels at that version); a torch
release brings the triton it pins and the CUDA its default-index wheel is built for; xFormers and FlashInfer
follow with their newest release whose torch requirement accepts it. Pins the index does not serve are a
candidate's prune reasons before anything is expanded; and the "newest of each" candidate is made too, so that
what no release accepts is shown with the pin that refuses it."""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from pinmatrix.index.wheel_metadata import requirement_pins
from pinmatrix.matrix.compat import cuda_of_torch_pins
from pinmatrix.project.matrix_toml import Stack
from pinmatrix.upgrade.outdated import package_axes, pinned_versions
from pinmatrix.upgrade.sources import UpgradeSources, distribution_of

FLASHINFER_SIBLINGS = ("flashinfer-cubin", "flashinfer-jit-cache")
SCAN = 8  # releases of a follower (xformers, flashinfer) read back from the newest for one that fits


@dataclass
class UpgradeCandidate:
    stack: str
    label: str  # "vllm 0.34.0", "torch 2.14.0", "newest of each"
    pins: dict[str, str]  # axis -> version, the axes that move
    why: list[str] = field(default_factory=list)  # where each pin comes from
    problems: list[str] = field(default_factory=list)  # prune reasons found before expansion

    @property
    def sets(self) -> list[str]:
        return [f"--set {axis}={version}" for axis, version in self.pins.items()]


@dataclass(frozen=True)
class CandidateTarget:
    stack: str
    arch: str  # x86_64 or aarch64: which wheel's metadata speaks
    python: str


class _Reader:
    def __init__(self, sources: UpgradeSources, target: CandidateTarget) -> None:
        self.sources, self.target = sources, target

    def pins(self, name: str, version: str) -> dict[str, str]:
        meta = self.sources.wheel_metadata(name, version, self.target.arch, self.target.python)
        return requirement_pins(meta, self.target.python, self.target.arch)

    def served(self, name: str) -> list[Version]:
        return [v for v in self.sources.project(name).release_versions() if not v.is_prerelease]

    def newest_in(self, name: str, spec: str) -> Version | None:
        fits = [v for v in self.served(name) if v in SpecifierSet(spec)]
        return fits[-1] if fits else None


def _exact(spec: str | None) -> str | None:
    return spec[2:] if spec and spec.startswith("==") and "," not in spec else None


def _torch_followers(reader: _Reader, cand: UpgradeCandidate, torch: str, axes: list[str]) -> None:
    """triton and CUDA from torch's metadata; xformers and flashinfer: the newest release accepting torch."""
    pins = reader.pins("torch", torch)
    triton = pins.get("triton")
    if "triton" in axes and triton:
        found = reader.newest_in("triton", triton)
        if found is None:
            cand.problems.append(f"torch {torch} requires triton{triton}, which the index does not serve")
        else:
            cand.pins["triton"] = str(found)
            cand.why.append(f"torch {torch} requires triton{triton}: {found}")
    cuda = cuda_of_torch_pins(pins)
    if cuda != "cpu":
        cand.pins["cuda"] = cuda
        cand.why.append(f"torch {torch}'s wheel on the default index is built for CUDA {cuda}")
    for axis in ("xformers", "flashinfer"):
        if axis in axes and axis not in cand.pins:
            _follow(reader, cand, axis, torch)


def _follow(reader: _Reader, cand: UpgradeCandidate, axis: str, torch: str) -> None:
    name = distribution_of(axis)
    for version in reversed(reader.served(name)[-SCAN:]):
        spec = reader.pins(name, str(version)).get("torch")
        if spec is None or Version(torch) in SpecifierSet(spec):
            cand.pins[axis] = str(version)
            cand.why.append(f"{name} {version} is the newest that accepts torch {torch}"
                            f" (it requires torch{spec or ' (none)'})")
            return
    cand.problems.append(f"none of {name}'s newest {SCAN} releases accepts torch {torch}")


def vllm_candidate(reader: _Reader, stack: Stack, vllm: str) -> UpgradeCandidate:
    """vllm ``vllm`` with the torch and FlashInfer it pins exactly, and what torch brings."""
    cand = UpgradeCandidate(reader.target.stack, f"vllm {vllm}", {"vllm": vllm})
    axes = package_axes(stack)
    pins = reader.pins("vllm", vllm)
    for axis, name in (("torch", "torch"), ("flashinfer", "flashinfer-python")):
        spec = pins.get(name)
        if axis not in axes or not spec:
            continue
        exact = _exact(spec)
        version = exact if exact and Version(exact) in reader.served(name) else None
        if exact and version is None:
            cand.problems.append(f"vllm {vllm} requires {name}{spec}, which the index does not serve")
            version = exact
        version = version or str(reader.newest_in(name, spec) or "")
        if version:
            cand.pins[axis] = version
            cand.why.append(f"vllm {vllm} requires {name}{spec}")
    for sibling in FLASHINFER_SIBLINGS:
        spec = pins.get(sibling)
        exact = _exact(spec)
        if exact and Version(exact) not in reader.served(sibling):
            cand.problems.append(f"vllm {vllm} requires {sibling}{spec} (FlashInfer's sibling wheel), which the "
                                 "index does not serve")
        elif exact:
            cand.why.append(f"vllm {vllm} requires {sibling}{spec}, FlashInfer's sibling at the same version")
    if "torch" in cand.pins:
        _torch_followers(reader, cand, cand.pins["torch"], axes)
    return cand


def torch_candidate(reader: _Reader, stack: Stack, torch: str) -> UpgradeCandidate:
    cand = UpgradeCandidate(reader.target.stack, f"torch {torch}", {"torch": torch})
    _torch_followers(reader, cand, torch, package_axes(stack))
    return cand


def newest_of_each(reader: _Reader, stack: Stack) -> UpgradeCandidate:
    """Every package axis at its newest release, coupled or not: what a one-package-at-a-time bot proposes."""
    cand = UpgradeCandidate(reader.target.stack, "newest of each", {})
    for axis in package_axes(stack):
        served = reader.served(distribution_of(axis))
        if served:
            cand.pins[axis] = str(served[-1])
            if axis in ("torch", "vllm", "xformers"):
                reader.pins(distribution_of(axis), str(served[-1]))  # cached for expansion's rules to read
    cand.why.append("each package axis at its newest release on the index, read one by one")
    return cand


def candidates(sources: UpgradeSources, target: CandidateTarget, stack: Stack, limit: int = 3) -> list[UpgradeCandidate]:
    """The stack's candidates, newest first: one per newer vLLM release (a stack with a vllm axis) or per newer
    torch release (else), at most ``limit``, then the "newest of each"."""
    reader = _Reader(sources, target)
    axes = package_axes(stack)
    lead = "vllm" if "vllm" in axes else "torch" if "torch" in axes else None
    out: list[UpgradeCandidate] = []
    if lead is not None:
        top = Version(pinned_versions(stack, lead)[-1])
        newer = [v for v in reader.served(distribution_of(lead)) if v > top][::-1][:limit]
        make = vllm_candidate if lead == "vllm" else torch_candidate
        out = [make(reader, stack, str(v)) for v in newer]
    naive = newest_of_each(reader, stack)
    if naive.pins and all(naive.pins != c.pins for c in out):
        out.append(naive)
    return out
