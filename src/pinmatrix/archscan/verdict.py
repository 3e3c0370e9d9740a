"""A binary's targets against a GPU: per kernel group (fatbin container) the code the runtime would pick,
and the sum per binary and per package. The rules are ``ArchFlag.how_runs`` (``data/arch_rules.toml``).

Standard library only (see the package docstring).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from pinmatrix.archflag import ArchFlag, arch_rules
from pinmatrix.archscan.binary import BinaryTargets

NATIVE = "native"
JIT = "ptx-jit"
PARTIAL = "partial"
CANNOT = "cannot-run"
OTHER = "other-gpus"  # a kernel group built only for other GPU generations (see group_verdict)
NO_DEVICE_CODE = "no-device-code"
MISSING = "missing"
# Worst last; a package's verdict is the worst of its binaries'. OTHER ranks below NATIVE: a binary built only
# for other GPU generations is left out of a package's worst verdict (libraries dispatch by capability and never
# load it here); a package whose binaries are all such is OTHER itself, a verdict of its own.
ORDER: tuple[str, ...] = (NO_DEVICE_CODE, OTHER, NATIVE, JIT, PARTIAL, CANNOT, MISSING)
WORDS: dict[str, str] = {
    NATIVE: "runs natively", JIT: "runs via PTX JIT", PARTIAL: "some kernel groups cannot run",
    CANNOT: "cannot run", NO_DEVICE_CODE: "no device code", MISSING: "not fetched",
    OTHER: "built only for other GPUs",
}


def parse_gpu(gpu: str) -> tuple[int, int]:
    """'sm_121' / '12.1' / 'sm_90a' -> (12, 1) / (12, 1) / (9, 0)."""
    text = gpu.strip()
    if "." in text:
        major, minor = text.split(".", 1)
        return int(major), int(minor[0])
    flag = ArchFlag.parse_target(text if text.startswith(("sm_", "compute_")) else f"sm_{text}")
    return flag.capability


def _rank_native(flag: ArchFlag, gpu: tuple[int, int]) -> tuple[int, int, int]:
    """Higher is better: the GPU's own capability first, then 'a' over 'f' over plain, then the newest minor."""
    return (int(flag.capability == gpu), {"a": 2, "f": 1, "": 0}[flag.suffix], flag.minor)


@dataclass(frozen=True)
class GroupVerdict:
    verdict: str  # NATIVE, JIT, CANNOT or OTHER
    chosen: str | None  # the target the runtime would use ('sm_120', 'compute_80'); None when none runs


def group_verdict(targets: Iterable[str], gpu: tuple[int, int]) -> GroupVerdict:
    """The code the runtime would pick from one kernel group for the GPU. A group with nothing that runs is
    CANNOT when it holds code of the GPU's own major (sm_120a on sm_121: the GPU's path exists, for a
    sibling only), OTHER when it holds only other generations' code (sm_90a on sm_121: libraries dispatch
    such kernels by capability and never launch them there)."""
    flags = [ArchFlag.parse_target(t) for t in targets]
    native = [f for f in flags if f.sass and f.how_runs(*gpu) == "native"]
    if native:
        return GroupVerdict(NATIVE, max(native, key=lambda f: _rank_native(f, gpu)).sass_name)
    jit = [f for f in flags if f.ptx and f.how_runs(*gpu) == "jit"]
    if jit:
        best = max(jit, key=lambda f: (f.capability, f.suffix != ""))
        return GroupVerdict(JIT, best.ptx_name)
    return GroupVerdict(CANNOT if any(f.major == gpu[0] for f in flags) else OTHER, None)


