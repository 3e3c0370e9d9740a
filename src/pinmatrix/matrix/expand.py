"""Expand a Matrix into cells: the product of each stack's axes, with zip, exclude and include applied,
every combination checked against the compatibility rules. A combination that breaks a rule becomes a
PrunedCell carrying the rule's words; nothing is dropped silently."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from typing import Any

from packaging.utils import canonicalize_name
from pydantic import ValidationError

from pinmatrix.archflag import split_flags
from pinmatrix.cell import (
    AXIS_DISTRIBUTION,
    KNOWN_AXES,
    BaseSpec,
    Cell,
    CellPatch,
    IndexSpec,
    KnownIssue,
    cell_identity,
)
from pinmatrix.errors import MatrixError
from pinmatrix.hashing import sha256_file
from pinmatrix.matrix.compat import (
    CompatRules,
    cached_specifier,
    cached_version,
    capability_string,
)
from pinmatrix.matrix.keyword import compile_keyword
from pinmatrix.project.debian_suites import known_suites, python_of, suite_of
from pinmatrix.project.matrix_toml import Axes, AxisValue, EnvVariant, Matrix, Stack
from pinmatrix.project.toolchains import for_cell as cell_toolchains

Value = str | AxisValue | EnvVariant
Assignment = dict[str, Value]
PACKAGE_AXES = ("torch", "triton", "xformers", "flashinfer", "vllm")
MAX_RULES = 1000  # include + exclude entries of one stack: each exclude is matched against every combination
# Set by the CLI's --max-combinations; wins over [matrix].max_combinations (default 100 000).
MAX_COMBINATIONS_OVERRIDE: ContextVar[int | None] = ContextVar("max_combinations", default=None)


@dataclass(frozen=True)
class PrunedCell:
    stack: str
    name: str
    pins: dict[str, str]
    reasons: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Expansion:
    cells: list[Cell]
    pruned: list[PrunedCell]

    def by_id(self) -> dict[str, Cell]:
        return {c.id: c for c in self.cells}


def display(value: Value) -> str:
    if isinstance(value, str):
        return value
    return value.display


def version_of(value: Value) -> str:
    if isinstance(value, AxisValue):
        return value.version
    if isinstance(value, EnvVariant):
        return value.display
    return value


def distribution(axis: str) -> str:
    return AXIS_DISTRIBUTION.get(axis, axis)


class _StackExpander:
    def __init__(self, matrix: Matrix, name: str, stack: Stack, rules: CompatRules) -> None:
        self.matrix = matrix
        self.name = name
        self.stack = stack
        self.rules = rules
        self.problems: list[str] = []
        self.axes: dict[str, list[Value]] = {}
        for axis in KNOWN_AXES:
            values = getattr(stack.axes, axis)
            if values is not None:
                self.axes[axis] = list(values)
        for pkg, values in stack.packages.items():
            self.axes[str(canonicalize_name(pkg))] = list(values)
        self.settings = matrix.settings
        base = stack.base or self.settings.base
        self.base = BaseSpec(
            kind=base.kind,
            image=base.image,
            suite=base.suite if base.kind == "mmdebstrap" else None,
            mirror=base.mirror,
            source_date_epoch=base.source_date_epoch,
            packages=tuple(base.packages),
            variant=base.variant,
        )
        self.python = stack.python or self.settings.python
        self.platform = stack.platform or self.settings.platform
        self._check_base_python(stack)

    def image_ca_identity(self) -> list[tuple[str, str]]:
        """Extra CA certificates are part of a cell only when they go into its image, and then by content."""
        if not self.settings.ca_certificates_in_images:
            return []
        out: list[tuple[str, str]] = []
        for entry in self.settings.ca_certificates:
            path = self.matrix.root / entry  # relative to the matrix; an absolute entry stays as it is
            files = sorted(path.glob("*.crt")) if path.is_dir() else [path] if path.is_file() else []
            out.extend((f.name, sha256_file(f)) for f in files)
        return sorted(out)

    def _check_base_python(self, stack: Stack) -> None:
        """A cell's Python comes from its base: refuse, before anything is built, a Python the base lacks."""
        if self.base.kind != "mmdebstrap":
            return
        suite = suite_of(self.base.suite)
        have = python_of(suite)
        base_path = ("stacks", self.name, "base", "suite") if stack.base else ("matrix", "base", "suite")
        if have is None:
            self.problems.append(self.matrix.where(base_path, f"unknown Debian suite {suite!r} (known: {known_suites()})"))
        elif have != self.python:
            path = ("stacks", self.name, "python") if stack.python else ("matrix", "python")
            self.problems.append(self.matrix.where(
                path, f"stack {self.name} wants Python {self.python} but its Debian {suite} base has {have}: "
                      f"set python = \"{have}\" or a base with {self.python} (another suite or a pinned image)"))

    def where(self, path: tuple[str | int, ...], message: str) -> None:
        self.problems.append(self.matrix.where(("stacks", self.name, *path), message))

    # ------------------------------------------------------------------ structure: zip, include, exclude
    def groups(self) -> list[list[str]]:
        zipped: list[list[str]] = []
        seen: set[str] = set()
        for i, group in enumerate(self.stack.zip):
            for axis in group:
                if axis not in self.axes:
                    self.where(("zip", i), f"{axis!r} is not an axis of this stack (axes: {', '.join(self.axes)})")
                elif axis in seen:
                    self.where(("zip", i), f"axis {axis!r} is in more than one zip group")
                seen.add(axis)
            lengths = {len(self.axes[a]) for a in group if a in self.axes}
            if len(lengths) > 1:
                sizes = ", ".join(f"{a}={len(self.axes[a])}" for a in group if a in self.axes)
                self.where(("zip", i), f"zipped axes must have the same number of values ({sizes})")
            zipped.append([a for a in group if a in self.axes])
        singles = [[a] for a in self.axes if a not in seen]
        return zipped + singles

    def product(self, axes: dict[str, list[Value]], groups: list[list[str]]) -> Iterator[Assignment]:
        columns = []
        for group in groups:
            rows = list(zip(*(axes[a] for a in group)))
            columns.append([dict(zip(group, row)) for row in rows])
        for combo in itertools.product(*columns):
            out: Assignment = {}
            for part in combo:
                out.update(part)
            yield {a: out[a] for a in self.axes}

    def _parse_rule_value(self, axis: str, raw: Any, path: tuple[str | int, ...]) -> Value | None:
        try:
            if axis == "env":
                data = raw if isinstance(raw, dict) and ({"vars", "label"} & set(raw)) else {"vars": raw}
                return EnvVariant.model_validate(data)
            if axis in PACKAGE_AXES or axis not in KNOWN_AXES:
                return AxisValue.model_validate({"version": raw} if isinstance(raw, str) else raw)
            if not isinstance(raw, str):
                raise ValueError("must be a string")
            Axes.model_validate({axis: [raw]})  # the axis's own grammar (version, sm_NN, arch flags)
            return raw
        except ValidationError as exc:
            msg = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
            self.where(path, f"bad value for axis {axis!r}: {msg}")
            return None
        except ValueError as exc:  # "must be a string": one line for the user
            self.where(path, f"bad value for axis {axis!r}: {exc}")
            return None

    @staticmethod
    def matches(value: Value, wanted: str) -> bool:
        """An exclude rule's value (made a string by ``assignments``) names the value's display or version."""
        return wanted in (display(value), version_of(value))

    def count(self, groups: list[list[str]]) -> tuple[int, str]:
        """How many combinations ``assignments`` would make (before excludes), without making any, and the
        arithmetic behind the number ('driver 3 x torch+triton 2 + 1 from include')."""
        sizes = [(("+".join(g)), len(self.axes[g[0]])) for g in groups if g]
        total = math.prod(n for _, n in sizes)
        words = " x ".join(f"{name} {n}" for name, n in sizes)  # a stack without axes is 1, never over a limit
        extra = 0
        for rule in self.stack.include:
            fixed = {a for a in rule if a in self.axes}
            frees = ([a for a in g if a not in fixed] for g in groups)
            extra += math.prod(len(self.axes[free[0]]) for free in frees if free)  # as assignments() zips them
        if extra:
            words += f" + {extra} from include"
        return total + extra, words

    def exclude_values(self, i: int, rule: dict[str, Any]) -> dict[str, str]:
        """Exclude rule ``i`` as axis -> the display or version it names; each problem is recorded."""
        if not rule:
            self.where(("exclude", i), "an empty exclude matches every cell")
        out: dict[str, str] = {}
        for axis, wanted in rule.items():
            if axis not in self.axes:
                self.where(("exclude", i, axis), f"not an axis of this stack (axes: {', '.join(self.axes)})")
            elif isinstance(wanted, str):
                out[axis] = wanted
            elif (parsed := self._parse_rule_value(axis, wanted, ("exclude", i, axis))) is not None:
                out[axis] = display(parsed)
        return out

    def assignments(self, groups: list[list[str]]) -> list[Assignment]:
        """Every combination of ``groups`` (from ``groups()``), less the excluded ones, plus the included."""
        excludes = [self.exclude_values(i, rule) for i, rule in enumerate(self.stack.exclude)]
        if self.problems:
            return []
        result = [r for r in self.product(self.axes, groups)
                  if not any(all(self.matches(r[a], w) for a, w in ex.items()) for ex in excludes)]
        for i, rule in enumerate(self.stack.include):
            fixed: dict[str, list[Value]] = {}
            for axis, raw in rule.items():
                if axis not in self.axes:
                    self.where(("include", i, axis), f"not an axis of this stack (axes: {', '.join(self.axes)})")
                    continue
                parsed = self._parse_rule_value(axis, raw, ("include", i, axis))
                if parsed is not None:
                    fixed[axis] = [parsed]
            if self.problems:
                continue
            axes = {a: fixed.get(a, vals) for a, vals in self.axes.items()}
            free_groups = [[a for a in g if a not in fixed] for g in groups]
            inc_groups = [g for g in free_groups if g] + [[a] for a in fixed]
            result.extend(self.product(axes, inc_groups))
        return result

    # ------------------------------------------------------------------ one combination -> cell or pruned
    def varying(self, assignments: list[Assignment]) -> list[str]:
        return [a for a in self.axes if len({display(x[a]) for x in assignments}) > 1]

    def check(self, a: Assignment) -> tuple[list[str], list[str], list[str]]:
        """(prune reasons, notes, needs) of one combination."""
        r = self.rules
        prune: list[str] = []
        notes: list[str] = []
        needs: list[str] = []
        get = lambda axis: version_of(a[axis]) if axis in a else None  # noqa: E731
        gpu = get("gpu")
        verdicts = []
        if "driver" in a and "cuda" in a:
            verdicts.append(r.driver_cuda(get("driver"), get("cuda"), gpu))
        if "torch" in a:
            verdicts.append(r.torch_pins(get("torch"), get("triton"), get("cuda"), self.platform))
        if "xformers" in a:
            verdicts.append(r.xformers_pins(get("xformers"), get("torch")))
        if "vllm" in a:
            vv = a["vllm"]
            verdicts.append(r.vllm_pins(get("vllm"), get("torch"), get("flashinfer"),
                                        isinstance(vv, AxisValue) and vv.source_build))
        flags = self.arch_flags(a)
        if flags:
            verdicts.append(r.arch_flags(flags, get("cuda"), gpu))
        for v in verdicts:
            prune.extend(v.prune)
            notes.extend(v.notes)
            needs.extend(v.needs)
        return prune, notes, needs

    def arch_flags(self, a: Assignment) -> tuple[str, ...]:
        if "arch" in a:
            return tuple(split_flags(version_of(a["arch"])))
        if "gpu" in a:
            return (capability_string(version_of(a["gpu"])),)
        return ()

    def cell_patches(self, a: Assignment) -> tuple[CellPatch, ...]:
        out: list[CellPatch] = []
        for value in a.values():
            if not isinstance(value, AxisValue):
                continue
            for pid in value.patches:
                spec = self.matrix.patches[pid]
                contained = spec.contained_in is not None and cached_version(value.version) >= cached_version(spec.contained_in)
                out.append(CellPatch(
                    id=pid, package=spec.package, version=value.version, kind=spec.kind,
                    status="already-upstream" if contained else "apply",
                    upstream=spec.upstream, sha256=spec.sha256, source=spec.source,
                    contained_in=spec.contained_in,
                    note=(f"already upstream: {spec.package} {spec.contained_in} contains it; not applied to {value.version}"
                          if contained else spec.note),
                ))
        return tuple(out)

    def known_issues(self, a: Assignment, patches: tuple[CellPatch, ...]) -> tuple[KnownIssue, ...]:
        applied = {p.id for p in patches if p.status == "apply"}
        out = []
        for issue in self.matrix.known_issues:
            if any(p in applied for p in issue.without_patches):
                continue
            if all(axis in a and _value_matches(a[axis], want) for axis, want in issue.when.items()):
                out.append(KnownIssue(id=issue.id, smokes=tuple(issue.smokes), expect=issue.expect,
                                      failure_class=issue.failure_class, note=issue.note, source=issue.source))
        return tuple(out)

    def indexes(self, a: Assignment) -> tuple[IndexSpec, ...]:
        out = [IndexSpec(name=i.name, url=i.url, default=i.default, explicit=i.explicit, packages=tuple(i.packages))
               for i in self.settings.indexes]
        if "torch" in a and "cuda" in a:
            cuda = version_of(a["cuda"])
            if cuda != self.rules.default_cuda(version_of(a["torch"]), self.platform) and self.settings.torch_index:
                url = self.settings.torch_index.format(cuda_nodot=cuda.replace(".", ""))
                out.append(IndexSpec(name=f"pytorch-cu{cuda.replace('.', '')}", url=url, explicit=True,
                                     packages=("torch",)))
        return tuple(out)

    def build(self, a: Assignment, varying: list[str]) -> Cell | PrunedCell:
        label = ",".join(f"{axis}={display(a[axis])}" for axis in varying)
        name = f"{self.name}[{label}]" if label else self.name
        pins = {axis: version_of(v) for axis, v in a.items()}
        prune, notes, needs = self.check(a)
        if prune:
            return PrunedCell(stack=self.name, name=name, pins=pins, reasons=tuple(prune))
        patches = self.cell_patches(a)
        requirements: list[str] = []
        for axis, value in a.items():
            if axis in ("driver", "cuda", "gpu", "arch", "env"):
                continue
            assert isinstance(value, AxisValue)
            if value.source_build:
                notes.append(f"{distribution(axis)} {value.version} is built from source, not installed from the lock")
                continue
            requirements.append(f"{distribution(axis)}=={value.version}")
        requirements.extend(self.stack.extra)
        # A stack whose smokes compile CUDA at run time gets the toolchain's wheels (data/toolchains.toml).
        chains, chain_notes = cell_toolchains(self.stack.smokes, pins.get("cuda"))
        notes.extend(chain_notes)
        requirements.extend(r for chain in chains for r in chain.wheels.requirements if r not in requirements)
        flags = self.arch_flags(a)
        variant = a.get("env")
        env = dict(sorted(variant.vars.items())) if isinstance(variant, EnvVariant) else {}
        indexes = self.indexes(a)
        cuda = pins.get("cuda")
        gpu = pins.get("gpu")
        identity = {
            "python": self.python, "platform": self.platform, "pins": pins,
            "requirements": sorted(requirements), "arch": flags, "env": env,
            "patches": [(p.id, p.sha256, p.status) for p in patches],
            "base": asdict(self.base), "indexes": [asdict(i) for i in indexes],
            "exclude_newer": self.settings.exclude_newer, "ca": self.image_ca_identity(),
        }
        return Cell(
            id=cell_identity(identity), stack=self.name, name=name, python=self.python, platform=self.platform,
            pins=pins, requirements=tuple(requirements), arch_flags=flags,
            torch_cuda_arch_list=";".join(flags) or None,
            flashinfer_cuda_arch_list=" ".join(f.removesuffix("+PTX") for f in flags) or None,
            env=env, patches=patches, smokes=tuple(self.stack.smokes),
            known_issues=self.known_issues(a, patches), base=self.base, indexes=indexes,
            min_driver=self.rules.min_driver(cuda) if cuda else None,
            compute_capability=capability_string(gpu) if gpu else None,
            notes=tuple(dict.fromkeys(notes)), gpu_required=self.stack.gpu_required,
            needs=tuple(dict.fromkeys(needs)),
        )


