"""Shared by tests/unit/archscan/test_render.py and tests/integration/test_render_toolchain_binaries.py."""

from __future__ import annotations

import zipfile
from pathlib import Path


def wheel_of(folder: Path, name: str, files: dict[str, bytes], tag: str = "py3-none-manylinux_2_28_aarch64") -> Path:
    path = folder / f"{name}-1.0-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in files.items():
            zf.writestr(member, data)
        zf.writestr(f"{name}-1.0.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        zf.writestr(f"{name}-1.0.dist-info/WHEEL", f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n")
        zf.writestr(f"{name}-1.0.dist-info/RECORD", "")
    return path
