"""The embedded registry (pinmatrix.registry.local) with Debian's docker-registry: which settings it serves, and
how concurrent commands share one started automatically (the last to end stops it, never the first)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from conftest import require_binaries
from pinmatrix.registry.local import Endpoint, embedded, listening, loopback_endpoint, read_state, stop

pytestmark = pytest.mark.registry


def free_endpoint() -> Endpoint:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return Endpoint("127.0.0.1", int(s.getsockname()[1]))


@pytest.mark.parametrize(("setting", "expected"), [
    ("127.0.0.1:5000/pinmatrix", Endpoint("127.0.0.1", 5000)),
    ("localhost:5001/a/b", Endpoint("localhost", 5001)),
    ("127.0.0.2:5002", Endpoint("127.0.0.2", 5002)),
    ("127.0.0.1/pinmatrix", None),  # no port: not one we would serve
    ("registry.example.com:5000/pinmatrix", None),
    ("10.0.0.1:5000/pinmatrix", None),
    ("127.0.0.1:99999/x", None),
    ("127.0.0.1.example.com:5000/x", None),
    ("", None),
    (None, None),
])
def test_only_loopback_registries_with_a_port_are_served(setting: str | None, expected: Endpoint | None) -> None:
    assert loopback_endpoint(setting) == expected


def test_concurrent_commands_share_it_and_the_last_one_stops_it(tmp_path: Path) -> None:
    require_binaries("docker-registry")
    endpoint = free_endpoint()
    setting = f"{endpoint.address}/pinmatrix"
    lines: list[str] = []
    first, second = embedded(tmp_path, setting, setting, echo=lines.append), \
        embedded(tmp_path, setting, setting, echo=lines.append)
    try:
        state = first.__enter__()  # no registry: this command starts one
        assert state is not None and state.mode == "auto" and listening(endpoint)
        assert read_state(tmp_path) == state and state.alive()
        assert second.__enter__() is None  # finds it listening, uses it
        first.__exit__(None, None, None)  # the starter ends first ...
        assert listening(endpoint), "the registry was stopped under a command still using it"
        second.__exit__(None, None, None)  # ... the last user stops it
        assert not listening(endpoint) and read_state(tmp_path) is None
        assert len(lines) == 1 and endpoint.address in lines[0]
        assert (tmp_path / ".pinmatrix" / "registry" / "config.yml").is_file()  # blobs go to data/ on first push
    finally:
        stop(tmp_path)


def test_an_exception_in_the_command_still_stops_it(tmp_path: Path) -> None:
    require_binaries("docker-registry")
    endpoint = free_endpoint()
    with pytest.raises(RuntimeError), embedded(tmp_path, f"{endpoint.address}/p", f"{endpoint.address}/p",
                                                  echo=lambda _: None) as state:
        assert state is not None and listening(endpoint)
        raise RuntimeError("the command failed")
    assert not listening(endpoint)
