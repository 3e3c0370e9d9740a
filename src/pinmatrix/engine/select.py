"""Choosing an engine by name: the backends are imported here, never by the interface they implement
(``engine/base.py``), so the engine package has no import cycle."""

from __future__ import annotations

from collections.abc import Mapping

from pinmatrix.engine.base import ENGINE_NAMES, EngineName, OCIEngine
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


AUTO_ORDER: tuple[EngineName, ...] = ("podman", "docker")
"""``--engine auto``: the first of these that is usable, the same order in every command (build, pull): podman
first, which needs no daemon and builds reproducibly."""


def auto_engine(env: Mapping[str, str] | None = None, *, hint: str = "") -> OCIEngine:
    """The engine ``--engine auto`` means here: the first usable one in AUTO_ORDER; EngineError naming why
    each one is not usable otherwise (``hint`` appended, e.g. the command's way out)."""
    status = detect_engines(env)
    for candidate in AUTO_ORDER:
        if status[candidate] == "ok":
            return get_engine(candidate, env)
    raise EngineError("no container engine is usable: " + "; ".join(status[name] for name in AUTO_ORDER) + hint)


def choose_engine(name: str, *, hint: str = " (or pass --engine none)") -> OCIEngine | None:
    """An --engine value's engine, running: none for "none", the first that works for "auto"."""
    if name == "none":
        return None
    if name != "auto":
        engine = get_engine(name)
        engine.ensure_running()
        return engine
    return auto_engine(hint=hint)
