"""GPU architecture flags and targets, and what runs where: the one parser and the one rule for pinmatrix.

An ``ArchFlag`` is what a build is asked for ("12.0f", "9.0a+PTX", as in TORCH_CUDA_ARCH_LIST and
FLASHINFER_CUDA_ARCH_LIST) or what a binary holds (cuobjdump's "sm_121a" SASS, "compute_120f" PTX).
Whether its code runs on a GPU of capability X.Y, natively or through the driver's PTX JIT, is decided by
the cited rules in ``data/arch_rules.toml``.

Standard library only: the arch-coverage smoke imports this inside a cell's Python, where pinmatrix's
dependencies may be absent (``compat`` re-exports ``ArchFlag`` for the rest of the package).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal, cast

_FLAG = re.compile(r"^(\d+)\.(\d)([af]?)(\+PTX)?$")
_TARGET = re.compile(r"^(sm|compute)_(\d+)(\d)([af]?)$")
_CAPABILITY_DOTTED = re.compile(r"(\d+)\.(\d+)")
_CAPABILITY_SM = re.compile(r"(?:sm_|compute_)?(\d+)(\d)[af]?", re.IGNORECASE)
_SEPARATORS = re.compile(r"[\s;,]+")

Run = Literal["native", "jit"]


@cache
def arch_rules() -> dict[str, Any]:
    """``data/arch_rules.toml``: the a/f/plain rules with their sources, notes and known-issue evidence."""
    text = resources.files("pinmatrix").joinpath("data/arch_rules.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def _rule_holds(on: str, target: tuple[int, int], gpu: tuple[int, int]) -> bool:
    if on == "exact":
        return gpu == target
    if on == "same-major-newer-minor":
        return gpu[0] == target[0] and gpu[1] >= target[1]
    if on == "newer":
        return gpu >= target
    raise ValueError(f"data/arch_rules.toml: unknown rule {on!r}")


@dataclass(frozen=True)
class ArchFlag:
    major: int
    minor: int
    suffix: str  # "", "a" or "f"
    ptx: bool  # PTX of this target is (also) present / asked for
    sass: bool = True  # SASS (a cubin) of this target is present / asked for; False for PTX-only

    @classmethod
    def parse(cls, text: str) -> ArchFlag:
        """A build flag: '12.1a', '12.0f', '9.0a+PTX', '8.0'."""
        m = _FLAG.match(text)
        if not m:
            raise ValueError(f"bad arch flag {text!r}")
        return cls(int(m.group(1)), int(m.group(2)), m.group(3), bool(m.group(4)))

    @classmethod
    def parse_target(cls, text: str) -> ArchFlag:
        """A binary's target as cuobjdump names it: 'sm_121a' (SASS), 'compute_120f' (PTX), 'sm_90'."""
        m = _TARGET.match(text.strip())
        if not m:
            raise ValueError(f"bad GPU target {text!r}")
        form, major, minor, suffix = m.groups()
        is_ptx = form == "compute"
        return cls(int(major), int(minor), suffix, ptx=is_ptx, sass=not is_ptx)

    @property
    def base(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def label(self) -> str:
        return f"{self.base}{self.suffix}" + ("+PTX" if self.ptx and self.sass else "")

    @property
    def capability(self) -> tuple[int, int]:
        return (self.major, self.minor)

    @property
    def sass_name(self) -> str:
        """'sm_121a': the SASS target this flag builds (or is)."""
        return f"sm_{self.major}{self.minor}{self.suffix}"

    @property
    def ptx_name(self) -> str:
        return f"compute_{self.major}{self.minor}{self.suffix}"

    @property
    def names(self) -> tuple[str, ...]:
        """The cuobjdump-style names of what this flag builds: SASS first, then PTX."""
        return ((self.sass_name,) if self.sass else ()) + ((self.ptx_name,) if self.ptx else ())

    def how_runs(self, major: int, minor: int) -> Run | None:
        """'native' when SASS of this flag loads on a GPU of capability major.minor, 'jit' when only its PTX
        can be compiled for it, None when neither (``data/arch_rules.toml`` decides)."""
        rules = arch_rules()
        kind = self.suffix or "plain"
        for form, present in (("sass", self.sass), ("ptx", self.ptx)):
            if present:
                rule = rules[form][kind]
                if _rule_holds(rule["on"], self.capability, (major, minor)):
                    runs = rule["runs"]
                    if runs not in ("native", "jit"):
                        raise ValueError(f"data/arch_rules.toml: {form}.{kind}.runs must be 'native' or 'jit'")
                    return cast(Run, runs)
        return None

    def runs_on(self, major: int, minor: int) -> bool:
        """Whether code built for this flag runs on a GPU of capability major.minor, natively or by PTX JIT."""
        return self.how_runs(major, minor) is not None

    def carries(self, other: ArchFlag) -> bool:
        """Whether this SASS target satisfies a build asked for ``other``: sm_XYa satisfies X.Ya, X.Yf and X.Y;
        sm_XYf satisfies X.Yf and X.Y; plain sm_XY only X.Y."""
        if not self.sass or self.capability != other.capability:
            return False
        accepted = {"a": {"a"}, "f": {"f", "a"}, "": {"", "f", "a"}}[other.suffix]
        return self.suffix in accepted


def split_flags(value: str) -> list[str]:
    """'9.0a 12.1a' or '9.0a;12.1a' -> ['9.0a', '12.1a'] (spaces, ';' or ','); a lone '+PTX' attaches to the
    flag before it, as in TORCH_CUDA_ARCH_LIST ('8.0 +PTX' is '8.0+PTX'). A leading '+PTX' stays a token of
    its own, and ``ArchFlag.parse`` refuses it."""
    flags: list[str] = []
    for token in _SEPARATORS.split(value.strip()):
        if not token:
            continue
        if token.upper() == "+PTX" and flags:
            flags[-1] += "+PTX"
        else:
            flags.append(token)
    return flags


def parse_flags(flags: tuple[str, ...] | list[str]) -> list[ArchFlag]:
    """The flags a cell carries (each may itself be a list, e.g. ("9.0a", "+PTX") or ("8.0 +PTX",)), parsed
    with ``split_flags``'s rule for a lone '+PTX'. ValueError names a flag that is not one."""
    return [ArchFlag.parse(flag) for flag in split_flags(" ".join(flags))]


def parse_capability(text: str | None) -> tuple[int, int] | None:
    """A compute capability as hosts, cells and gpu axis values write it: '9.0' -> (9, 0), 'sm_121' -> (12, 1),
    'sm_90a' -> (9, 0), '90' -> (9, 0); None when ``text`` is empty or none of these."""
    if not text:
        return None
    text = text.strip()
    m = _CAPABILITY_DOTTED.fullmatch(text) or _CAPABILITY_SM.fullmatch(text)
    return (int(m.group(1)), int(m.group(2))) if m else None
