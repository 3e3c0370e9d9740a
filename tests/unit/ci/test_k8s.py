"""`pinmatrix ci github` (job matrix, runner labels), `pinmatrix ci k8s` (Jobs per cell x node pool,
validated against the Kubernetes 1.37 JSON schemas shipped by kubernetes-validate, strict mode), and the
pod side: the Job's own command run from its manifest, then `pinmatrix ci collect`. Images resolved by digest
from a registry: tests/integration/test_k8s_digests.py."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from k8s_pools import POOLS_TOML, ROOT, SMOKE_DIR
from promotion import _matrix_for, push_image  # noqa: F401 - the fixture

from pinmatrix.ci.github import MAX_JOBS, github_matrix, runner_labels
from pinmatrix.ci.k8s import (
    IMAGE_PYTHON,
    RESULTS_MOUNT,
    SMOKE_MOUNT,
    NodePool,
    collect,
    k8s_manifests,
    load_pools,
    pool_fits,
    validate,
)
from pinmatrix.cli import main
from pinmatrix.errors import PinmatrixError
from pinmatrix.matrix.selection import load
from pinmatrix.results.store import ResultsStore


@pytest.fixture(scope="module")
def expansion():
    return load(ROOT / "matrix.toml")[1]


def cells_of(expansion, stack: str):
    return [c for c in expansion.cells if c.stack == stack]


@pytest.fixture()
def pools(tmp_path: Path) -> list[NodePool]:
    path = tmp_path / "pools.toml"
    path.write_text(POOLS_TOML)
    return load_pools(path)


# ------------------------------------------------------------------------------------------ github


def test_github_matrix_labels(expansion) -> None:
    data = github_matrix(expansion.cells)
    by_stack = {}
    for job in data["include"]:
        by_stack.setdefault(job["stack"], []).append(job)
    assert len(data["include"]) == len(expansion.cells)
    h200 = by_stack["h200"][0]
    assert h200["runs-on"] == ["self-hosted", "linux", "x64", "gpu-sm_90", "nvidia-driver-580.159.04"]
    gb10 = {tuple(j["runs-on"]) for j in by_stack["gb10-nvfp4"]}
    assert ("self-hosted", "linux", "arm64", "gpu-sm_121", "nvidia-driver-595.58.03") in gb10
    assert all(j["runs-on"] == ["ubuntu-latest"] and j["gpu-required"] is False for j in by_stack["demo"])
    demo = cells_of(expansion, "demo")[0]
    assert runner_labels(demo, cpu_runner=["self-hosted", "builder"]) == ["self-hosted", "builder"]


def test_github_matrix_limit(expansion) -> None:
    cells = expansion.cells * (MAX_JOBS // len(expansion.cells) + 1)
    with pytest.raises(PinmatrixError, match="at most 256 jobs"):
        github_matrix(cells)


def test_github_names_images_by_digest_and_leaves_out_cells_without_one(expansion) -> None:
    demo = cells_of(expansion, "demo")
    images = fake_images(demo[:2])
    entries = github_matrix(demo, registry="127.0.0.1:5000/pinmatrix", images=images)["include"]
    assert [e["cell"] for e in entries] == [c.id for c in demo[:2]]
    assert all(e["image"] == images[e["cell"]] and "@sha256:" in e["image"] for e in entries)
    assert all(e["image-tag"].endswith(":" + e["cell"]) and "@" not in e["image-tag"] for e in entries)
    tagged = github_matrix(demo, registry="127.0.0.1:5000/pinmatrix")["include"]
    assert all("image" not in e for e in tagged)  # before the build: the tag to push to, no image by tag
    with pytest.raises(PinmatrixError, match="no selected cell has an image in the registry"):
        github_matrix(demo, registry="127.0.0.1:5000/pinmatrix", images={})


def test_github_command_prints_json(capsys) -> None:
    rc = main(["ci", "github", str(ROOT / "matrix.toml"), "--stack", "demo"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and len(data["include"]) == 4
    assert {j["smokes"] for j in data["include"]} == {"host-probe python-imports"}


# ------------------------------------------------------------------------------------------ k8s


def fake_images(cells) -> dict[str, str]:
    return {c.id: f"127.0.0.1:5000/pinmatrix/{c.stack}@sha256:{c.id * 5}{'0' * 4}" for c in cells}


def test_pool_fit_rules(expansion, pools) -> None:
    h200_cell = cells_of(expansion, "h200")[0]
    fits = {p.name: pool_fits(h200_cell, p) for p in pools}
    assert fits["h200"][0]
    assert fits["spark-580"] == (False, "the cell pins driver 580.159.04, pool spark-580 runs 580.142")
    gb = [c for c in cells_of(expansion, "gb10-nvfp4") if c.pins["driver"] == "595.58.03"]
    assert gb and all(pool_fits(c, pools[2])[0] for c in gb)
    assert not pool_fits(gb[0], pools[1])[0]


def test_k8s_jobs_select_nodes_with_gfd_labels_and_validate(expansion, pools) -> None:
    cells = cells_of(expansion, "h200") + cells_of(expansion, "gb10-nvfp4") + cells_of(expansion, "demo")
    emitted = k8s_manifests(cells, pools, fake_images(cells), smoke_dir=SMOKE_DIR, namespace="gpu-ci",
                            run_id="r1")
    jobs = emitted.jobs
    gb = cells_of(expansion, "gb10-nvfp4")
    gb_fitting = [c for c in gb if c.pins["driver"] in ("580.142", "595.58.03")]
    assert len(jobs) == 2 + len(gb_fitting) + 4  # each GPU cell on its one pool, CPU cells once
    assert any("pool spark-580" in s and "590.48.01" in s for s in emitted.skipped)
    cm = emitted.documents[0]
    assert cm["kind"] == "ConfigMap" and "pinmatrix_pod_runner.py" in cm["data"] and "host.py" in cm["data"]
    h200_job = next(j for j in jobs if j["metadata"]["labels"]["pinmatrix.io/pool"] == "h200")
    pod = h200_job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/cuda.driver.major": "580",
        "nvidia.com/cuda.driver.minor": "159", "nvidia.com/cuda.driver.rev": "04",
        "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0",
    }
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "@sha256:" in container["image"] and container["command"][0] == IMAGE_PYTHON
    assert any(a.startswith("xformers_tiled.py:xformers-tiled-matmul-boundary-output:") for a in container["command"])
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert json.loads(env["PINMATRIX_CELL"])["id"] == h200_job["metadata"]["labels"]["pinmatrix.io/cell"]
    assert env["TORCH_CUDA_ARCH_LIST"]
    spark = next(j for j in jobs if j["metadata"]["labels"]["pinmatrix.io/pool"] == "spark-595")
    assert spark["spec"]["template"]["spec"]["nodeSelector"]["cloud.example.com/pool"] == "spark"
    cpu = next(j for j in jobs if j["metadata"]["labels"]["pinmatrix.io/pool"] == "cpu")
    assert "nodeSelector" not in cpu["spec"]["template"]["spec"]
    assert all(len(j["metadata"]["name"]) <= 63 for j in jobs)
    # the Kubernetes 1.37 schemas, strict: every document passes
    assert validate(emitted.documents) == []


def test_schema_validation_catches_broken_manifests(expansion, pools) -> None:
    cells = cells_of(expansion, "h200")
    emitted = k8s_manifests(cells, pools, fake_images(cells), smoke_dir=SMOKE_DIR)
    job = copy.deepcopy(emitted.jobs[0])
    del job["spec"]["template"]["spec"]["containers"][0]["name"]  # required
    bad_field = copy.deepcopy(emitted.jobs[0])
    bad_field["spec"]["template"]["spec"]["nodeSelectr"] = {"a": "b"}
    wrong_type = copy.deepcopy(emitted.jobs[0])
    wrong_type["spec"]["backoffLimit"] = "none"
    problems = validate([job, bad_field, wrong_type])
    assert len(problems) == 3, problems
    assert "'name' is a required property" in problems[0]
    assert "nodeSelectr" in problems[1]
    assert "backoffLimit" in problems[2]


@pytest.mark.parametrize("run_id", ["../../etc", "a/b", "-rf", "", "r" * 81, "r\u202e9"])
def test_a_run_id_is_a_name_never_a_path(expansion, pools, run_id: str) -> None:
    cells = cells_of(expansion, "h200")[:1]
    with pytest.raises(PinmatrixError, match=r"^ci k8s: --run-id ") as err:
        k8s_manifests(cells, pools, fake_images(cells), smoke_dir=SMOKE_DIR, run_id=run_id)
    assert "\n" not in str(err.value)
    assert k8s_manifests(cells, pools, fake_images(cells), smoke_dir=SMOKE_DIR, run_id="20261204-1650").jobs


def test_job_command_runs_and_collect_records(expansion, pools, tmp_path: Path, capsys) -> None:
    """Run the demo Job's container command as the pod would (ConfigMap files at the smoke mount, the
    results volume, the Job's env), with this interpreter standing in for the image's, then collect."""
    cell = cells_of(expansion, "demo")[0]
    emitted = k8s_manifests([cell], pools, fake_images([cell]), smoke_dir=SMOKE_DIR, run_id="r9")
    cm, job = emitted.documents
    mount = tmp_path / "configmap"
    mount.mkdir()
    for name, text in cm["data"].items():
        (mount / name).write_text(text)
    results = tmp_path / "pvc"
    container = job["spec"]["template"]["spec"]["containers"][0]

    def rebase(arg: str) -> str:
        return arg.replace(SMOKE_MOUNT, str(mount)).replace(RESULTS_MOUNT, str(results))

    argv = [sys.executable] + [rebase(a) for a in container["command"][1:]]
    env = dict(os.environ, **{e["name"]: e["value"] for e in container["env"] if "value" in e},
               PINMATRIX_NODE_NAME="node-7")
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out_dir = Path(rebase(job["metadata"]["annotations"]["pinmatrix.io/results"]))
    run = json.loads((out_dir / "run.json").read_text())
    assert [s["smoke"] for s in run["smokes"]] == ["host-probe", "python-imports"]
    assert run["host"]["hostname"] == "node-7" and run["finished_at"]

    records = collect(out_dir, {cell.id: cell})
    by_smoke = {r.smoke: r for r in records}
    assert by_smoke["host-probe"].status == "pass"
    assert by_smoke["host-probe"].image_digest == fake_images([cell])[cell.id].split("@")[1]
    assert by_smoke["host-probe"].host.hostname == "node-7"
    # this interpreter lacks the demo cell's pinned six/idna versions: the smoke says so, and it is a fail
    imports = by_smoke["python-imports"]
    assert imports.status in ("pass", "fail")
    if imports.status == "fail":
        assert imports.reason

    store = tmp_path / "r.sqlite"
    rc = main(["ci", "collect", str(results), "--matrix", str(ROOT / "matrix.toml"), "--results", str(store),
               "--json", str(tmp_path / "rows.json")])
    assert rc == 0 and "collected 2 result(s) from 1 pod(s)" in capsys.readouterr().out
    assert len(ResultsStore(store).query(cell_id=cell.id)) == 2
    assert len(json.loads((tmp_path / "rows.json").read_text())) == 2


# ------------------------------------------------------------------------------------------ workflow example


def test_workflow_example_uses_real_commands_and_matrix_keys(expansion) -> None:
    """docs/workflows/pinmatrix.yml: every pinmatrix command in it parses with this CLI, and every
    ${{ matrix.X }} it reads is a key of `pinmatrix ci github`'s entries."""
    import re
    import shlex

    from pinmatrix.cli import build_parser

    path = ROOT / "docs" / "workflows" / "pinmatrix.yml"
    doc = yaml.safe_load(path.read_text())
    triggers = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` key as true
    assert set(triggers) >= {"push", "pull_request"}
    jobs = doc["jobs"]
    assert list(jobs) == ["cells", "build", "images", "smoke", "report", "promote"]
    assert jobs["smoke"]["runs-on"] == "${{ matrix.runs-on }}"
    assert jobs["promote"]["if"] == ("${{ !cancelled() && needs.cells.result == 'success' && github.ref == "
                                     "'refs/heads/main' && github.event_name != 'pull_request' }}")
    for name in ("build", "promote"):
        assert jobs[name]["strategy"]["matrix"] == "${{ fromJSON(needs.cells.outputs.matrix) }}"
    # the smokes run the pushed images by digest: their matrix is made after the build, with --digests
    assert jobs["smoke"]["strategy"]["matrix"] == "${{ fromJSON(needs.images.outputs.matrix) }}"
    assert "--digests" in jobs["images"]["steps"][-1]["run"] and jobs["images"]["needs"] == ["cells", "build"]

    demo = cells_of(expansion, "demo")
    entry = github_matrix(demo, registry="127.0.0.1:5000/pinmatrix", images=fake_images(demo))["include"][0]
    text = path.read_text()
    for key in re.findall(r"\$\{\{\s*matrix\.([\w-]+)\s*\}\}", text):
        assert key in entry, f"the workflow reads matrix.{key}, which `pinmatrix ci github` does not emit"

    parser = build_parser()
    commands = []
    for job in jobs.values():
        for step in job.get("steps", []):
            for line in str(step.get("run", "")).splitlines():
                for cmd in re.findall(r"(?:^|\$\()\s*(pinmatrix\s[^)\n]*)", line.strip()):
                    commands.append(cmd)
    assert {c.split()[1] for c in commands} >= {"validate", "ci", "build", "smoke", "results", "report", "promote"}
    for cmd in commands:
        cmd = re.sub(r"\$\{\{[^}]*\}\}", "x", cmd).replace("$STACK", "demo")
        argv = [a for a in shlex.split(cmd.split(">>")[0])][1:]
        try:
            parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"{path.name}: `{cmd}` does not parse with this pinmatrix")
