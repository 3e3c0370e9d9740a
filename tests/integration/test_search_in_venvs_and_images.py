"""Version bisection end to end against the package index: uv venvs over six releases, a point that does not resolve,
env variants, and the cell's images under podman (tests/unit/bisect/test_search_end_to_end.py has the runs that
need no index)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from bisect_projects import SMOKE_DIR, cli_json, project_with_smokes

from pinmatrix.cli import main
from pinmatrix.results.store import ResultsStore

SIX_MATRIX = """
[matrix]
exclude_newer = "2026-11-01T00:00:00Z"
ca_certificates = ["/usr/local/share/ca-certificates"]

[stacks.sixes]
description = "six releases: assertNotRegex arrived in 1.14.0 (six's CHANGES)"
gpu_required = false
smokes = ["six-assert-not-regex"]
[stacks.sixes.packages]
six = ["1.16.0", "1.17.0"]
"""


def _version(tmp: Path, matrix: Path, *extra: str) -> list[str]:
    return ["bisect", "version", "six-assert-not-regex", str(matrix), "--stack", "sixes", "--axis", "six",
            "--smoke-dir", str(SMOKE_DIR), "--results", str(tmp / "r.sqlite"), "--logs", str(tmp / "logs"),
            "--work", str(tmp / "work"), *extra]


@pytest.mark.network
def test_version_bisect_over_six_releases_in_uv_venvs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    matrix = project_with_smokes(tmp_path, SIX_MATRIX)
    argv = _version(tmp_path, matrix, "--range", ">=1.10,<=1.17", "--venv-python", sys.executable)
    rep = cli_json(capsys, [*argv, "--json"])
    assert rep["space"]["values"] == ["1.10.0", "1.11.0", "1.12.0", "1.13.0", "1.14.0", "1.15.0", "1.16.0", "1.17.0"]
    assert (rep["outcome"], rep["before"], rep["after"]) == ("change", "1.13.0", "1.14.0")
    assert (rep["changed_from"], rep["changed_to"], rep["failure_class"]) == ("fail", "pass", "missing-api")
    assert rep["answer"].startswith("first passing six = 1.14.0")
    probed = {p["value"] for p in rep["probes"]}
    assert len(probed) == len(rep["probes"]) <= 5 and {"1.13.0", "1.14.0"} <= probed
    # only the cells the search needed were made: one venv per probed cell, and the project gained no lock
    assert len(list((tmp_path / "work" / "venvs").iterdir())) == len(probed)
    assert not (matrix.parent / "locks").exists()
    # each cell's result is in the store under the cell id the matrix gives that combination
    store = ResultsStore(tmp_path / "r.sqlite")
    cells = {c["name"]: c["id"] for c in rep["cells"]}
    assert store.query(cell_id=cells["sixes[six=1.14.0]"], probes=True)[0].metrics["six"] == "1.14.0"
    capsys.readouterr()
    assert main(["cells", str(matrix), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    rows = listed if isinstance(listed, list) else listed["cells"]
    assert cells["sixes[six=1.17.0]"] in {c["id"] for c in rows}
    # a rerun answers from the store alone
    again = cli_json(capsys, [*argv, "--json"])
    assert (again["after"], again["probes_run"], again["probes_reused"]) == ("1.14.0", 0, len(rep["probes"]))


@pytest.mark.network
def test_version_bisect_skips_a_point_that_does_not_resolve(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    matrix = project_with_smokes(tmp_path, SIX_MATRIX)
    values = "1.10.0,1.11.0,1.12.0,1.12.5,1.13.0,1.14.0,1.16.0"  # there is no six 1.12.5
    rep = cli_json(capsys, [*_version(tmp_path, matrix, "--values", values, "--venv-python", sys.executable), "--json"])
    assert (rep["outcome"], rep["after"]) == ("change", "1.14.0")
    (skipped,) = [p for p in rep["probes"] if p["value"] == "1.12.5"]
    assert skipped["verdict"] == "skip" and "does not resolve" in skipped["reason"] and not skipped["recorded"]
    assert rep["probes_skipped"] == 1
    # a stack's own values are searched when no --values/--range is given; both pass here
    rep = cli_json(capsys, [*_version(tmp_path, matrix, "--venv-python", sys.executable), "--json"])
    assert rep["outcome"] == "no-change" and rep["answer"].startswith("no change: six-assert-not-regex is pass")
    # bad input
    assert main(_version(tmp_path, matrix, "--values", "1.10.0,not-a-version")) == 2
    assert "'not-a-version' is not a version of six" in capsys.readouterr().err
    assert main(_version(tmp_path, matrix, "--range", "~=banana")) == 2


@pytest.mark.slow
@pytest.mark.podman
@pytest.mark.network
def test_version_bisect_in_images(tmp_path: Path, capsys: pytest.CaptureFixture[str], podman_env,  # noqa: ANN001
                                  build_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same search with each probe an image made by the project's builder and smoked in podman."""
    for key, value in podman_env.env.items():
        monkeypatch.setenv(key, value)
    matrix = project_with_smokes(tmp_path, SIX_MATRIX)
    argv = _version(tmp_path, matrix, "--range", ">=1.12,<=1.15", "--runtime", "podman", "--cache-dir",
                    str(build_cache))
    rep = cli_json(capsys, [*argv, "--json"])
    assert (rep["outcome"], rep["before"], rep["after"]) == ("change", "1.13.0", "1.14.0"), rep["answer"]
    store = ResultsStore(tmp_path / "r.sqlite")
    recs = store.query(smoke="six-assert-not-regex", probes=True)  # the bisect's own records: probes
    assert recs and all(r.image_digest and r.image_digest.startswith("sha256:") for r in recs)
    assert {r.metrics["six"] for r in recs} == {p["value"] for p in rep["probes"]}
    assert {r.environment["python"].rsplit(".", 1)[0] for r in recs} == {"3.13"}  # the cell's Python, in its image


