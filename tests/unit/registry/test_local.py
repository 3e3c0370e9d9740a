"""The embedded registry starts only on the project's configured address (issue 45): a loopback address nothing
listens on that is not matrix.toml's registry (a mistyped port in --registry, --image or a reference) is one line,
exit 2, and nothing is started or written; an address that already listens is used whatever it is."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from pinmatrix.cli import main
from pinmatrix.registry.local import Endpoint, UnconfiguredAddressError, embedded, listening


def _silent_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def listener() -> Iterator[Endpoint]:
    """Something that listens on a loopback port (another registry, say)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield Endpoint("127.0.0.1", int(s.getsockname()[1]))


def test_a_silent_address_other_than_the_configured_one_is_refused(tmp_path: Path) -> None:
    typo, configured = _silent_port(), _silent_port()
    with pytest.raises(UnconfiguredAddressError) as caught, \
            embedded(tmp_path, f"127.0.0.1:{typo}/pinmatrix", f"127.0.0.1:{configured}/pinmatrix"):
        pytest.fail("entered")
    assert str(caught.value) == (
        f"registry 127.0.0.1:{typo}: nothing listens there, and pinmatrix starts its embedded registry only on the "
        f"matrix's registry, 127.0.0.1:{configured}: check the address")
    assert not listening(Endpoint("127.0.0.1", typo)) and not (tmp_path / ".pinmatrix").exists()


@pytest.mark.parametrize("configured", ["", "registry.example.com:5000/pinmatrix"])
def test_without_a_configured_loopback_registry_nothing_is_started(tmp_path: Path, configured: str) -> None:
    with pytest.raises(UnconfiguredAddressError, match="none is named here: check the address"), \
            embedded(tmp_path, f"localhost:{_silent_port()}/p", configured):
        pytest.fail("entered")


def test_a_listening_address_is_used_without_starting_anything(tmp_path: Path, listener: Endpoint) -> None:
    with embedded(tmp_path, f"{listener.address}/p", f"127.0.0.1:{_silent_port()}/p") as started:
        assert started is None


@pytest.mark.parametrize("argv", [
    ["verify", "127.0.0.1:{port}/pinmatrix/known-good/demo:known-good"],
    ["promote", "--stack", "demo", "--dry-run", "--registry", "127.0.0.1:{port}/pinmatrix"],
    ["build", "--stack", "demo", "--push", "--registry", "127.0.0.1:{port}/pinmatrix"],
])
def test_the_commands_say_it_in_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """In the stand-in root (tests/conftest.py): the shipped matrix, whose registry is 127.0.0.1:5000."""
    port = _silent_port()
    assert main([a.format(port=port) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err == (f"pinmatrix: error: registry 127.0.0.1:{port}: nothing listens there, and pinmatrix starts its "
                   "embedded registry only on the matrix's registry, 127.0.0.1:5000: check the address\n")
    assert not Path(".pinmatrix").exists()
