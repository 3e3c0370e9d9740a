"""The smoke catalogue: every ``smoke/*.py`` module declares ``SMOKES = {...}`` as a literal, read here
with ``ast.literal_eval`` so that listing smokes imports nothing (no torch on the machine that lists)."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pinmatrix.errors import PinmatrixError
from pinmatrix.project.smoke_params import SmokeParams, parse_params

SMOKE_DIR_ENV = "PINMATRIX_SMOKE_DIR"
# Modules run in this order within a phase: cheap and general first, heavy and specific later.
MODULE_ORDER = ("host", "torch_kernels", "xformers_tiled", "flashinfer_ops", "vllm_generate")
DEFAULT_TIMEOUT_S = 600


class SmokeError(PinmatrixError):
    """The smoke catalogue is missing or malformed, or a smoke name is unknown."""


@dataclass(frozen=True)
class Smoke:
    name: str
    module: Path  # the file the runner starts
    func: str
    description: str
    needs: dict[str, Any] = field(default_factory=dict)
    timeout_s: int = DEFAULT_TIMEOUT_S
    phase: int = 5  # 0 probes first, 9 after the kernels (arch-coverage reads the JIT caches they fill)
    parameters: SmokeParams | None = None  # numeric parameters `pinmatrix bisect` can search
    batch: str | None = None  # consecutive smokes of one group may share a process (smoke/batch.py)

    @property
    def gpu(self) -> bool:
        return bool(self.needs.get("gpu"))


def find_smoke_dir(explicit: Path | None = None) -> Path:
    """The smoke catalogue: ``explicit``, else $PINMATRIX_SMOKE_DIR, else ./smoke (the project's folder, next to
    matrix.toml, like patches/ and locks/). A catalogue is a folder of smoke modules; the runtime they import
    ships with pinmatrix (``pinmatrix.project.smoke_bundle``)."""
    candidates: list[Path] = []
    if explicit is not None:
        candidates.append(Path(explicit))
    if os.environ.get(SMOKE_DIR_ENV):
        candidates.append(Path(os.environ[SMOKE_DIR_ENV]))
    candidates.append(Path.cwd() / "smoke")
    for c in candidates:
        if c.is_dir() and any(c.glob("*.py")):
            return c.resolve()
    raise SmokeError(
        f"smoke catalogue not found (looked in {', '.join(str(c) for c in candidates)}); "
        f"pass --smoke-dir or set {SMOKE_DIR_ENV}"
    )


def _read_smokes(path: Path) -> dict[str, dict[str, Any]] | None:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as err:
        raise SmokeError(f"{path}: syntax error at line {err.lineno}: {err.msg}") from None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SMOKES" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                raise SmokeError(f"{path}:{node.lineno}: SMOKES must be a plain literal") from None
            if not isinstance(value, dict):
                raise SmokeError(f"{path}:{node.lineno}: SMOKES must be a dict of name -> spec")
            return value
    return None


def _batch_group(path: Path, name: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.replace("-", "").isalnum() or len(value) > 64:
        raise SmokeError(f"{path}: smoke {name!r}: 'batch' must name a group (letters, digits, '-')")
    return value


def load_catalogue(smoke_dir: Path | None = None) -> list[Smoke]:
    """Every smoke, ordered by phase, then module, then declaration order."""
    root = find_smoke_dir(smoke_dir)
    smokes: list[Smoke] = []
    seen: dict[str, Path] = {}
    for path in sorted(root.glob("*.py")):
        if path.name.startswith("_"):
            continue
        declared = _read_smokes(path)
        if declared is None:
            continue
        for name, spec in declared.items():
            if name in seen:
                raise SmokeError(f"{path}: smoke {name!r} is also declared in {seen[name]}")
            if not isinstance(spec, dict) or "func" not in spec:
                raise SmokeError(f"{path}: smoke {name!r} needs a 'func'")
            seen[name] = path
            try:
                parameters = parse_params(spec)
            except ValueError as err:
                raise SmokeError(f"{path}: smoke {name!r}: {err}") from None
            smokes.append(Smoke(
                name=name,
                module=path,
                func=str(spec["func"]),
                description=str(spec.get("description", "")),
                needs=dict(spec.get("needs", {})),
                timeout_s=int(spec.get("timeout_s", DEFAULT_TIMEOUT_S)),
                phase=int(spec.get("phase", 5)),
                parameters=parameters,
                batch=_batch_group(path, name, spec.get("batch")),
            ))
    if not smokes:
        raise SmokeError(f"{root}: no smoke modules (files declaring SMOKES)")
    order = {s.name: i for i, s in enumerate(smokes)}

    def rank(s: Smoke) -> tuple[int, int, int]:
        stem = s.module.stem
        module = MODULE_ORDER.index(stem) if stem in MODULE_ORDER else len(MODULE_ORDER)
        return (s.phase, module, order[s.name])

    return sorted(smokes, key=rank)


def matches(pattern: str, name: str) -> bool:
    """A selector names a smoke exactly, a prefix ending in '*', or a group: 'xformers-tiled-matmul-boundary'
    selects 'xformers-tiled-matmul-boundary-output', '-a' and '-b'."""
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return name == pattern or name.startswith(pattern + "-")


def select(catalogue: Iterable[Smoke], selectors: Iterable[str] | None) -> tuple[list[Smoke], list[str]]:
    """Smokes matched by any selector (all when ``selectors`` is None), and the selectors that matched none."""
    catalogue = list(catalogue)
    if selectors is None:
        return catalogue, []
    selectors = list(selectors)
    chosen = [s for s in catalogue if any(matches(p, s.name) for p in selectors)]
    unmatched = [p for p in selectors if not any(matches(p, s.name) for s in catalogue)]
    return chosen, unmatched
