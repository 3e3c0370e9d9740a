"""The host's own files a wheels bundle reads (bundle/wheels.py): a host probe and a ``pip list --format json``
output, each read through the one document loader, so each problem is one line naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from pinmatrix.bundle.pack import BundleError
from pinmatrix.bundle.wheels import read_host_probe, read_pip_list


def refusal(read, path: Path, text: str) -> str:  # noqa: ANN001 - one of the readers
    path.write_text(text)
    with pytest.raises(BundleError) as err:
        read(path)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_a_host_probe_is_checked_and_located(tmp_path: Path) -> None:
    path = tmp_path / "probe.json"
    path.write_text('{"python": "3.12.3", "dists": {"A_b": "1.0"}}')
    assert (read_host_probe(path).python, read_host_probe(path).versions) == ("3.12", {"a-b": "1.0"})
    assert refusal(read_host_probe, path, '{"python": "3.12.3",\n "dists": {"a": 1}}') == \
        f"{path}: not a host probe: dists.a: Input should be a valid string"
    assert refusal(read_host_probe, path, '{"python": "3.12.3",\n "dist": {}}').startswith(
        f"{path}: not a host probe: dist: unknown key (did you mean 'dists'?)")
    assert refusal(read_host_probe, path, '{"python": "3.12.3",\n "dists": {,}}') == \
        f"{path}:2: syntax error: Expecting property name enclosed in double quotes (column 12)"


def test_a_pip_list_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "pip.json"
    assert refusal(read_pip_list, path, '{"name": "x"}') == \
        f"{path}: not a pip list --format json output: (top): Input should be a valid list"
    assert refusal(read_pip_list, path, '[{"name": "x", "version": ""}]') == \
        f"{path}: not a pip list --format json output: 0.version: String should have at least 1 character"
