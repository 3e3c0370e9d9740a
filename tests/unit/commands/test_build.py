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


@pytest.mark.network  # the demo's wheels are looked up on the default index
def test_print_says_the_bytes_each_cell_would_download(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    import json

    rc = main(["build", str(REPO / "matrix.toml"), "--stack", "demo", "--print", "--merge-below", "0",
               "--cache-dir", str(tmp_path / "c")])
    plan = json.loads(capsys.readouterr().out)
    assert rc == 0 and plan
    for cell in plan:
        wheels = [layer for layer in cell["layers"] if layer["name"].startswith("wheel:")]
        assert wheels and all(isinstance(w["download"], int) and w["download"] > 0 for w in wheels), wheels
        assert cell["download_bytes"] == sum(w["download"] for w in wheels)
    # a wheel already in the cache costs nothing: fetch one cell's wheels, then plan again
    from pinmatrix.index.wheel_index import WheelFetcher, cell_target
    from pinmatrix.matrix.selection import load, select
    from pinmatrix.project.lockfile import lock_path, parse_lock

    matrix, expansion = load(REPO / "matrix.toml")
    cell = next(c for c in select(matrix, expansion, stack="demo") if c.id == plan[0]["cell"])
    fetcher = WheelFetcher(tmp_path / "c" / "wheels")
    for entry in parse_lock(lock_path(cell, REPO).read_text()).entries:
        fetcher.fetch(fetcher.choose(entry, cell_target(cell), cell.indexes))
    assert main(["build", str(REPO / "matrix.toml"), "--stack", "demo", "-k", cell.id, "--print", "--merge-below", "0",
                 "--cache-dir", str(tmp_path / "c")]) == 0
    (again,) = json.loads(capsys.readouterr().out)
    assert again["download_bytes"] == 0
    assert all(layer["download"] is None for layer in again["layers"])



@pytest.mark.network  # the demo's wheels are looked up on the default index
def test_print_shows_the_wheels_merge_below_puts_in_one_layer(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    import json

    args = ["build", str(REPO / "matrix.toml"), "--stack", "demo", "--print", "--cache-dir", str(tmp_path / "c")]
    assert main([*args, "--merge-below", "0"]) == 0
    apart = json.loads(capsys.readouterr().out)
    assert main([*args, "--merge-below", "1GiB"]) == 0
    merged = json.loads(capsys.readouterr().out)
    assert main(args) == 0  # the default: the wheels under 16 MiB (all of the demo's) share one layer
    assert json.loads(capsys.readouterr().out) == merged
    for one, together in zip(apart, merged, strict=True):
        wheels = [layer["name"] for layer in one["layers"] if layer["name"].startswith("wheel:")]
        (layer,) = [layer for layer in together["layers"] if layer["name"].startswith("wheels:")]
        assert [q["name"] for q in layer["parts"]] == sorted(wheels) and not any(
            q["name"].startswith("wheel:") for q in together["layers"])
        assert together["download_bytes"] == one["download_bytes"] and together["inputs"] != one["inputs"]
