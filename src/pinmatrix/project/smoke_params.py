"""Numeric parameters a smoke may declare, for ``pinmatrix bisect``.

In a smoke module's ``SMOKES`` literal::

    "xformers-tiled-matmul-shape": {
        ...,
        "params": {"M": {"type": "int", "range": [1, 131072], "default": 33280}},
        "fixed": {"K": 2048, "N": 64512, "dtype": "bfloat16"},          # the other dimensions, held fixed
        "quantities": {"output elements M*N": ["M", "N"]},               # products of dimensions
        "limits": {"2^31": 2147483648},                                  # optional; powers of two always count
    }

A probe runs the smoke at one value of one parameter with every other dimension at its default or fixed
value; the quantities say what grows with the parameter, so a bisect can name the limit a boundary crosses.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Scalar = int | float | str | bool


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ParamSpec(_Strict):
    """One searchable parameter: its type, the closed range a search covers, and the value a plain run uses."""

    type: Literal["int", "float"] = "int"
    range: tuple[float, float]
    default: float | None = None

    @model_validator(mode="after")
    def _check(self) -> ParamSpec:
        lo, hi = self.range
        if not lo < hi:
            raise ValueError(f"range [{lo}, {hi}] must have its low end first")
        if self.type == "int" and not (float(lo).is_integer() and float(hi).is_integer()):
            raise ValueError("an int parameter needs an integer range")
        if self.default is not None and not lo <= self.default <= hi:
            raise ValueError(f"default {self.default} is outside the range [{lo}, {hi}]")
        return self

    def cast(self, value: float) -> int | float:
        return int(value) if self.type == "int" else float(value)


class SmokeParams(_Strict):
    params: dict[str, ParamSpec] = Field(min_length=1)
    fixed: dict[str, Scalar] = Field(default_factory=dict)
    quantities: dict[str, list[str | int]] = Field(default_factory=dict)
    limits: dict[str, float | str] = Field(default_factory=dict)  # a number, or the name of a fixed dimension

    @model_validator(mode="after")
    def _names(self) -> SmokeParams:
        clash = set(self.params) & set(self.fixed)
        if clash:
            raise ValueError(f"{', '.join(sorted(clash))} is both a parameter and a fixed dimension")
        dims = set(self.params) | set(self.fixed)
        for label, factors in self.quantities.items():
            if not factors:
                raise ValueError(f"quantity {label!r} has no factors")
            for f in factors:
                if isinstance(f, str) and f not in dims:
                    raise ValueError(f"quantity {label!r}: {f!r} is neither a parameter nor a fixed dimension")
                if isinstance(f, str) and f in self.fixed and not isinstance(self.fixed[f], (int, float)):
                    raise ValueError(f"quantity {label!r}: fixed dimension {f!r} is not a number")
        for label, value in self.limits.items():
            if isinstance(value, str) and not isinstance(self.fixed.get(value), (int, float)):
                raise ValueError(f"limit {label!r}: {value!r} is not a numeric fixed dimension")
        return self

    def values(self, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """Every dimension's value for a plain run: parameter defaults and fixed dimensions, then overrides."""
        out: dict[str, Any] = {k: p.default for k, p in self.params.items() if p.default is not None}
        out.update(self.fixed)
        out.update(overrides or {})
        return out

    def quantity(self, label: str, dims: dict[str, Any]) -> float:
        return math.prod(float(dims[f]) if isinstance(f, str) else float(f) for f in self.quantities[label])

    def limit_values(self, dims: dict[str, Any]) -> dict[str, float]:
        return {label: float(dims[v]) if isinstance(v, str) else float(v) for label, v in self.limits.items()}


def parse_params(spec: dict[str, Any]) -> SmokeParams | None:
    """The parameter declaration of one SMOKES entry, or None when it declares none. Raises ValueError with
    one line naming the key."""
    keys = {k: spec[k] for k in ("params", "fixed", "quantities", "limits") if k in spec}
    if "params" not in keys:
        if keys:
            raise ValueError(f"{', '.join(keys)} given without 'params'")
        return None
    try:
        return SmokeParams.model_validate(keys)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        msg = first["msg"].removeprefix("Value error, ")
        raise ValueError(f"{where}: {msg}" if where else msg) from None
