"""What a bisect found, as data (``--json``), as a short human summary, and as one line for the report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pinmatrix.bisect.boundary import BoundaryCheck
from pinmatrix.bisect.crossing import Crossing
from pinmatrix.bisect.probe import Probe


@dataclass
class BisectReport:
    kind: str  # "param" | "version"
    smoke: str
    searched: str  # the parameter, or the axis
    host: dict[str, Any]
    runtime: str
    run_id: str
    points: int  # size of the searched space
    space: dict[str, Any]  # param: lo, hi, step, type; version: the ordered values
    cells: list[dict[str, str]]  # the cell (param) or every cell probed (version)
    held_fixed: dict[str, Any]
    outcome: str  # change | no-change | ambiguous | cannot-probe | stopped
    answer: str  # one sentence
    last_pass: Any = None  # param: largest passing value before the boundary (or smallest passing, inverted)
    first_fail: Any = None  # param: smallest failing value (or largest failing, inverted)
    inverted: bool = False  # param: fails below, passes above
    before: Any = None  # version: last value with the first verdict
    after: Any = None  # version: first value with the other verdict
    changed_from: str | None = None
    changed_to: str | None = None
    untested: list[Any] = field(default_factory=list)  # skipped points the change may be at
    failure_class: str | None = None  # the failing side's class at the boundary
    failing_classes: dict[str, list[Any]] = field(default_factory=dict)  # every failing probe's class -> values
    crossings: list[Crossing] = field(default_factory=list)
    boundary: list[BoundaryCheck] = field(default_factory=list)
    note: str = ""
    probes: list[Probe] = field(default_factory=list)

    @property
    def probes_run(self) -> int:
        return sum(1 for p in self.probes if not p.reused and p.recorded)

    @property
    def probes_reused(self) -> int:
        return sum(1 for p in self.probes if p.reused)

    @property
    def cannot_probe(self) -> int:
        return sum(1 for p in self.probes if p.verdict == "skip")

    def line(self) -> str:
        """One line for the report."""
        where = self.cells[0]["name"] if self.kind == "param" and self.cells else self.space.get("stack", "")
        bits = [f"bisect {self.smoke} over {self.searched} ({where}, host {self.host.get('id')}): {self.answer}"]
        if self.crossings:
            bits.append("; ".join(c.text for c in self.crossings))
        for b in self.boundary:
            bits.append(b.message)
        bits.append(f"{len(self.probes)} probes ({self.probes_run} run, {self.probes_reused} reused, "
                    f"{self.cannot_probe} skipped)")
        return " | ".join(bits)

    def summary(self) -> str:
        """A few lines for a person."""
        lines = [f"{self.answer}"]
        if self.failure_class:
            lines.append(f"failing side: {self.failure_class}")
        others = {c: v for c, v in self.failing_classes.items() if c != self.failure_class}
        if others:
            lines.append("other failures seen: " + ", ".join(
                f"{c} at {self.searched}={_values(v)}" for c, v in sorted(others.items())))
        for c in self.crossings:
            lines.append(f"limit: {c.text}")
        for b in self.boundary:
            lines.append(b.message)
        if self.untested:
            lines.append(f"could not probe between: {', '.join(map(str, self.untested))}")
        if self.note:
            lines.append(f"note: {self.note}")
        lines.append(f"{len(self.probes)} probes: {self.probes_run} run, {self.probes_reused} reused from the "
                     f"results store, {self.cannot_probe} could not be probed")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["probes_run"] = self.probes_run
        data["probes_reused"] = self.probes_reused
        data["probes_skipped"] = self.cannot_probe
        data["line"] = self.line()
        return data


def _values(values: list[Any]) -> str:
    shown = ", ".join(map(str, values[:4]))
    return shown + (f" (+{len(values) - 4})" if len(values) > 4 else "")


def failing_classes(probes: list[Probe]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for p in probes:
        if p.verdict == "fail":
            out.setdefault(p.failure_class or "unclassified", []).append(p.value)
    return {k: sorted(v, key=_order) for k, v in out.items()}


def skip_reasons(probes: list[Probe]) -> list[str]:
    """Why the points that were skipped could not be probed, each reason once, sorted; a point the store recorded
    as skipped says so."""
    return sorted({p.reason if not p.recorded else f"skipped: {p.reason}" for p in probes if p.verdict == "skip"})


def _order(v: Any) -> Any:
    return (0, v) if isinstance(v, (int, float)) else (1, str(v))

