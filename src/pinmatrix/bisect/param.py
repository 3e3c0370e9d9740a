"""The parameter search: the smallest value of a smoke's declared parameter at which it fails (or, when it
fails below and passes above, the largest failing one), each probe the smoke run once at one value, the other
dimensions held fixed; then which declared quantity crosses which limit at that boundary."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pinmatrix.bisect import boundary as bnd
from pinmatrix.bisect.crossing import crossings
from pinmatrix.bisect.probe import Prober
from pinmatrix.bisect.report import BisectReport, failing_classes, skip_reasons
from pinmatrix.bisect.search import ProbeOutcome, bisect
from pinmatrix.errors import PinmatrixError
from pinmatrix.project.catalogue import Smoke
from pinmatrix.smoke.target import SmokeTarget


@dataclass(frozen=True)
class ParamSpace:
    """The points lo, lo+step, ..., up to hi (hi itself always included)."""

    name: str
    type: str  # "int" | "float"
    lo: float
    hi: float
    step: float

    @property
    def n(self) -> int:
        return int(math.floor((self.hi - self.lo) / self.step + 1e-9)) + 1 + (0 if self._hi_on_grid() else 1)

    def _hi_on_grid(self) -> bool:
        k = (self.hi - self.lo) / self.step
        return abs(k - round(k)) < 1e-9

    def value(self, i: int) -> int | float:
        v = self.hi if i == self.n - 1 else self.lo + i * self.step
        if self.type == "int":
            return int(round(v))
        return float(f"{v:.12g}")

    def to_dict(self) -> dict[str, Any]:
        return {"param": self.name, "type": self.type, "lo": self.value(0), "hi": self.value(self.n - 1),
                "step": int(self.step) if self.type == "int" else self.step}


def make_space(smoke: Smoke, param: str, lo: float | None, hi: float | None, step: float | None) -> ParamSpace:
    decl = smoke.parameters
    if decl is None:
        raise PinmatrixError(f"smoke {smoke.name!r} declares no parameters (add 'params' to its SMOKES entry in "
                             f"{smoke.module.name})")
    if param not in decl.params:
        raise PinmatrixError(f"smoke {smoke.name!r} has no parameter {param!r} (parameters: {', '.join(decl.params)})")
    spec = decl.params[param]
    lo = spec.range[0] if lo is None else lo
    hi = spec.range[1] if hi is None else hi
    if spec.type == "int":
        if not (float(lo).is_integer() and float(hi).is_integer()):
            raise PinmatrixError(f"--range {lo}:{hi}: parameter {param!r} is an int")
        step = 1 if step is None else step
        if not float(step).is_integer():
            raise PinmatrixError(f"--step {step}: parameter {param!r} is an int")
    elif step is None:
        step = (hi - lo) / 1024  # a float parameter is searched to 1/1024 of its range unless told otherwise
    if not lo < hi:
        raise PinmatrixError(f"--range {lo}:{hi}: the low end must come first")
    if step <= 0:
        raise PinmatrixError(f"--step {step}: must be positive")
    space = ParamSpace(param, spec.type, float(lo), float(hi), float(step))
    if space.n < 2:
        raise PinmatrixError(f"--range {lo}:{hi} with step {step} holds fewer than two points")
    return space




def run_param_bisect(*, cell: SmokeTarget, smoke: Smoke, space: ParamSpace, overrides: dict[str, Any], prober: Prober,
                     prepare: Any, boundaries: list[bnd.BoundarySpec], runtime: str, host: dict[str, Any],
                     max_skips: int) -> BisectReport:
    decl = smoke.parameters
    assert decl is not None
    base = decl.values(overrides)
    fixed = {k: v for k, v in base.items() if k != space.name}
    boundaries = [bnd.in_quantity(b, decl) for b in boundaries]  # in the quantity each is about

    def dims(i: int) -> dict[str, Any]:
        return {**base, space.name: space.value(i)}

    def probe(i: int) -> ProbeOutcome:
        v = space.value(i)
        return prober.probe(i, v, f"{space.name}={v}", bnd.cell_at(cell, v, boundaries, dims(i), decl), dims(i),
                            lambda: prepare(cell)).verdict

    res = bisect(space.n, probe, high_first=True, max_skips=max_skips)
    rep = BisectReport(
        kind="param", smoke=smoke.name, searched=space.name, host=host, runtime=runtime, run_id=prober.run_id,
        points=space.n, space=space.to_dict(), cells=[{"id": cell.id, "name": cell.name,
                                                       "stack": cell.stack}],
        held_fixed=fixed, outcome=res.outcome, answer="", note=res.note, probes=list(prober.probes),
    )
    rep.failing_classes = failing_classes(rep.probes)
    by_index = {p.index: p for p in rep.probes}
    lo_v, hi_v = space.value(0), space.value(space.n - 1)
    p_name = space.name
    if res.outcome == "no-change":
        assert res.first is not None and res.last is not None
        a, b = space.value(res.first), space.value(res.last)
        if res.reference == "pass":
            rep.answer = f"no failure: {smoke.name} passes from {p_name}={a} up to {p_name}={b}"
        else:
            cls = by_index[res.last].failure_class
            rep.failure_class = cls
            rep.answer = f"fails across the whole range: {p_name}={a} and {p_name}={b} both fail" + (f" ({cls})" if cls else "")
    elif res.outcome in ("change", "ambiguous"):
        assert res.before is not None and res.after is not None
        before, after = space.value(res.before), space.value(res.after)
        rep.untested = [space.value(i) for i in res.untested]
        exact = res.outcome == "change" and res.after - res.before == 1
        if res.reference == "pass":  # passes low, fails high: the smallest failing value
            rep.last_pass, rep.first_fail = before, after
            rep.failure_class = by_index[res.after].failure_class
            fail_at = (dims(res.before), dims(res.after))
            rep.answer = (f"smallest failing {p_name} = {after}" if exact else
                          f"first failure between {p_name}={before} (pass) and {p_name}={after} (fail)")
            rep.answer += f"; largest passing {p_name} = {before}" if exact else ""
            rep.crossings = crossings(decl, p_name, *fail_at) if exact else []
        else:  # fails low, passes high
            rep.inverted = True
            rep.first_fail, rep.last_pass = before, after
            rep.failure_class = by_index[res.before].failure_class
            rep.answer = (f"fails below: largest failing {p_name} = {before}, smallest passing {p_name} = {after}"
                          if exact else f"passing starts between {p_name}={before} (fail) and {p_name}={after} (pass)")
            rep.crossings = crossings(decl, p_name, dims(res.after), dims(res.before)) if exact else []
        if rep.failure_class:
            rep.answer += f" ({rep.failure_class})"
    elif res.outcome == "cannot-probe":
        reasons = skip_reasons(rep.probes)
        rep.answer = f"cannot probe {smoke.name} over {p_name} in [{lo_v}, {hi_v}]: " + "; ".join(reasons)
    else:  # stopped
        rep.answer = f"stopped before the search ended: {res.note}"
    if res.outcome in ("change", "ambiguous", "no-change"):
        if res.outcome == "no-change" and res.reference == "pass":
            first, exact = None, True
        elif res.reference == "fail":  # fails already at the low end: the boundary is there or below it
            first, exact = lo_v, True
        else:
            first, exact = rep.first_fail, res.outcome == "change"
        values = [space.value(i) for i in range(space.n)]
        expected = {b.issue: bnd.expected_in(b, values, base, decl) for b in boundaries}
        rep.boundary = bnd.check(boundaries, first, rep.failure_class, exact=exact, where=f"in [{lo_v}, {hi_v}]",
                                 expected=expected)
    return rep
