"""``--set AXIS=VALUE``: a one-off cell without editing matrix.toml (as ``docker buildx bake --set``). The stack's
axis is narrowed to VALUE before expansion: one of its values as the matrix spells it (``xformers=0.0.35-int64``
keeps that value's patches; a zipped axis keeps its partners' values at the same place), or a new version of a
package axis (``six=1.15.0``). Compatibility rules, includes and excludes apply as to any cell, so an impossible
one-off is refused with the rule's reason."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from packaging.utils import canonicalize_name
from pydantic import ValidationError

from pinmatrix.datamodel import friendly_message
from pinmatrix.errors import MatrixError, PinmatrixError
from pinmatrix.matrix.expand import Expansion
from pinmatrix.matrix.selection import expand_matrix
from pinmatrix.project.matrix_toml import Axes, AxisValue, EnvVariant, Matrix, Stack

_SET = re.compile(r"^(?P<axis>[A-Za-z0-9][A-Za-z0-9_.-]*)=(?P<value>[^\s=]+)$")
MAX_SET = 200


class OverrideError(PinmatrixError):
    """A --set that cannot be read or applied: one line, exit status 2."""


def parse_set(text: str) -> tuple[str, str]:
    m = _SET.match(text) if len(text) <= MAX_SET else None
    if m is None:
        raise OverrideError(f"--set {text[:MAX_SET]!r}: expected AXIS=VALUE, e.g. six=1.15.0 or xformers=0.0.35-int64")
    return m["axis"], m["value"]


def _shown(item: Any) -> str:
    if isinstance(item, AxisValue):
        return item.display
    if isinstance(item, EnvVariant):
        return item.display
    return str(item)


def _axis_values(stack: Stack, axis: str) -> tuple[str, list[Any]] | None:
    """(where the axis lives: "axes" or the package key under "packages", its values) or None."""
    if axis in Axes.model_fields:
        values = getattr(stack.axes, axis)
        return ("axes", list(values)) if values is not None else None
    for name, values in stack.packages.items():
        if canonicalize_name(name) == canonicalize_name(axis):
            return name, list(values)
    return None


def _narrow(stack_name: str, stack: Stack, axis: str, value: str) -> dict[str, Any]:
    """The stack's data with ``axis`` narrowed to ``value`` (and its zip partners to the same position)."""
    found = _axis_values(stack, axis)
    if found is None:
        known = [a for a in Axes.model_fields if getattr(stack.axes, a) is not None] + list(stack.packages)
        raise OverrideError(f"--set {axis}={value}: stack {stack_name} has no axis {axis!r} (axes: {', '.join(known)})")
    where, values = found
    shown = [_shown(v) for v in values]
    data = stack.model_dump(mode="python", exclude_none=True)
    key = axis if where == "axes" else where
    partners = next((group for group in stack.zip if key in group), None)
    if value in shown:
        places = [i for i, v in enumerate(shown) if v == value]  # a zipped axis may repeat a value
        for member in partners or [key]:
            table = "axes" if member in data.get("axes", {}) else "packages"
            data[table][member] = [data[table][member][i] for i in places]
        if len(places) == 1:
            data["zip"] = [group for group in stack.zip if group is not partners]
        return data
    if partners:
        raise OverrideError(f"--set {axis}={value}: {axis} is zipped with {', '.join(m for m in partners if m != key)}: "
                            f"set it to one of its values ({', '.join(shown)})")
    if where == "axes" and axis == "env":
        raise OverrideError(f"--set env={value}: no env variant {value!r} in stack {stack_name} "
                            f"(variants: {', '.join(shown)})")
    if where == "axes":
        data["axes"][axis] = [value]
    else:
        data["packages"][where] = [value]
    return data


def with_overrides(matrix: Matrix, stack_name: str | None, sets: Sequence[str]) -> tuple[Matrix, Expansion]:
    """The matrix with ``stack_name``'s axes narrowed by each AXIS=VALUE, and its expansion."""
    if not sets:
        return matrix, expand_matrix(matrix)
    if stack_name is None:
        raise OverrideError("--set needs --stack: the one-off cell is a cell of one stack")
    stack = matrix.stacks.get(stack_name)
    if stack is None:
        raise OverrideError(f"{matrix.path.name}: unknown stack {stack_name!r} (stacks: {', '.join(matrix.stacks)})")
    for text in sets:
        axis, value = parse_set(text)
        data = _narrow(stack_name, stack, axis, value)
        try:
            stack = Stack.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise OverrideError(f"--set {text}: {friendly_message(err, Stack)}") from None
    doc = matrix.doc.model_copy(update={"stacks": {**matrix.stacks, stack_name: stack}})
    changed = Matrix(doc, matrix.path, matrix.text)
    try:
        expansion = expand_matrix(changed)
    except MatrixError as err:  # the matrix itself was valid: the problem is the value set
        first = err.lines()[0]
        raise OverrideError(f"--set {' '.join(sets)}: {first.split(': ', 2)[-1]}") from None
    if not any(c.stack == stack_name for c in expansion.cells):
        pruned = [p for p in expansion.pruned if p.stack == stack_name]
        why = "; ".join(pruned[0].reasons) if pruned else "no combination is left"
        raise OverrideError(f"--set {' '.join(sets)}: stack {stack_name} has no cell: {why}")
    return changed, expansion
