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




def _matrix_with_cache(tmp_path: Path, settings: str) -> Path:
    """The shipped matrix, its [matrix] table given ``settings``, in a project of its own (its patches linked)."""
    (tmp_path / "patches").symlink_to(REPO / "patches")
    text = (REPO / "matrix.toml").read_text(encoding="utf-8").replace("[matrix]\n", f"[matrix]\n{settings}", 1)
    path = tmp_path / "matrix.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--cache-from", "../../etc", "--cache-from: registry '../../etc' must look like host[:port]/path"),
    ("--cache-to", "127.0.0.1:5000", "--cache-to: build cache '127.0.0.1:5000' must name a repository"),
    ("--cache-from", "http://127.0.0.1:5000/c", "--cache-from: registry 'http://127.0.0.1:5000/c' must look like"),
])
def test_a_bad_cache_repository_is_one_line_before_any_lock(flag: str, value: str, message: str, tmp_path: Path,
                                                            capsys) -> None:  # noqa: ANN001
    path = _matrix_with_cache(tmp_path, "")
    rc = main(["build", str(path), "--stack", "demo", "--engine", "none", f"{flag}={value}"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "locks").exists() and not (tmp_path / ".pinmatrix").exists()


def test_the_matrix_cache_setting_is_used_and_no_build_cache_drops_it(tmp_path: Path, monkeypatch,
                                                                      capsys) -> None:  # noqa: ANN001
    monkeypatch.delenv("PINMATRIX_TRUSTED_KEYS", raising=False)
    path = _matrix_with_cache(tmp_path, 'cache_from = "127.0.0.1:9/cache"\n')
    rc = main(["build", str(path), "--stack", "demo", "--engine", "none", "--no-lock"])
    err = capsys.readouterr().err
    assert rc == 2 and "--cache-from uses only entries signed by a trusted key" in err and err.count("\n") == 1, err
    rc = main(["build", str(path), "--stack", "demo", "--engine", "none", "--no-build-cache", "--cache-from=a/b"])
    err = capsys.readouterr().err
    assert rc == 2 and "--no-build-cache contradicts --cache-from / --cache-to" in err
    rc = main(["build", str(path), "--stack", "demo", "--engine", "none", "--no-lock", "--no-build-cache",
               "--cache-dir", str(tmp_path / "c"), "--logs-dir", str(tmp_path / "l"), "--layout", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 1 and "trusted key" not in err and "no lock: run `pinmatrix lock" in err, err