@dataclass
class BinaryVerdict:
    path: str
    verdict: str
    groups: int
    counts: dict[str, int]  # NATIVE / JIT / CANNOT / OTHER -> number of kernel groups
    used: dict[str, int]  # target the runtime picks -> number of groups
    cannot: dict[str, int]  # 'sm_100a sm_120a' (a group's targets) -> number of such groups that cannot run
    other: dict[str, int]  # the same for groups built only for other GPU generations
    sass: list[str]
    ptx: list[str]
    exact: bool
    tool: str
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"path": self.path, "verdict": self.verdict, "groups": self.groups, "counts": self.counts,
                "used": self.used, "cannot": self.cannot, "other": self.other, "sass": self.sass, "ptx": self.ptx,
                "exact": self.exact, "tool": self.tool, "notes": self.notes}

    @property
    def summary(self) -> str:
        """One line: 'partial: 16/100 kernel groups cannot run (only sm_100a sm_120a ...); native via sm_120'."""
        parts: list[str] = []
        if self.counts.get(CANNOT):
            only = "; ".join(f"{n}x {k}" for k, n in sorted(self.cannot.items(), key=lambda kv: -kv[1])[:4])
            parts.append(f"{self.counts[CANNOT]}/{self.groups} kernel groups cannot run (they hold only {only})")
        if self.counts.get(JIT):
            parts.append(f"{self.counts[JIT]}/{self.groups} via PTX JIT")
        if self.counts.get(NATIVE):
            via = " ".join(sorted(self.used_of("sm_"), key=lambda t: ArchFlag.parse_target(t).capability))
            parts.append(f"{self.counts[NATIVE]}/{self.groups} native ({via})")
        if self.counts.get(OTHER):
            parts.append(f"{self.counts[OTHER]}/{self.groups} only for other GPUs")
        return f"{self.verdict}: " + "; ".join(parts)

    def used_of(self, prefix: str) -> list[str]:
        return [t for t in self.used if t.startswith(prefix)]


def binary_verdict(binary: BinaryTargets, gpu: tuple[int, int]) -> BinaryVerdict:
    rules = arch_rules()["notes"]
    counts: Counter[str] = Counter()
    used: Counter[str] = Counter()
    cannot: Counter[str] = Counter()
    other: Counter[str] = Counter()
    for group in binary.groups:
        v = group_verdict(group, gpu)
        counts[v.verdict] += 1
        key = " ".join(sorted(set(group), key=_target_order))
        if v.chosen:
            used[v.chosen] += 1
        else:
            (cannot if v.verdict == CANNOT else other)[key] += 1
    if counts[CANNOT] and (counts[NATIVE] or counts[JIT]):
        overall = PARTIAL
    elif counts[CANNOT]:
        overall = CANNOT
    elif not (counts[NATIVE] or counts[JIT]):
        overall = OTHER  # every group is for other GPU generations
    elif counts[JIT]:
        overall = JIT
    else:
        overall = NATIVE
    notes = list(binary.notes)
    if counts[JIT]:
        notes.append(rules["jit"])
    chosen = [ArchFlag.parse_target(t) for t in used if t.startswith("sm_")]
    if any(f.capability != gpu and f.suffix != "f" for f in chosen):
        notes.append(rules["older_minor"])
    if any(f.suffix == "f" for f in chosen):
        notes.append(rules["family"])
    if counts[OTHER]:
        notes.append(rules["other_gpus"])
    if not binary.grouped:
        notes.append("kernel groups unknown: the verdict is for the union of the binary's targets")
    return BinaryVerdict(
        path=binary.path, verdict=overall, groups=len(binary.groups), counts=dict(counts), used=dict(used),
        cannot=dict(cannot), other=dict(other), sass=binary.sass, ptx=binary.ptx, exact=binary.exact, tool=binary.tool,
        notes=list(dict.fromkeys(notes)),
    )


def _target_order(t: str) -> tuple[int, int, str, bool]:
    f = ArchFlag.parse_target(t)
    return (f.major, f.minor, f.suffix, f.ptx)


def worst_verdict(verdicts: Iterable[str]) -> str:
    found = list(verdicts)
    return max(found, key=ORDER.index) if found else NO_DEVICE_CODE


def package_verdict(binaries: Iterable[BinaryVerdict]) -> str:
    """The package's verdict: NO_DEVICE_CODE without binaries; PARTIAL when one binary cannot run and another
    can; else the worst of its binaries' (binaries only for other GPUs count only when nothing else is there)."""
    found = [b.verdict for b in binaries]
    if not found:
        return NO_DEVICE_CODE
    if CANNOT in found and any(v in (NATIVE, JIT, PARTIAL) for v in found):
        return PARTIAL
    return worst_verdict(found)


def honours(binary: BinaryTargets, flag: ArchFlag) -> bool | None:
    """Whether the binary carries SASS built for the arch flag (12.1a -> sm_121a); None when the binary's
    suffixes are unknown (fatbin header parser) and its numbers would match."""
    sass = [ArchFlag.parse_target(t) for t in binary.sass]
    if binary.exact:
        return any(s.carries(flag) for s in sass)
    return None if any(s.capability == flag.capability for s in sass) else False
