"""Split a cell's lock into image layers, most shared first, so cells that share a prefix share layers.

The layer plan (``images/layers.toml``, read by ``project/layer_plan``) names the layers in order and the
distributions each one roots (torch, triton, xformers, ...). Every locked distribution goes to the first layer
that reaches it from its roots through the lock's dependency graph (uv's ``# via`` annotations) without crossing
another layer's root; what no layer reaches goes to the catch-all layer (``roots = ["*"]``). Each layer installs
exactly its lines of the lock, hashes included."""

from __future__ import annotations

from dataclasses import dataclass

from pinmatrix.project.layer_plan import LayerSpec
from pinmatrix.project.lockfile import LockEntry, ParsedLock


@dataclass(frozen=True)
class PackageLayer:
    index: int
    name: str
    entries: tuple[LockEntry, ...]

    def requirements(self, options: tuple[str, ...] = ()) -> list[str]:
        return [*options, *(e.text for e in self.entries)]


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
