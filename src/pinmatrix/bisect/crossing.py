"""Where a declared quantity of a smoke crosses a limit between two points of a parameter search: what a
boundary search reports, and what a known issue's boundary is read in (its quantity, not its parameter)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pinmatrix.project.smoke_params import SmokeParams


@dataclass
class Crossing:
    """A declared quantity that crosses a limit between the last passing and the first failing point."""

    quantity: str
    limit: str  # "2^31", or a declared limit's label
    limit_value: float
    at_pass: float
    at_fail: float
    verb: str  # "pass" (exceeds), "reach" (equals it), "drop below"
    text: str


def crossings(decl: SmokeParams, param: str, at_pass: dict[str, Any], at_fail: dict[str, Any]) -> list[Crossing]:
    """Each declared quantity that depends on ``param`` and crosses a limit (a declared one, or a power of two
    from 2^8 to 2^63) between the passing and the failing point."""
    out = []
    for label, factors in decl.quantities.items():
        if param not in factors:
            continue
        qp, qf = decl.quantity(label, at_pass), decl.quantity(label, at_fail)
        if qp == qf:
            continue
        limits = {f"2^{k}": float(2**k) for k in range(8, 64)}
        limits.update(decl.limit_values(at_fail))
        for name, lim in limits.items():
            verb = None
            if qp < qf:
                if qp <= lim < qf:
                    verb = "pass"
                elif qp < lim == qf:
                    verb = "reach"
            elif qf < lim <= qp:
                verb = "drop below"
            if verb is None:
                continue
            shown = name if name.startswith("2^") else f"{name} ({_num(lim)})"
            text = f"{label} {verb} {shown} at {param}={at_fail[param]} ({_num(qp)} -> {_num(qf)})"
            out.append(Crossing(label, name, lim, qp, qf, verb, text))
    return out


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"