def _value_matches(value: Value, want: str) -> bool:
    if want and want[0] in "<>=!~":
        try:
            return cached_version(version_of(value)) in cached_specifier(want)
        except Exception:
            return False
    return want in (display(value), version_of(value))


def combination_limit(matrix: Matrix, override: int | None = None) -> int:
    """The most combinations expansion makes: ``override`` (or --max-combinations), else [matrix].max_combinations."""
    return override or MAX_COMBINATIONS_OVERRIDE.get() or matrix.settings.max_combinations


def _bounded(matrix: Matrix, rules: CompatRules, limit: int) -> tuple[dict[str, tuple[_StackExpander, list[list[str]]]], list[str]]:
    """Each stack's expander and axis groups, after counting every stack's combinations arithmetically: a
    matrix above ``limit`` is refused with its count before a single combination is made."""
    out: dict[str, tuple[_StackExpander, list[list[str]]]] = {}
    problems: list[str] = []
    counts: dict[str, int] = {}
    for sname, stack in matrix.stacks.items():
        rules_n = len(stack.include) + len(stack.exclude)
        if rules_n > MAX_RULES:
            problems.append(matrix.where(("stacks", sname), f"{rules_n} include/exclude entries are more than "
                                         f"the {MAX_RULES} a stack may have"))
            continue
        ex = _StackExpander(matrix, sname, stack, rules)
        groups = ex.groups()
        if ex.problems:
            problems.extend(ex.problems)
            continue
        counts[sname], words = ex.count(groups)
        if counts[sname] > limit:
            problems.append(matrix.where(("stacks", sname), f"{counts[sname]} combinations ({words}) are more "
                                         f"than the limit of {limit}; raise it with [matrix] max_combinations or "
                                         "--max-combinations"))
        out[sname] = (ex, groups)
    total = sum(counts.values())
    if not problems and total > limit:
        each = ", ".join(f"{s} {n}" for s, n in counts.items())
        problems.append(matrix.where(("stacks",), f"{total} combinations in all ({each}) are more than the limit "
                                     f"of {limit}; raise it with [matrix] max_combinations or --max-combinations"))
    return out, problems


