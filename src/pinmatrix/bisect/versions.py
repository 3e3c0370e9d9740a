"""The version search: along one ordered axis of a stack (a package's releases, env variants, arch flag lists),
the first cell where a smoke's verdict changes. Each point is the stack with that axis at one value and every
other axis held at one value, expanded by the matrix's own rules (so a point has the cell id the matrix would
give it, and its recorded results are found); only the points the search visits are locked, made and smoked."""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import ValidationError

from pinmatrix.bisect import boundary as bnd
from pinmatrix.bisect.probe import Probe, Prober
from pinmatrix.bisect.report import BisectReport, failing_classes, skip_reasons
from pinmatrix.bisect.search import ProbeOutcome, bisect
from pinmatrix.cell import KNOWN_AXES
from pinmatrix.errors import MatrixError, PinmatrixError
from pinmatrix.index.uv import find_uv
from pinmatrix.matrix.expand import PACKAGE_AXES, PrunedCell, distribution
from pinmatrix.matrix.selection import expand_matrix
from pinmatrix.project.catalogue import Smoke, matches
from pinmatrix.project.matrix_toml import Axes, AxisValue, EnvVariant, Matrix, Stack

AxisItem = str | AxisValue | EnvVariant
_VERB = {"pass": "passes", "fail": "fails"}


@dataclass(frozen=True)
class Point:
    value: AxisItem

    @property
    def display(self) -> str:
        return self.value if isinstance(self.value, str) else self.value.display


def stack_axis(stack: Stack, axis: str) -> list[AxisItem] | None:
    """The stack's own values of ``axis`` (a known axis or a package of ``[stacks.S.packages]``)."""
    if axis in KNOWN_AXES:
        values = getattr(stack.axes, axis)
        return list(values) if values is not None else None
    for name, values in stack.packages.items():
        if canonicalize_name(name) == canonicalize_name(axis):
            return list(values)
    return None


def _package_name(stack: Stack, axis: str) -> str | None:
    """The key of ``axis`` in the stack's packages table, or None for a known axis."""
    for name in stack.packages:
        if canonicalize_name(name) == canonicalize_name(axis):
            return name
    return None


def is_package_axis(stack: Stack, axis: str) -> bool:
    return axis in PACKAGE_AXES or _package_name(stack, axis) is not None


def parse_values(stack: Stack, axis: str, raw: list[str]) -> list[AxisItem]:
    """``--values``: versions for a package axis, variant labels for env, plain strings (validated as the
    matrix validates them) for driver/cuda/gpu/arch."""
    out: list[AxisItem] = []
    own = stack_axis(stack, axis) or []
    for text in raw:
        if is_package_axis(stack, axis):
            hit = [v for v in own if isinstance(v, AxisValue) and text in (v.display, v.version)]
            if hit:
                out.append(hit[0])
                continue
            try:
                Version(text)
            except InvalidVersion:
                raise PinmatrixError(f"--values: {text!r} is not a version of {axis}") from None
            out.append(AxisValue(version=text))
        elif axis == "env":
            variants = [v for v in own if isinstance(v, EnvVariant) and v.display == text]
            if not variants:
                shown = ", ".join(v.display for v in own if isinstance(v, EnvVariant)) or "none"
                raise PinmatrixError(f"--values: env variant {text!r} is not in the stack (variants: {shown})")
            out.append(variants[0])
        else:
            try:
                Axes.model_validate({axis: [text]})
            except ValidationError as err:
                msg = err.errors()[0]["msg"].removeprefix("Value error, ")
                raise PinmatrixError(f"--values: {axis} {text!r}: {msg}") from None
            out.append(text)
    if len(out) < 2:
        raise PinmatrixError("--values: a search needs at least two values")
    return out


