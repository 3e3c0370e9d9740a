"""Container engines behind one interface: ``get_engine("docker" | "podman")`` returns an :class:`OCIEngine`.

The docker backend drives a Docker daemon (legacy builder: no buildx on these machines); the podman backend
builds with buildah (``--isolation chroot --timestamp``: reproducible digests) and runs, pushes and pulls with
podman. Both share containers' image references, so the rest of pinmatrix never branches on the engine.
"""

from __future__ import annotations

from pinmatrix.engine.base import (
    ENGINE_NAMES,
    BuildResult,
    EngineName,
    ImageInfo,
    OCIEngine,
    host_has_gpus,
)
from pinmatrix.engine.select import AUTO_ORDER, auto_engine, detect_engines, get_engine

__all__ = [
    "AUTO_ORDER",
    "ENGINE_NAMES",
    "BuildResult",
    "EngineName",
    "ImageInfo",
    "OCIEngine",
    "auto_engine",
    "detect_engines",
    "get_engine",
    "host_has_gpus",
]
