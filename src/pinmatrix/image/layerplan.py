"""Split a cell's lock into image layers, most shared first, so cells that share a prefix share layers.

``images/layers.toml`` names the layers in order and the distributions each one roots (torch, triton,
xformers, ...). Every locked distribution goes to the first layer that reaches it from its roots through
the lock's dependency graph (uv's ``# via`` annotations) without crossing another layer's root; what no
layer reaches goes to the catch-all layer (``roots = ["*"]``). Each layer installs exactly its lines of the
lock, hashes included."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from pinmatrix.errors import PinmatrixError
from pinmatrix.lock.lockfile import (  # noqa: F401 - re-exported for the Containerfile path
    LockEntry,
    ParsedLock,
    parse_lock,
)


class LayerPlanError(PinmatrixError):
    """images/layers.toml or a lock file cannot be turned into layers."""


@dataclass(frozen=True)
class LayerSpec:
    name: str
    roots: tuple[str, ...]  # canonical names; ("*",) = everything not claimed before


@dataclass(frozen=True)
class PackageLayer:
    index: int
    name: str
    entries: tuple[LockEntry, ...]

    def requirements(self, options: tuple[str, ...] = ()) -> list[str]:
        return [*options, *(e.text for e in self.entries)]


def load_layer_specs(path: Path) -> list[LayerSpec]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LayerPlanError(f"{path}: the layer plan is missing") from None
    except tomllib.TOMLDecodeError as err:
        raise LayerPlanError(f"{path}: {err}") from None
    layers = data.get("layer")
    if not isinstance(layers, list) or not layers:
        raise LayerPlanError(f"{path}: needs at least one [[layer]] table")
    specs: list[LayerSpec] = []
    seen: set[str] = set()
    for i, item in enumerate(layers):
        name, roots = item.get("name"), item.get("roots")
        if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name) or name in seen:
            raise LayerPlanError(f"{path}: layer[{i}].name must be a unique lowercase name, got {name!r}")
        if not isinstance(roots, list) or not roots or not all(isinstance(r, str) for r in roots):
            raise LayerPlanError(f"{path}: layer[{i}] ({name}).roots must be a non-empty list of names")
        seen.add(name)
        specs.append(LayerSpec(name, tuple("*" if r == "*" else canonicalize_name(r) for r in roots)))
    if not any("*" in s.roots for s in specs):
        raise LayerPlanError(f"{path}: one layer must have roots = [\"*\"] to take what no other layer claims")
    return specs


def plan_layers(lock: ParsedLock, specs: list[LayerSpec]) -> list[PackageLayer]:
    """Assign every lock entry to one layer; return the non-empty layers in plan order."""
    by_name = lock.by_name()
    requires: dict[str, set[str]] = {name: set() for name in by_name}
    for entry in lock.entries:
        for parent in entry.via:
            if parent in requires:
                requires[parent].add(entry.name)
    claimed = {root for spec in specs for root in spec.roots if root != "*"}
    owner: dict[str, int] = {}
    for index, spec in enumerate(specs):
        if spec.roots == ("*",) or "*" in spec.roots:
            continue
        stack = [r for r in spec.roots if r in by_name and r not in owner]
        for root in stack:
            owner[root] = index
        while stack:
            node = stack.pop()
            for dep in sorted(requires[node]):
                if dep in owner or (dep in claimed and dep not in spec.roots):
                    continue
                owner[dep] = index
                stack.append(dep)
    catch_all = next(i for i, s in enumerate(specs) if "*" in s.roots)
    layers: list[PackageLayer] = []
    for index, spec in enumerate(specs):
        members = sorted(
            (e for e in lock.entries if owner.get(e.name, catch_all) == index), key=lambda e: e.name
        )
        if members:
            layers.append(PackageLayer(index, spec.name, tuple(members)))
    return layers
