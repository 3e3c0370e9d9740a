"""`pinmatrix build` front-door errors: one line, exit 2, nothing built."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO
from pinmatrix.cli import main


def test_engine_not_running_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    rc = main(["build", str(REPO / "matrix.toml"), "--stack", "demo", "--engine", "docker",
               "--cache-dir", str(tmp_path / "c"), "--logs-dir", str(tmp_path / "l")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1
    assert err[0].startswith("pinmatrix: error: engine docker: ")
    assert ("Docker daemon is not running" in err[0]) or ("not installed" in err[0])
    assert not (tmp_path / "l").exists()


def test_no_engine_at_all(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    monkeypatch.setenv("PATH", str(tmp_path))
    rc = main(["build", str(REPO / "matrix.toml"), "--stack", "demo", "--engine", "auto"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("pinmatrix: error: no container engine is usable: ") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--stack", "nope"], "unknown stack 'nope'"),
        (["--stack", "demo", "-k", "no-such-cell-name"], "no cell matches -k 'no-such-cell-name' in stack demo"),
        (["--stack", "demo", "--jobs", "0"], "--jobs must be at least 1"),
        (["--stack", "demo", "--compression", "lz4"], "layer compression 'lz4': not one of gzip, zstd, none"),
        (["--stack", "demo", "--compression", "zstd:99"], "level 99 is outside 1-19"),
        (["--stack", "demo", "--merge-below", "4 parsecs"], "--merge-below '4 parsecs': expected a size such as"),
        (["--stack", "demo", "--merge-below=-1MB"], "--merge-below '-1MB': expected a size such as"),
    ],
)
def test_bad_selection(args: list[str], message: str, capsys) -> None:  # noqa: ANN001
    rc = main(["build", str(REPO / "matrix.toml"), *args])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.count("\n") == 1


def test_help_names_the_options(capsys) -> None:  # noqa: ANN001
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    out = capsys.readouterr().out
    for option in ("--stack", "-k", "--engine", "--jobs", "--push", "--registry"):
        assert option in out