ENV_MATRIX = """
[matrix]
exclude_newer = "2026-11-01T00:00:00Z"
ca_certificates = ["/usr/local/share/ca-certificates"]

[stacks.flags]
description = "env variants in order: the smoke fails once FAST_PATH is on"
gpu_required = false
smokes = ["fast-path-off"]
[stacks.flags.axes]
env = [{ label = "v1", vars = { FAST_PATH = "0" } }, { label = "v2", vars = { FAST_PATH = "0" } },
       { label = "v3", vars = { FAST_PATH = "1" } }, { label = "v4", vars = { FAST_PATH = "1" } },
       { label = "v5", vars = { FAST_PATH = "1" } }]
[stacks.flags.packages]
six = ["1.17.0"]
"""


ENV_SMOKE = '''
import os
from _smokelib import Fail, main

SMOKES = {"fast-path-off": {"func": "check", "timeout_s": 30}}

def check(ctx):
    if os.environ.get("FAST_PATH") == "1":
        raise Fail("the fast path is on", "fast-path")
    ctx.summary = "fast path off"

if __name__ == "__main__":
    main(SMOKES, globals())
'''


@pytest.mark.network
def test_version_bisect_over_env_variants(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    matrix = project_with_smokes(tmp_path, ENV_MATRIX)
    (matrix.parent / "smoke" / "flags.py").write_text(ENV_SMOKE)
    argv = ["bisect", "version", "fast-path-off", str(matrix), "--stack", "flags", "--axis", "env",
            "--smoke-dir", str(matrix.parent / "smoke"), "--results", str(tmp_path / "r.sqlite"),
            "--logs", str(tmp_path / "logs"), "--work", str(tmp_path / "work"), "--venv-python", sys.executable]
    rep = cli_json(capsys, [*argv, "--json"], code=0)
    assert (rep["before"], rep["after"], rep["changed_to"], rep["failure_class"]) == ("v2", "v3", "fail", "fast-path")
    assert rep["answer"].startswith("first failing env = v3")
    rep = cli_json(capsys, [*argv, "--values", "v4,v1", "--json"])  # any order the user gives is the order searched
    assert (rep["before"], rep["after"], rep["changed_to"]) == ("v4", "v1", "pass")
    assert main([*argv, "--values", "v1,v9"]) == 2
    assert "env variant 'v9' is not in the stack (variants: v1, v2, v3, v4, v5)" in capsys.readouterr().err
