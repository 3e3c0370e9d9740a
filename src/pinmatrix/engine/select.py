"""Choosing an engine by name: the backends are imported here, never by the interface they implement
(``engine/base.py``), so the engine package has no import cycle."""

from __future__ import annotations

from collections.abc import Mapping

from pinmatrix.engine.base import ENGINE_NAMES, OCIEngine
from pinmatrix.engine.docker import DockerEngine
from pinmatrix.engine.podman import PodmanEngine
from pinmatrix.errors import EngineError


def get_engine(name: str, env: Mapping[str, str] | None = None) -> OCIEngine:
    """The backend called ``name``; EngineError (one line) for an unknown name."""
    engines: dict[str, type[OCIEngine]] = {"docker": DockerEngine, "podman": PodmanEngine}
    if name not in engines:
        raise EngineError(f"unknown engine {name!r}: choose one of {', '.join(ENGINE_NAMES)}")
    return engines[name](env)


def detect_engines(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every engine name -> "ok" or the reason it cannot be used right now."""
    status: dict[str, str] = {}
    for name in ENGINE_NAMES:
        engine = get_engine(name, env)
        try:
            engine.ensure_running()
            status[name] = "ok"
        except EngineError as err:
            status[name] = str(err)
    return status
