""""Is this matrix valid?", answered before anything is expanded: patch references and their sha256, known
versions, known-issue axes and boundaries, smoke names, requirement URLs, and each stack's promotion policy.
Every problem is one located line of one MatrixError. ``selection.load`` is: parse, validate, expand."""

from __future__ import annotations

import difflib
from typing import Any
from urllib.parse import urlsplit

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from pinmatrix.archflag import split_flags
from pinmatrix.cell import KNOWN_AXES
from pinmatrix.errors import MatrixError, PinmatrixError
from pinmatrix.hashing import sha256_file
from pinmatrix.matrix.compat import ArchFlag, CompatRules, UnknownVersion, cached_specifier, cached_version
from pinmatrix.matrix.expand import distribution
from pinmatrix.names import shown
from pinmatrix.project.catalogue import SmokeError, load_catalogue, matches
from pinmatrix.project.matrix_toml import AxisValue, Matrix
from pinmatrix.project.policy import policy_for


def validate(matrix: Matrix, rules: CompatRules | None = None) -> None:
    """MatrixError with every problem found without expanding; nothing when the matrix holds."""
    problems = check_static(matrix, rules or CompatRules.default())
    for stack in matrix.stacks:
        try:
            policy_for(matrix, stack)
        except PinmatrixError as err:
            problems.append(str(err))
    if problems:
        raise MatrixError(list(dict.fromkeys(problems)))


def check_static(matrix: Matrix, rules: CompatRules) -> list[str]:
    """Problems that need no expansion: patch references, unknown versions, known-issue axes."""
    problems: list[str] = []
    for sname, stack in matrix.stacks.items():
        axes = {a: getattr(stack.axes, a) for a in KNOWN_AXES if getattr(stack.axes, a) is not None}
        axes.update(stack.packages)
        for axis, values in axes.items():
            for i, value in enumerate(values):
                path = ("stacks", sname, "axes" if axis in KNOWN_AXES else "packages", axis, i)
                if (unknown := _unknown_version(rules, axis, value.version if isinstance(value, AxisValue) else value)):
                    problems.append(matrix.where(path, unknown))
                if not isinstance(value, AxisValue):
                    continue
                for pid in value.patches:
                    spec = matrix.patches.get(pid)
                    if spec is None:
                        known = ", ".join(matrix.patches) or "none declared"
                        problems.append(matrix.where(path, f"unknown patch id {pid!r} (patches: {known})"))
                        continue
                    if canonicalize_name(spec.package) != canonicalize_name(distribution(axis)):
                        problems.append(matrix.where(path, f"patch {pid!r} is for {spec.package}, not {distribution(axis)}"))
                    elif cached_version(value.version) not in cached_specifier(spec.applies_to):
                        problems.append(matrix.where(path, f"patch {pid!r} applies to {spec.package}{spec.applies_to}, not {value.version}"))
                    elif spec.source is None and not (spec.contained_in and cached_version(value.version) >= cached_version(spec.contained_in)):
                        problems.append(matrix.where(path, f"patch {pid!r} has no source and {value.version} predates {spec.contained_in}"))
        for i, rule in enumerate(stack.include):  # an include entry's value is checked as an axis value is
            for axis, raw in rule.items():
                version = raw.get("version") if isinstance(raw, dict) else raw
                if isinstance(version, str) and (unknown := _unknown_version(rules, axis, version)):
                    problems.append(matrix.where(("stacks", sname, "include", i, axis), unknown))
    for pid, spec in matrix.patches.items():
        if spec.source is None or "://" in spec.source:
            continue  # remote sources are fetched and checked by the build's patch cache
        file = matrix.root / spec.source
        if not file.is_file():
            problems.append(matrix.where(("patches", pid, "source"), f"patch file {spec.source} does not exist"))
        elif spec.sha256 is not None and (actual := sha256_file(file)) != spec.sha256:
            problems.append(matrix.where(("patches", pid, "sha256"),
                                         f"sha256 mismatch for {spec.source}: the file has {actual}"))
    problems.extend(_check_smoke_names(matrix))
    problems.extend(_check_requirement_urls(matrix))
    for i, issue in enumerate(matrix.known_issues):
        for axis in issue.when:
            if axis not in KNOWN_AXES and not any(axis in s.packages for s in matrix.stacks.values()):
                problems.append(matrix.where(("known_issues", i, "when", axis), f"{axis!r} is not an axis of any stack"))
        for pid in issue.without_patches:
            if pid not in matrix.patches:
                problems.append(matrix.where(("known_issues", i, "without_patches"), f"unknown patch id {pid!r}"))
    return problems


