"""Shared by tests/unit/release/test_sbom.py and tests/integration/test_sbom_base_packages.py."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

from promotion import CPU_CELL, _matrix_for, record  # noqa: F401 - the fixture

STATUS = """Package: libc6
Status: install ok installed
Priority: optional
Section: libs
Installed-Size: 12345
Maintainer: GNU Libc Maintainers <debian-glibc@lists.debian.org>
Architecture: amd64
Multi-Arch: same
Source: glibc
Version: 2.41-12
Description: GNU C Library: Shared libraries
 Contains the standard libraries that are used by nearly all programs on
 the system.

Package: libgcc-s1
Status: install ok installed
Architecture: amd64
Source: gcc-14 (14.2.0-19)
Version: 14.2.0-19
Depends: libc6 (>= 2.35)

Package: tzdata
Status: deinstall ok config-files
Architecture: all
Version: 2025b-4

Package: perl-base
Status: install ok installed
Architecture: amd64
Source: perl (5.40.1-6)
Version: 5.40.1-6+b1

Package: base-files
Status: install ok installed
Architecture: amd64
Version: 1:13.8
"""


def validate_bom(bom: dict) -> None:  # type: ignore[type-arg]
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(bom))
    assert error is None, error


def cached_wheel(cache: Path, name: str, version: str, requires: list[str], *, metadata_pad: int = 0) -> str:
    """A wheel with only a METADATA, stored in ``cache`` as the build stores it; returns its sha256."""
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w") as zf:
        meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        meta += "".join(f"Requires-Dist: {r}\n" for r in requires) + "\n" + "x" * metadata_pad
        zf.writestr(f"{name}-{version}.dist-info/METADATA", meta)
    data = raw.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    folder = cache / digest[:2] / digest
    folder.mkdir(parents=True)
    (folder / f"{name}-{version}-py3-none-any.whl").write_bytes(data)
    return digest
