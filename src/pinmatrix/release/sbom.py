"""A CycloneDX SBOM for a cell, made from its lock (``locks/<cell-id>.txt``, the output of
``uv pip compile --generate-hashes``) with the ``cyclonedx-python-lib`` library.

Each locked distribution becomes a library component with the purl ``pkg:pypi/<name>@<version>`` and the
sha256 of every file the lock accepts for it (``--require-hashes`` installs one of them). The dependency graph
is each wheel's ``Requires-Dist`` resolved against the lock for the cell's target (``pinmatrix.release.requires``)
where the wheel is at hand, else the lock's ``# via`` notes; the cell depends on its own requirements (and on
anything nothing else requires). The Debian packages of the image's base (``pinmatrix.release.debian``) are
components ``pkg:deb/debian/<name>@<version>?arch=<arch>`` the cell depends on. ``metadata.tools`` names
pinmatrix and cyclonedx-python-lib. The document is deterministic for a given lock, cell, inputs and moment:
its serial number is derived from the cell id, the lock's sha256 and the Debian packages.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed_version
from typing import Any

from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from pinmatrix.cell import Cell
from pinmatrix.errors import PinmatrixError
from pinmatrix.hashing import sha256_bytes
from pinmatrix.project.lockfile import parse_lock
from pinmatrix.release.debian import DebianPackage
from pinmatrix.release.requires import requires_graph, target_environment

CYCLONEDX_PREDICATE = "https://cyclonedx.org/bom"
_NAMESPACE = uuid.UUID("6f0e3c7a-2b1d-4e8f-9a51-7c3d2e1b0a94")  # pinmatrix's uuid5 namespace for serial numbers


@dataclass(frozen=True)
class LockedPackage:
    name: str  # canonical
    version: str
    hashes: tuple[str, ...]  # hex sha256 of each accepted file
    via: tuple[str, ...]  # canonical names of the packages that require it


def locked_packages(text: str, source: str = "lock") -> list[LockedPackage]:
    """The pinned distributions of a lock (``pinmatrix.project.lockfile``). An entry that is not an exact
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


def _version_of(dist: str) -> str:
    try:
        return installed_version(dist)
    except PackageNotFoundError:
        return "unknown"


def cell_bom(cell: Cell, lock_text: str, *, moment: datetime, lock_source: str = "lock",
             debian: Sequence[DebianPackage] = (), requires: Mapping[str, Sequence[str]] | None = None,
             ) -> dict[str, Any]:
    """The CycloneDX 1.6 JSON document (as a dict) for ``cell`` from its lock text, with ``debian`` (the base's
    installed packages) and ``requires`` (canonical name -> its wheel's Requires-Dist lines, for the wheels at
    hand; the others keep the lock's ``# via`` edges)."""
    packages = locked_packages(lock_text, lock_source)
    lock_sha = sha256_bytes(lock_text.encode())
    debs = sorted({p.purl().to_string(): p for p in debian}.items())
    debs_sha = sha256_bytes(json.dumps([k for k, _ in debs]).encode())
    bom = Bom(serial_number=uuid.uuid5(_NAMESPACE, f"{cell.id}:{lock_sha}" + (f":{debs_sha}" if debs else "")))
    bom.metadata.timestamp = moment
    bom.metadata.tools.components.add(Component(type=ComponentType.APPLICATION, name="pinmatrix",
                                                version=_version_of("pinmatrix")))
    bom.metadata.tools.components.add(Component(type=ComponentType.LIBRARY, name="cyclonedx-python-lib",
                                                version=_version_of("cyclonedx-python-lib")))
    requires = dict(requires or {})
    root = Component(
        type=ComponentType.CONTAINER, name=f"pinmatrix-cell/{cell.id}", version=cell.id, bom_ref=f"cell:{cell.id}",
        description=cell.name,
        properties=[Property(name="pinmatrix:stack", value=cell.stack),
                    Property(name="pinmatrix:python", value=cell.python),
                    Property(name="pinmatrix:platform", value=cell.platform),
                    Property(name="pinmatrix:lock.sha256", value=lock_sha),
                    Property(name="pinmatrix:dependencies.requires-dist",
                             value=f"{sum(p.name in requires for p in packages)} of {len(packages)}"),
                    Property(name="pinmatrix:debian.packages", value=str(len(debs))),
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
    versions = {p.name: p.version for p in packages}
    edges = requires_graph(versions, requires, target_environment(cell), cell.requirements)
    for pkg in packages:  # a distribution without its wheel at hand: the lock's via notes name who requires it
        for parent in pkg.via:
            if parent in components and parent not in requires:
                edges.setdefault(parent, set()).add(pkg.name)
    for name, deps in edges.items():
        bom.register_dependency(components[name], [components[d] for d in sorted(deps)])
    required = {d for deps in edges.values() for d in deps}
    direct = {canonicalize_name(Requirement(r).name) for r in cell.requirements if _parses(r)}
    # the cell depends on its own requirements, and on what nothing else requires (so the graph reaches all)
    top = [components[p.name] for p in packages if p.name in direct or p.name not in required]
    deb_components = []
    for deb_ref, deb in debs:
        component = Component(type=ComponentType.LIBRARY, name=deb.name, version=deb.version, purl=deb.purl(),
                              bom_ref=deb_ref, properties=[Property(name="pinmatrix:deb.source", value=deb.source)]
                              if deb.source else [])
        bom.components.add(component)
        deb_components.append(component)
        bom.register_dependency(component, [])
    bom.register_dependency(root, top + deb_components)
    for pkg in packages:  # leaves appear in the graph too
        bom.register_dependency(components[pkg.name], [])
    return dict(json.loads(JsonV1Dot6(bom).output_as_string()))


def _parses(line: str) -> bool:
    try:
        Requirement(line)
        return True
    except InvalidRequirement:
        return False
