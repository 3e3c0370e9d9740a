"""Every third-party module pinmatrix's own code imports is a distribution pyproject.toml declares (`packageurl` was
imported by release/ and only came in through cyclonedx): a run-time dependency, or the extra that a lazy import
names in its error. The modules of src/pinmatrix/shipped/ run in a cell's own Python, not pinmatrix's: not counted."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "src" / "pinmatrix"
OPTIONAL = {"kubernetes_validate": "k8s"}  # imported inside a function that names `pip install 'pinmatrix[k8s]'`
# Files pinmatrix runs as a child in another interpreter (the host's Python), with the modules that interpreter
# may or may not have: doctor --leak-check tries torch, then cupy, and says "not run" when neither imports.
OTHER_PYTHON = {"src/pinmatrix/doctor/leak_probe.py": {"torch", "cupy"}}


def third_party_imports() -> dict[str, set[str]]:
    """Top-level module -> the files importing it (function-level imports too), outside shipped/."""
    found: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        if "shipped" in path.relative_to(SRC).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            for name in names:
                top = name.split(".")[0]
                where = str(path.relative_to(ROOT))
                if top not in sys.stdlib_module_names and top != "pinmatrix" \
                        and top not in OTHER_PYTHON.get(where, set()):
                    found.setdefault(top, set()).add(where)
    return found


def test_every_imported_module_is_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    runtime = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    extras = {name: {canonicalize_name(Requirement(r).name) for r in reqs}
              for name, reqs in project["optional-dependencies"].items()}
    providers = packages_distributions()
    undeclared = []
    for module, files in sorted(third_party_imports().items()):
        dists = {canonicalize_name(d) for d in providers.get(module, [])}
        declared = extras[OPTIONAL[module]] if module in OPTIONAL else runtime
        if not dists & declared:
            undeclared.append(f"{module} ({', '.join(sorted(dists)) or 'not installed'}), imported by "
                              f"{', '.join(sorted(files))}")
    assert not undeclared, "imported but not declared in pyproject.toml: " + "; ".join(undeclared)


def test_the_lock_pins_every_declared_runtime_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    locked = {canonicalize_name(line.split("==", 1)[0]) for line in
              (ROOT / "requirements" / "dev.lock").read_text(encoding="utf-8").splitlines()
              if "==" in line and not line.startswith((" ", "#"))}
    missing = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]} - locked
    assert not missing, f"declared but not in requirements/dev.lock (./dev lock-deps): {sorted(missing)}"