def _unknown_version(rules: CompatRules, axis: str, version: str) -> str | None:
    """Why the compatibility rules cannot check ``version`` of ``axis`` (neither the hand table nor a cached
    wheel's metadata knows it), or None."""
    try:
        if axis == "cuda":
            rules.min_driver(version)
        elif axis == "torch":
            rules.torch_series(version)
        elif axis == "xformers":
            rules.xformers_torch(version)
        elif axis == "vllm":
            rules.vllm_rule(version)
        elif axis == "arch":
            for flag in split_flags(version):
                rules.arch_min_cuda(ArchFlag.parse(flag))
    except UnknownVersion as exc:
        return str(exc)
    except ValueError:
        return None  # a malformed value: expansion names it (``_parse_rule_value``)
    return None


def _under(url: str, index: str) -> bool:
    """Whether ``url`` lies under the index URL ``index``: same scheme and host, path below the index's."""
    u, i = urlsplit(url), urlsplit(index)
    base = i.path.rstrip("/") + "/"
    return (u.scheme, u.netloc) == (i.scheme, i.netloc) and (u.path + "/").startswith(base) and "/../" not in u.path + "/"


def _check_requirement_urls(matrix: Matrix) -> list[str]:
    """A requirement in ``extra`` may name a URL (``name @ URL``) only under a declared [[matrix.indexes]] url."""
    declared = [i.url for i in matrix.settings.indexes]
    problems = []
    for sname, stack in matrix.stacks.items():
        for i, text in enumerate(stack.extra):
            url = Requirement(text.strip()).url
            if url is not None and not any(_under(url, index) for index in declared):
                problems.append(matrix.where(("stacks", sname, "extra", i),
                                             f"{shown(text)} names the URL {shown(url)}, which is under no "
                                             "declared index ([[matrix.indexes]] url)"))
    return problems


def _check_smoke_names(matrix: Matrix) -> list[str]:
    """Every smoke a stack selects, and every smoke a known issue names, must exist in the catalogue."""
    try:  # the smoke/ folder beside the matrix, else $PINMATRIX_SMOKE_DIR or ./smoke (find_smoke_dir)
        catalogue = load_catalogue(matrix.root / "smoke")
    except SmokeError:
        return []  # no catalogue next to the matrix or the package: nothing to check against
    names = [s.name for s in catalogue]
    problems = _check_boundaries(matrix, catalogue)
    selectors: list[tuple[tuple[str | int, ...], list[str]]] = [
        (("stacks", sname, "smokes"), stack.smokes) for sname, stack in matrix.stacks.items()]
    selectors += [(("known_issues", i, "smokes"), issue.smokes) for i, issue in enumerate(matrix.known_issues)]
    promotions: list[tuple[tuple[str, ...], dict[str, Any] | None]] = [(("matrix", "promotion"), matrix.settings.promotion)]
    promotions += [(("stacks", sname, "promotion"), stack.promotion) for sname, stack in matrix.stacks.items()]
    for path, table in promotions:
        wanted = (table or {}).get("required_smokes")
        if isinstance(wanted, list):
            selectors.append(((*path, "required_smokes"), [w for w in wanted if isinstance(w, str)]))
    for where, wanted in selectors:
        for sel in wanted:
            if not any(matches(sel, n) for n in names):
                close = difflib.get_close_matches(sel, names, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                problems.append(matrix.where(where, f"unknown smoke {sel!r}{hint}"))
    return problems


def _check_boundaries(matrix: Matrix, catalogue: list[Any]) -> list[str]:
    """A known issue's boundary names one of the issue's smokes and a parameter it declares (the expected first
    failure a number), or an axis of a stack."""
    problems = []
    axes = set(KNOWN_AXES) | {str(canonicalize_name(p)) for st in matrix.stacks.values() for p in st.packages}
    for i, issue in enumerate(matrix.known_issues):
        b = issue.boundary
        if b is None:
            continue
        path = ("known_issues", i, "boundary")
        own = [s for s in catalogue if any(matches(sel, s.name) for sel in issue.smokes)
               and (b.smoke is None or matches(b.smoke, s.name))]
        if b.smoke is not None and not own:
            problems.append(matrix.where((*path, "smoke"), f"{b.smoke!r} is not a smoke of this issue"))
            continue
        declared = {p for s in own if s.parameters for p in s.parameters.params}
        if b.param in declared:
            if isinstance(b.expect_first_fail, str):
                problems.append(matrix.where((*path, "expect_first_fail"), f"parameter {b.param!r} is numeric"))
        elif str(canonicalize_name(b.param)) not in axes:
            problems.append(matrix.where((*path, "param"), f"{b.param!r} is neither a parameter of the issue's "
                                         f"smokes ({', '.join(sorted(declared)) or 'none declared'}) nor an axis"))
    return problems
