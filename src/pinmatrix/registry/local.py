"""The embedded default registry: when the matrix names a loopback registry (``127.0.0.1:PORT/...`` or
``localhost:PORT/...``) and nothing listens there, pinmatrix serves one itself with Debian's docker-registry,
its config in the state folder's ``registry/`` (``paths.REGISTRY_DIR``) and its blobs in ``registry/data``
next to the matrix.

Two ways to have one, as with a compose service:
- per command (automatic): a command that talks to the registry (build --push, smoke in an image, promote,
  pull, ci k8s) starts it when nothing listens and stops it when the last such command ends;
- managed: ``pinmatrix registry start`` keeps one in the background (a pidfile in that ``registry/``)
  until ``pinmatrix registry stop``; commands then find it listening and leave it alone.

Concurrent commands share an automatic registry: each holds a shared flock on ``users.lock`` while it runs
(whether it started the registry or found it listening); the one that finds itself last (an exclusive lock
succeeds) stops a registry that was started automatically.
The data directory outlives both, so images pushed by one command are there for the next.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import socket
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pinmatrix.atomic import atomic_write_text, locked
from pinmatrix.engine.services import Service, start_registry
from pinmatrix.errors import EngineError, PinmatrixError
from pinmatrix.imageref import host_name, is_loopback
from pinmatrix.paths import REGISTRY_DIR

PIDFILE = "registry.json"
Mode = Literal["auto", "managed"]


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def loopback_endpoint(setting: str | None) -> Endpoint | None:
    """The endpoint of a registry setting or image reference ("127.0.0.1:5000/pinmatrix") when it is on this
    machine's loopback with an explicit port; None for remote registries (never started here)."""
    if not setting:
        return None
    host = setting.split("/", 1)[0]
    name, sep, port = host.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    if not is_loopback(host) or host_name(host) == "::1":  # not IPv6: the registry listens on 127.0.0.1
        return None
    return Endpoint(name, int(port))


def listening(endpoint: Endpoint, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout):
            return True
    except OSError:
        return False


def registry_dir(root: Path) -> Path:
    return Path(root) / REGISTRY_DIR


