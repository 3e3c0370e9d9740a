"""Which known-good entry ``pinmatrix pull`` takes: every candidate (the newest promotion of each cell, newest
first) with its verdict for the host (``release.pull.judge``) and for the user's selection — ``--stack``,
``--cell ID`` (an id or a unique prefix), ``-k EXPR`` (pytest-style, over the cell's name and id) and ``--pin
AXIS<specifier>`` (``torch>=2.9``, ``xformers==0.0.35-int64``, ``driver=590.48.01``) — and the newest that fits
both. ``pull --list`` shows them all with the reasons; nothing here touches a registry."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from pinmatrix.errors import PinmatrixError
from pinmatrix.matrix.keyword import compile_keyword
from pinmatrix.release.pull import PullCandidate, judge
from pinmatrix.results.store import HostFingerprint

_PIN = re.compile(r"^(?P<axis>[A-Za-z0-9][A-Za-z0-9_.-]*?)\s*(?P<spec>(?:==|!=|>=|<=|~=|===|>|<|=).*)$")
MAX_PIN = 200  # characters of one --pin


class SelectionError(PinmatrixError):
    """A --cell, -k or --pin that cannot be read, or names nothing the record holds (exit status 2)."""


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


@dataclass(frozen=True)
class PinRequirement:
    """``AXIS=VALUE`` (the pin exactly as written in the matrix), or ``AXIS`` and a PEP 440 specifier set
    (``torch>=2.9,<2.11``, ``six==1.17.0``) that the axis's value must satisfy as a version."""

    axis: str
    spec: str

    @classmethod
    def parse(cls, text: str) -> PinRequirement:
        m = _PIN.match(text.strip()) if len(text) <= MAX_PIN else None
        if m is None:
            raise SelectionError(f"--pin {text[:MAX_PIN]!r}: expected AXIS=VALUE or AXIS<specifier>, e.g. "
                                 "'torch>=2.9' or 'xformers==0.0.35-int64'")
        pin = cls(m["axis"], m["spec"].strip())
        if not pin.exact:
            try:
                SpecifierSet(pin.spec)
            except InvalidSpecifier:
                raise SelectionError(f"--pin {text!r}: {pin.spec!r} is not a version specifier") from None
        return pin

    @property
    def exact(self) -> bool:
        """``=VALUE`` (one equals sign), or ``==VALUE`` that is no PEP 440 specifier (``==0.0.35-int64``)."""
        if self.spec.startswith("=") and not self.spec.startswith("=="):
            return True
        if not self.spec.startswith("==") or self.spec.startswith("==="):
            return False
        try:
            SpecifierSet(self.spec)
        except InvalidSpecifier:
            return True
        return False

    def matches(self, value: str | None) -> bool:
        if value is None:
            return False
        if self.exact:
            return value == self.spec.lstrip("=").strip()
        version = _version(value)
        return version is not None and SpecifierSet(self.spec).contains(version, prereleases=True)

    def __str__(self) -> str:
        return f"{self.axis}{self.spec}"


@dataclass(frozen=True)
class Selection:
    """What the user asked for; empty = every cell."""

    stack: str | None = None
    cells: tuple[str, ...] = ()
    keyword: str | None = None
    pins: tuple[PinRequirement, ...] = ()

    @classmethod
    def parse(cls, *, stack: str | None = None, cells: Sequence[str] = (), keyword: str | None = None,
              pins: Sequence[str] = ()) -> Selection:
        if keyword is not None:
            compile_keyword(keyword)  # a bad expression is one line now, not after the host is probed
        return cls(stack, tuple(cells), keyword, tuple(PinRequirement.parse(p) for p in pins))

    def reasons(self, entry: dict[str, Any]) -> list[str]:
        """Why ``entry`` is outside the selection; empty when it is inside."""
        out: list[str] = []
        if self.cells and not any(str(entry["cell_id"]).startswith(c) for c in self.cells):
            out.append(f"not --cell {' or '.join(self.cells)}")
        if self.keyword is not None:
            text = f"{entry.get('cell_name', '')} {entry['cell_id']}"
            if not compile_keyword(self.keyword)(text):
                out.append(f"does not match -k {self.keyword!r}")
        pins = {str(k): str(v) for k, v in (entry.get("pins") or {}).items()}
        for pin in self.pins:
            value = pins.get(pin.axis)
            if not pin.matches(value):
                out.append(f"{pin.axis} is {value}, not {pin}" if value is not None else f"has no axis {pin.axis!r}")
        return out

    def check_against(self, entries: Sequence[dict[str, Any]], source: str) -> None:
        """Each --cell and --pin axis must name something in the record (of the stack): a typo is an error,
        not a silent "nothing fits"."""
        pool = [e for e in entries if self.stack is None or e["stack"] == self.stack]
        for prefix in self.cells:
            hits = {str(e["cell_id"]) for e in pool if str(e["cell_id"]).startswith(prefix)}
            if not hits:
                ids = sorted({str(e["cell_id"]) for e in pool})
                raise SelectionError(f"{source}: no known-good cell {prefix!r}"
                                     f"{' of stack ' + self.stack if self.stack else ''} (cells: {', '.join(ids) or 'none'})")
        axes = sorted({str(a) for e in pool for a in (e.get("pins") or {})})
        for pin in self.pins:
            if pin.axis not in axes:
                raise SelectionError(f"{source}: --pin {pin}: no known-good cell has axis {pin.axis!r} "
                                     f"(axes: {', '.join(axes) or 'none'})")


@dataclass(frozen=True)
class Candidate:
    """One cell's newest promotion, judged for the host and for the selection."""

    verdict: PullCandidate
    outside: list[str] = field(default_factory=list)  # why it is outside the selection

    @property
    def entry(self) -> dict[str, Any]:
        return self.verdict.entry

    @property
    def label(self) -> str:
        return self.verdict.label

    @property
    def fits_host(self) -> bool:
        return self.verdict.ok

    @property
    def ok(self) -> bool:
        return self.fits_host and not self.outside

    @property
    def reasons(self) -> list[str]:
        """Why it was passed over: outside the selection first, then what the host lacks."""
        return [*self.outside, *([] if self.fits_host else self.verdict.reasons)]

    def to_dict(self, chosen: bool = False) -> dict[str, Any]:
        e = self.entry
        return {"cell": e["cell_id"], "name": e.get("cell_name"), "stack": e["stack"], "digest": e["digest"],
                "reference": e["reference"], "promoted_at": e["promoted_at"], "pins": e.get("pins") or {},
                "fits_host": self.fits_host, "selected": not self.outside, "chosen": chosen,
                "reasons": self.reasons if not self.ok else list(self.verdict.reasons)}


def candidates(entries: Sequence[dict[str, Any]], host: HostFingerprint, selection: Selection) -> list[Candidate]:
    """Newest first, one per cell: its newest promotion, judged for ``host`` and ``selection``."""
    return [Candidate(v, selection.reasons(v.entry)) for v in judge(list(entries), host, stack=selection.stack)]


def choose(found: Sequence[Candidate]) -> Candidate | None:
    """The newest candidate that fits the host and the selection."""
    return next((c for c in found if c.ok), None)