def resolve_range(spec: str, dist: str, *, python: str, platform: str, exclude_newer: str | None,
                  index_args: list[str], limit: int = 200) -> list[str]:
    """Every release of ``dist`` in the specifier range ``spec`` that uv resolves for this Python and platform
    on the matrix's indexes (as they stood at ``exclude_newer``), oldest first. Asks uv for the newest release
    that is not yet listed until none is left (``uv pip compile --no-deps``), so releases without a usable
    distribution for the cell's Python or platform, and yanked ones, never appear."""
    try:
        base = SpecifierSet(spec)
    except InvalidSpecifier:
        raise PinmatrixError(f"--range {spec!r} is not a version specifier (e.g. '>=1.10,<=1.17')") from None
    uv = find_uv()
    found: list[str] = []
    with tempfile.TemporaryDirectory(prefix="pinmatrix-bisect-") as tmp:
        req = Path(tmp) / "requirements.in"
        for _ in range(limit):
            extra = "".join(f",!={v}" for v in found)
            req.write_text(f"{dist}{base}{extra}\n" if str(base) else f"{dist}{extra.lstrip(',')}\n", encoding="utf-8")
            cmd = [uv, "pip", "compile", str(req), "--no-deps", "--no-header", "--no-annotate", "-o", "-",
                   "--python-version", python, "--python-platform", platform, *index_args]
            if exclude_newer:
                cmd += ["--exclude-newer", exclude_newer]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tmp,
                                  env={**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"})
            if proc.returncode != 0:
                if "No solution found" in proc.stderr or "no version" in proc.stderr.lower():
                    break
                last = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["uv failed"]
                raise PinmatrixError(f"--range {spec!r}: uv could not list {dist} releases: {last[0].strip()}")
            pins = [ln.split("==", 1)[1].strip() for ln in proc.stdout.splitlines()
                    if canonicalize_name(ln.split("==", 1)[0].strip()) == canonicalize_name(dist) and "==" in ln]
            if not pins or pins[0] in found:
                break
            found.append(pins[0])
    if len(found) < 2:
        raise PinmatrixError(f"--range {spec!r}: {len(found)} release(s) of {dist} resolve "
                             f"({', '.join(found) or 'none'}); a search needs at least two")
    return sorted(found, key=Version)


def index_args(matrix: Matrix) -> list[str]:
    args: list[str] = []
    for index in matrix.settings.indexes:
        args += ["--default-index", index.url] if index.default else ["--index", index.url]
    return args


def point_matrix(matrix: Matrix, stack_name: str, axis: str, value: AxisItem, index: int | None,
                 fixed: dict[str, str]) -> Matrix:
    """The matrix reduced to this stack with every axis at one value: ``axis`` at ``value``, an axis named in
    ``fixed`` at that value, an axis zipped with ``axis`` at the same position (when ``value`` is the
    stack's own ``index``-th value), any other axis at its first value."""
    stack = matrix.stacks[stack_name]
    zipped = {a for group in stack.zip if axis in group for a in group} - {axis}
    axes_update: dict[str, Any] = {}
    packages: dict[str, Any] = dict(stack.packages)
    names = [a for a in KNOWN_AXES if getattr(stack.axes, a) is not None] + list(stack.packages)
    for name in names:
        own = stack_axis(stack, name) or []
        if canonicalize_name(name) == canonicalize_name(axis):
            chosen: AxisItem = value
        elif name in fixed:
            chosen = _fixed_value(stack, name, fixed[name], own)
        elif name in zipped and index is not None and index < len(own):
            chosen = own[index]
        else:
            chosen = own[0]
        if name in KNOWN_AXES:
            axes_update[name] = [chosen]
        else:
            packages[name] = [chosen]
    new_stack = stack.model_copy(update={"axes": stack.axes.model_copy(update=axes_update), "packages": packages,
                                         "zip": [], "include": [], "exclude": []})
    axes_here = set(KNOWN_AXES) | {str(canonicalize_name(p)) for p in packages}
    issues = [i for i in matrix.known_issues if all(str(canonicalize_name(a)) in axes_here or a in KNOWN_AXES
                                                    for a in i.when)]
    doc = matrix.doc.model_copy(update={"stacks": {stack_name: new_stack}, "known_issues": issues})
    return Matrix(doc, matrix.path, matrix.text)


def _fixed_value(stack: Stack, name: str, text: str, own: list[AxisItem]) -> AxisItem:
    for v in own:
        shown = v if isinstance(v, str) else v.display
        if text == shown or (isinstance(v, AxisValue) and text == v.version):
            return v
    if is_package_axis(stack, name):
        return AxisValue(version=text)
    if name == "env":
        raise PinmatrixError(f"--fix env={text}: not an env variant of the stack")
    return text


def point_cell(matrix: Matrix, stack_name: str, axis: str, point: Point, index: int | None,
               fixed: dict[str, str]) -> Any:
    """The cell at one point, or a PrunedCell (the matrix's rules refuse the combination) / a one-line reason
    (the point cannot be expanded at all) as a str."""
    reduced = point_matrix(matrix, stack_name, axis, point.value, index, fixed)
    try:
        exp = expand_matrix(reduced)
    except MatrixError as err:
        return err.problems[0] if err.problems else str(err)
    if exp.cells:
        cell = exp.cells[0]
        return replace(cell, name=f"{stack_name}[{axis}={point.display}" + "".join(
            f",{k}={v}" for k, v in sorted(fixed.items())) + "]")
    return exp.pruned[0] if exp.pruned else "the point expands to no cell"


def run_version_bisect(*, matrix: Matrix, stack_name: str, axis: str, points: list[Point], own_order: bool,
                       fixed: dict[str, str], smoke: Smoke, prober: Prober, prepare: Any, runtime: str,
                       host: dict[str, Any], max_skips: int) -> BisectReport:
    cells: dict[int, Any] = {}

    def probe(i: int) -> ProbeOutcome:
        pt = points[i]
        made = cells.setdefault(i, point_cell(matrix, stack_name, axis, pt, i if own_order else None, fixed))
        label = f"{axis}={pt.display}"
        if isinstance(made, PrunedCell):
            return prober.skip(i, pt.display, label, "-", f"cannot probe: pruned by the matrix rules: {made.reasons[0]}")
        if isinstance(made, str):
            return prober.skip(i, pt.display, label, "-", f"cannot probe: {made}")
        return prober.probe(i, pt.display, label, made, {}, lambda: prepare(made)).verdict

    res = bisect(len(points), probe, high_first=False, max_skips=max_skips)
    probed = [c for c in cells.values() if not isinstance(c, (str, PrunedCell))]
    rep = BisectReport(
        kind="version", smoke=smoke.name, searched=axis, host=host, runtime=runtime, run_id=prober.run_id,
        points=len(points), space={"stack": stack_name, "axis": axis, "values": [p.display for p in points]},
        cells=[{"id": c.id, "name": c.name, "stack": c.stack} for c in probed],
        held_fixed={k: v for k, v in probed[0].pins.items() if k != axis} if probed else dict(fixed),
        outcome=res.outcome, answer="", note=res.note, probes=list(prober.probes),
    )
    rep.failing_classes = failing_classes(rep.probes)
    by_index: dict[int, Probe] = {p.index: p for p in rep.probes}
    show = lambda i: points[i].display  # noqa: E731
    if res.outcome == "no-change":
        assert res.first is not None and res.last is not None
        rep.answer = (f"no change: {smoke.name} is {res.reference} from {axis}={show(res.first)} to "
                      f"{axis}={show(res.last)}")
        if res.reference == "fail":
            rep.failure_class = by_index[res.last].failure_class
    elif res.outcome in ("change", "ambiguous"):
        assert res.before is not None and res.after is not None and res.reference is not None
        other = "fail" if res.reference == "pass" else "pass"
        rep.before, rep.after = show(res.before), show(res.after)
        rep.changed_from, rep.changed_to = res.reference, other
        rep.untested = [show(i) for i in res.untested]
        fail_side = res.after if other == "fail" else res.before
        rep.failure_class = by_index[fail_side].failure_class
        if res.outcome == "change":
            rep.answer = (f"first {'failing' if other == 'fail' else 'passing'} {axis} = {rep.after}: "
                          f"{smoke.name} {_VERB[res.reference]} up to {axis}={rep.before} and {_VERB[other]} from {rep.after}")
        else:
            rep.answer = (f"the verdict changes from {res.reference} to {other} at one of {axis}="
                          f"{', '.join(rep.untested + [rep.after])} (the points between could not be probed)")
        if rep.failure_class:
            rep.answer += f" (failing side: {rep.failure_class})"
    elif res.outcome == "cannot-probe":
        reasons = skip_reasons(rep.probes)
        rep.answer = f"cannot probe {smoke.name} along {axis}: " + "; ".join(reasons)
    else:
        rep.answer = f"stopped before the search ended: {res.note}"
    boundaries = [b for b in _version_boundaries(matrix, smoke.name, axis)]
    if boundaries and res.outcome in ("change", "ambiguous", "no-change") and res.first is not None:
        if res.reference == "fail":
            first, exact = show(res.first), True
        elif res.outcome == "no-change":
            first, exact = None, True
        else:
            first, exact = rep.after, res.outcome == "change"
        where = f"from {axis}={show(res.first)} to {axis}={show(res.last or res.first)}"
        rep.boundary = bnd.check(boundaries, first, rep.failure_class, exact=exact, where=where)
    return rep


def _version_boundaries(matrix: Matrix, smoke: str, axis: str) -> list[bnd.BoundarySpec]:

    out = []
    for issue in matrix.known_issues:
        b = issue.boundary
        if b is None or canonicalize_name(b.param) != canonicalize_name(axis):
            continue
        if not any(matches(sel, smoke) for sel in issue.smokes):
            continue
        if b.smoke is not None and not matches(b.smoke, smoke):
            continue
        out.append(bnd.BoundarySpec(issue.id, b.param, b.expect_first_fail, b.smoke, issue.failure_class))
    return out


def distribution_of(stack: Stack, axis: str) -> str:
    name = _package_name(stack, axis)
    return str(canonicalize_name(name)) if name is not None else distribution(axis)