@dataclass(frozen=True)
class State:
    """What the pidfile records about a registry pinmatrix started."""

    pid: int
    address: str
    mode: Mode
    config: str
    data: str
    started_at: str

    def alive(self) -> bool:
        """Whether ``pid`` is still that docker-registry (serving this config), not a recycled pid."""
        try:
            cmdline = Path(f"/proc/{self.pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return any(part.endswith(b"docker-registry") for part in cmdline) and self.config.encode() in cmdline


def read_state(root: Path) -> State | None:
    path = registry_dir(root) / PIDFILE
    try:
        return State(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _write_state(root: Path, state: State | None) -> None:
    path = registry_dir(root) / PIDFILE
    if state is None:
        path.unlink(missing_ok=True)
        return
    atomic_write_text(path, json.dumps(asdict(state), indent=2, sort_keys=True) + "\n")


def start(root: Path, endpoint: Endpoint, mode: Mode) -> State:
    """Start docker-registry on ``endpoint`` with its data under ``root``/``REGISTRY_DIR``/data."""
    directory = registry_dir(root).resolve()
    try:
        service = start_registry(directory, endpoint.port, host=endpoint.host, exact=True)
    except EngineError as err:
        raise EngineError(f"embedded registry for {endpoint.address}: {err}") from None
    state = State(pid=service.pid, address=service.address, mode=mode, config=str(directory / "config.yml"),
                  data=str(directory / "data"),
                  started_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    _write_state(root, state)
    return state


def stop(root: Path) -> State | None:
    """Stop the registry pinmatrix started for ``root`` (either mode); None when none runs."""
    state = read_state(root)
    if state is None:
        return None
    if state.alive():
        Service("docker-registry", state.pid, registry_dir(root)).stop(remove=False)
    _write_state(root, None)
    return state


def status(root: Path, endpoint: Endpoint | None) -> dict[str, Any]:
    """A JSON-able description: address, whether it listens, who serves it, pid, mode, data directory."""
    state = read_state(root)
    ours = state if state is not None and state.alive() else None
    address = endpoint.address if endpoint else (state.address if state else None)
    up = listening(endpoint) if endpoint else ours is not None
    data = registry_dir(root) / "data"
    return {
        "address": address,
        "listening": up,
        "served_by": "pinmatrix" if ours else ("another process" if up else None),
        "mode": ours.mode if ours else None,
        "pid": ours.pid if ours else None,
        "started_at": ours.started_at if ours else None,
        "data": str(data.resolve()),
        "data_bytes": sum(p.stat().st_size for p in data.rglob("*") if p.is_file()) if data.is_dir() else 0,
    }


def ensure_managed(root: Path, endpoint: Endpoint) -> tuple[str, State | None]:
    """``pinmatrix registry start``: ("started" | "adopted" | "running" | "foreign", state)."""
    with locked(registry_dir(root) / "start.lock"):
        state = read_state(root)
        if state is not None and state.alive():
            if state.mode == "managed":
                return "running", state
            state = State(**{**asdict(state), "mode": "managed"})
            _write_state(root, state)
            return "adopted", state
        if listening(endpoint):
            return "foreign", None
        return "started", start(root, endpoint, "managed")


class UnconfiguredAddressError(PinmatrixError):
    """A loopback registry address nothing listens on that is not the project's configured registry: pinmatrix
    starts its embedded registry on the configured address only, so a mistyped port is said, not served."""

    def __init__(self, endpoint: Endpoint, configured: Endpoint | None) -> None:
        where = (f"on the matrix's registry, {configured.address}" if configured is not None else
                 "on a loopback registry matrix.toml names ([matrix] registry), and none is named here")
        super().__init__(f"registry {endpoint.address}: nothing listens there, and pinmatrix starts its embedded "
                         f"registry only {where}: check the address")


def _startable(endpoint: Endpoint, configured: str | None) -> None:
    """Refuse to start a registry on ``endpoint`` unless it is the ``configured`` one (same port on loopback)."""
    wanted = loopback_endpoint(configured)
    if wanted is None or wanted.port != endpoint.port:
        raise UnconfiguredAddressError(endpoint, wanted)


@contextmanager
def embedded(root: Path, setting: str | None, configured: str | None, *, echo: Any = None) -> Iterator[State | None]:
    """For the length of one command: when ``setting`` names a loopback registry nothing listens on, start one
    (the State is yielded; None when nothing had to start), provided it is the ``configured`` registry of the
    project (matrix.toml's); any other silent address is UnconfiguredAddressError. The last command using an
    automatically started registry stops it."""
    endpoint = loopback_endpoint(setting)
    if endpoint is None:
        yield None
        return
    if not listening(endpoint):
        _startable(endpoint, configured)  # before any lock or folder: a typo leaves nothing behind
    # Every command using the project's loopback registry holds the shared lock, also one that finds it already
    # listening: the command that started it must not stop it under another command's feet.
    echo = echo or (lambda line: print(line, file=sys.stderr))
    directory = registry_dir(root)
    directory.mkdir(parents=True, exist_ok=True)
    users = open(directory / "users.lock", "a+")  # noqa: SIM115 - held for the whole command
    fcntl.flock(users, fcntl.LOCK_SH)
    started: State | None = None
    try:
        with locked(directory / "start.lock"):
            if not listening(endpoint):
                _startable(endpoint, configured)
                started = start(root, endpoint, "auto")
                echo(f"pinmatrix: started the embedded registry on {endpoint.address} (data in "
                     f"{started.data}); it stops when this command ends (`pinmatrix registry start` keeps one)")
        yield started
    finally:
        try:
            fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # another command still uses it: the last one stops it
        else:
            state = read_state(root)
            if state is not None and state.mode == "auto":
                stop(root)
        users.close()


@contextmanager
def for_command(args: argparse.Namespace) -> Iterator[State | None]:
    """The embedded registry around one parsed command (cli.py wraps every command in this), when the command
    declares that it talks to a registry: its parser's ``registry_need`` default, called with the parsed
    arguments, gives (project root, registry setting, the project's configured registry) or None. Smoking an image only asks the registry which
    digest a tag was pushed as: if none can be started, it goes on without."""
    declared = getattr(args, "registry_need", None)
    need = declared(args) if declared is not None else None
    with ExitStack() as stack:
        state = None
        if need is not None:
            try:
                state = stack.enter_context(embedded(*need))
            except EngineError as err:
                if args.command != "smoke":
                    raise
                print(f"pinmatrix: note: {err}; smoking without a registry (local image digests)", file=sys.stderr)
        yield state
