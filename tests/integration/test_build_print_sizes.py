"""`build --print` against the package index: the bytes each cell of the demo would download, and the wheels --merge-
below puts in one layer."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO
from pinmatrix.cli import main


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
