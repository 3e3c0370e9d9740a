"""A CycloneDX SBOM for a cell, made from its lock (``locks/<cell-id>.txt``, the output of
``uv pip compile --generate-hashes``) with the ``cyclonedx-python-lib`` library.

Each locked distribution becomes a library component with the purl ``pkg:pypi/<name>@<version>`` and the
sha256 of every file the lock accepts for it (``--require-hashes`` installs one of them); the ``# via``
notes become the dependency graph. The document is deterministic for a given lock, cell and moment: its
serial number is derived from the cell id and the lock's sha256.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

from pinmatrix.cell import Cell
from pinmatrix.errors import PinmatrixError
from pinmatrix.hashing import sha256_bytes
from pinmatrix.lock.lockfile import parse_lock

CYCLONEDX_PREDICATE = "https://cyclonedx.org/bom"
CYCLONEDX_SPEC = "1.6"
_NAMESPACE = uuid.UUID("6f0e3c7a-2b1d-4e8f-9a51-7c3d2e1b0a94")  # pinmatrix's uuid5 namespace for serial numbers


@dataclass(frozen=True)
class LockedPackage:
    name: str  # canonical
    version: str
    hashes: tuple[str, ...]  # hex sha256 of each accepted file
    via: tuple[str, ...]  # canonical names of the packages that require it


def locked_packages(text: str, source: str = "lock") -> list[LockedPackage]:
    """The pinned distributions of a lock (``pinmatrix.lock.lockfile``). An entry that is not an exact
    ``name==version`` pin with sha256 hashes is refused, naming the file and the entry."""
    packages: list[LockedPackage] = []
    for entry in parse_lock(text, source).entries:
        if not entry.pinned or not entry.version:
            raise PinmatrixError(f"{source}: {entry.text.split(' --hash', 1)[0]!r} is not pinned to one version")
        if not entry.hashes:
            raise PinmatrixError(f"{source}: {entry.name}=={entry.version} has no sha256 hash")
        packages.append(LockedPackage(entry.name, entry.version, tuple(h.split(":", 1)[1] for h in entry.hashes),
                                      entry.via))
    return packages


def purl(pkg: LockedPackage) -> PackageURL:
    return PackageURL(type="pypi", name=pkg.name, version=pkg.version)


def cell_bom(cell: Cell, lock_text: str, *, moment: datetime, lock_source: str = "lock") -> dict[str, Any]:
    """The CycloneDX 1.6 JSON document (as a dict) for ``cell`` from its lock text."""
    packages = locked_packages(lock_text, lock_source)
    lock_sha = sha256_bytes(lock_text.encode())
    bom = Bom(serial_number=uuid.uuid5(_NAMESPACE, f"{cell.id}:{lock_sha}"))
    bom.metadata.timestamp = moment
    root = Component(
        type=ComponentType.CONTAINER, name=f"pinmatrix-cell/{cell.id}", version=cell.id, bom_ref=f"cell:{cell.id}",
        description=cell.name,
        properties=[Property(name="pinmatrix:stack", value=cell.stack),
                    Property(name="pinmatrix:python", value=cell.python),
                    Property(name="pinmatrix:platform", value=cell.platform),
                    Property(name="pinmatrix:lock.sha256", value=lock_sha),
                    *(Property(name=f"pinmatrix:pin.{k}", value=str(v)) for k, v in sorted(cell.pins.items()))],
    )
    bom.metadata.component = root
    components: dict[str, Component] = {}
    for pkg in packages:
        ref = purl(pkg)
        component = Component(
            type=ComponentType.LIBRARY, name=pkg.name, version=pkg.version, purl=ref, bom_ref=ref.to_string(),
            hashes=[HashType(alg=HashAlgorithm.SHA_256, content=h) for h in pkg.hashes],
        )
        components[pkg.name] = component
        bom.components.add(component)
    for pkg in packages:
        for parent in pkg.via:
            if parent in components:
                bom.register_dependency(components[parent], [components[pkg.name]])
    # the cell depends on what no other locked package requires (the direct requirements reach the rest)
    top = [components[p.name] for p in packages if not any(parent in components for parent in p.via)]
    bom.register_dependency(root, top)
    for pkg in packages:  # leaves appear in the graph too
        bom.register_dependency(components[pkg.name], [])
    return dict(json.loads(JsonV1Dot6(bom).output_as_string()))


def components_of(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """purl -> component of a CycloneDX JSON document."""
    return {c["purl"]: c for c in document.get("components", []) if "purl" in c}