def expand_cells(matrix: Matrix, rules: CompatRules | None = None, *,
                 max_combinations: int | None = None) -> Expansion:
    """Every stack's cells and pruned combinations of a matrix that ``matrix.validation.validate`` passed.
    Raises MatrixError on what only expansion finds (a stack with no cells, two stacks declaring one cell), and
    on a matrix whose combinations (counted first, never made) pass ``combination_limit``."""
    rules = rules or CompatRules.default()
    expanders, problems = _bounded(matrix, rules, combination_limit(matrix, max_combinations))
    if problems:
        raise MatrixError(problems)
    cells: list[Cell] = []
    pruned: list[PrunedCell] = []
    for sname, (ex, groups) in expanders.items():
        assignments = ex.assignments(groups)
        if ex.problems:
            problems.extend(ex.problems)
            continue
        if not assignments:
            problems.append(matrix.where(("stacks", sname), "the stack has no cells (every combination is excluded)"))
            continue
        varying = ex.varying(assignments)
        seen: set[str] = set()
        cells_before = len(cells)
        for a in assignments:
            out = ex.build(a, varying)
            if isinstance(out, PrunedCell):
                if out.name not in seen:
                    seen.add(out.name)
                    pruned.append(out)
            elif out.id not in seen:
                seen.add(out.id)
                cells.append(out)
        if len(cells) == cells_before:
            first = next(p for p in pruned if p.stack == sname)
            problems.append(matrix.where(("stacks", sname), f"every cell is pruned, e.g. {first.name}: {first.reasons[0]}"))
    owners: dict[str, Cell] = {}
    for cell in cells:
        other = owners.setdefault(cell.id, cell)
        if other is not cell:
            problems.append(matrix.where(("stacks", cell.stack),
                                         f"cell {cell.name} has the same id {cell.id} as {other.name}: the two stacks declare the same cell"))
    if problems:
        raise MatrixError(problems)
    return Expansion(cells=cells, pruned=pruned)


def select_cells(cells: Iterable[Cell], stack: str | None = None, keyword: str | None = None,
                 cell_id: str | None = None) -> list[Cell]:
    match = compile_keyword(keyword) if keyword else None
    out = []
    for c in cells:
        if stack is not None and c.stack != stack:
            continue
        if cell_id is not None and not c.id.startswith(cell_id):
            continue
        if match is not None and not match(f"{c.name} {c.id}"):
            continue
        out.append(c)
    return out
