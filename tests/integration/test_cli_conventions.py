"""The conventions a user of command-line tools expects, tried on the real CLI in subprocesses
(``python -m pinmatrix``): --json prints valid JSON on stdout (and nothing else there) for every command that
produces data, ``-`` reads stdin, a closed pipe ends the command quietly, and the embedded registry starts for a
command that needs it and stops when the command ends.

One project for the module: the shipped matrix.toml with its registry moved to a free loopback port (so the
embedded registry of this project serves it), the repository's smoke/ and patches/, a synthetic image pushed for
every demo cell under the tag `pinmatrix ci github` names, and passing results recorded against those digests.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from oci_layout import cell_labels, push_cell_image

from conftest import REPO, require_binaries
from pinmatrix.matrix.selection import load
from pinmatrix.project.smoke_bundle import shipped_file, smoke_bundle
from pinmatrix.registry.local import Endpoint, listening
from pinmatrix.results.store import HostFingerprint, ResultsStore, SmokeRecord

SHIPPED_REGISTRY = 'registry = "127.0.0.1:5000/pinmatrix"'
POOLS = '[[pool]]\nname = "h200"\ngpu_product = "NVIDIA-H200"\ndriver = "580.159.04"\ncapability = "9.0"\n'


def cli(*args: str, cwd: Path, stdin: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pinmatrix", *args], cwd=cwd, input=stdin, capture_output=True,
                          text=True, timeout=timeout, check=False, env={**os.environ, "COLUMNS": "200"})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Project:
    root: Path
    endpoint: Endpoint
    cells: dict[str, str]  # demo cell id -> its build tag
    digests: dict[str, str]  # demo cell id -> pushed digest
    key: Path  # signing key prefix (PREFIX.key / PREFIX.pub)


def make_project(root: Path) -> Project:
    port = free_port()
    text = (REPO / "matrix.toml").read_text()
    assert SHIPPED_REGISTRY in text, "the shipped matrix's registry line moved: update this test"
    (root / "matrix.toml").write_text(text.replace(SHIPPED_REGISTRY, f'registry = "127.0.0.1:{port}/pinmatrix"'))
    for folder in ("smoke", "patches", "images", "locks"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "pools.toml").write_text(POOLS)
    return Project(root, Endpoint("127.0.0.1", port), {}, {}, root / "signing")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    require_binaries("docker-registry", "skopeo")
    proj = make_project(tmp_path_factory.mktemp("conventions"))
    started = cli("registry", "start", cwd=proj.root)
    assert started.returncode == 0, started.stderr
    try:
        jobs = json.loads(cli("ci", "github", "--stack", "demo", "--json", cwd=proj.root).stdout)["include"]
        cells = {c.id: c for c in load(proj.root / "matrix.toml")[1].cells}
        host = HostFingerprint.make(hostname="ci")
        records = []
        for job in jobs:  # an image with the cell's labels under the tag the build would give it
            digest = push_cell_image(proj.root / "layouts" / job["cell"], job["image-tag"], cell_labels(cells[job["cell"]]),
                                     f"demo {job['cell']}")
            proj.cells[job["cell"]], proj.digests[job["cell"]] = job["image-tag"], digest
            records += [SmokeRecord(cell_id=job["cell"], stack="demo", host=host, smoke=smoke, run_id="r1",
                                    status="pass", failure_class=None, reason="", metrics={}, log_path=None,
                                    started_at="2026-11-30T10:00:00Z", finished_at="2026-11-30T10:00:01Z",
                                    duration_s=1.0, known_issue=None, image_digest=digest)
                        for smoke in ("host-probe", "python-imports")]
        ResultsStore(proj.root / ".pinmatrix" / "results.sqlite").record_many(records)
        assert cli("keygen", "--out", str(proj.key), cwd=proj.root).returncode == 0
        promoted = cli("promote", "--stack", "demo", "--signing-key", f"{proj.key}.key", cwd=proj.root)
        assert promoted.returncode == 0, promoted.stdout + promoted.stderr
        yield proj
    finally:
        cli("registry", "stop", cwd=proj.root)


def _promoted(project: Project) -> str:
    from pinmatrix.project.known_good import read_known_good

    return str(read_known_good(project.root / "known-good.toml")[-1]["reference"])


def _pod_run(project: Project) -> list[str]:
    """A pod's output directory, made by running the k8s pod runner on this host (as `ci collect` reads it)."""
    out = project.root / "pod"
    if not (out / "run.json").is_file():
        cell = next(iter(project.cells))
        # the pod sees the ConfigMap: the catalogue with the in-cell runtime beside it
        pod_smoke = project.root / "pod-smoke"
        for name, path in smoke_bundle(project.root / "smoke"):
            (pod_smoke / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, pod_smoke / name)
        ran = subprocess.run([sys.executable, str(shipped_file("pod_runner.py")), "--out", str(out),
                              "--smoke-dir", str(pod_smoke), "--cell-id", cell,
                              "host.py:host-probe:120"], capture_output=True, text=True, timeout=300, check=False)
        assert ran.returncode == 0, ran.stdout + ran.stderr
    return ["ci", "collect", str(out), "--json"]


# Every command that produces data, with --json. Each entry: (id, argv or a function of the project, exit codes).
JSON_COMMANDS = [
    ("validate", ["validate", "--json"], {0}),
    ("cells", ["cells", "--stack", "demo", "--json"], {0}),
    ("lock", lambda p: ["lock", "-k", next(iter(p.cells)), "--json"], {0}),
    ("build-print", ["build", "--stack", "demo", "--print"], {0}),
    ("smoke", ["smoke", "--smoke", "host-probe", "--json"], {0}),
    ("bisect", ["bisect", "param", "cpu-threshold", "--param", "n", "--timeout", "5", "--max-probes", "2", "--json"],
     {0, 1}),
    ("results", ["results", "--stack", "demo", "--json"], {0}),
    ("report", ["report", "--stack", "demo", "--json"], {0}),
    ("promote", ["promote", "--stack", "demo", "--dry-run", "--json", "--force"], {0}),
    ("promote-refused", ["promote", "--stack", "h200", "--json"], {1}),
    ("pull", lambda p: ["pull", "--stack", "demo", "--print", "--json", "--key", f"{p.key}.pub"], {0}),
    ("verify", lambda p: ["verify", _promoted(p), "--key", f"{p.key}.pub", "--json"], {0}),
    ("ci-github", ["ci", "github", "--stack", "demo", "--json"], {0}),
    ("ci-k8s", ["ci", "k8s", "--stack", "demo", "--pools", "pools.toml", "--json"], {0}),
    ("ci-collect", _pod_run, {0}),
    ("registry-status", ["registry", "status", "--json"], {0}),
]


@pytest.mark.registry
@pytest.mark.parametrize(("argv", "codes"), [pytest.param(a, c, id=i) for i, a, c in JSON_COMMANDS])
def test_json_on_stdout(project: Project, argv, codes: set[int]) -> None:  # noqa: ANN001
    args = argv(project) if callable(argv) else argv
    done = cli(*args, cwd=project.root)
    assert done.returncode in codes, done.stdout[-2000:] + done.stderr[-2000:]
    data = json.loads(done.stdout)  # all of stdout is one JSON document: progress went to stderr
    assert data, done.stdout


def test_json_answers(project: Project) -> None:
    """What the JSON says is what happened: promotion outcomes name the tested digests, pull the newest one."""
    plan = json.loads(cli("promote", "--stack", "demo", "--dry-run", "--json", "--force", cwd=project.root).stdout)
    assert {(o["cell"], o["outcome"], o["digest"]) for o in plan} == \
        {(c, "would-promote", d) for c, d in project.digests.items()}
    refused = json.loads(cli("promote", "--stack", "h200", "--json", cwd=project.root).stdout)
    assert refused and all(o["outcome"] == "refused" and o["reasons"] for o in refused)
    pulled = json.loads(cli("pull", "--stack", "demo", "--print", "--json", "--key", f"{project.key}.pub",
                            cwd=project.root).stdout)
    assert pulled["pulled"] is False and pulled["digest"] in project.digests.values()
    assert pulled["reference"].endswith("@" + pulled["digest"])
    status = json.loads(cli("registry", "status", "--json", cwd=project.root).stdout)
    assert status["listening"] and status["served_by"] == "pinmatrix" and status["mode"] == "managed"
    assert status["data_bytes"] > 0
    report = json.loads(cli("report", "--stack", "demo", "--json", cwd=project.root).stdout)
    demo = report["stacks"][0]
    assert demo["description"] and {c["status"] for c in demo["cells"]} == {"pass"}


@pytest.mark.registry
def test_embedded_registry_starts_for_a_command_and_stops_after(tmp_path: Path) -> None:
    """No registry listens: promote starts the project's own (data under .pinmatrix/registry/data), talks to it,
    and stops it when it ends; a managed one (`registry start`) is left running by commands."""
    require_binaries("docker-registry")
    proj = make_project(tmp_path)
    assert not listening(proj.endpoint)
    done = cli("promote", "--stack", "demo", "--dry-run", "--json", cwd=proj.root)
    assert done.returncode == 1  # nothing built or smoked yet: every cell refused, with the registry up
    assert f"started the embedded registry on {proj.endpoint.address}" in done.stderr
    assert all("image" in " ".join(o["reasons"]) or "result" in " ".join(o["reasons"])
               for o in json.loads(done.stdout))
    assert "unreachable" not in done.stdout + done.stderr
    assert not listening(proj.endpoint), "the embedded registry outlived the command that started it"
    assert not (proj.root / ".pinmatrix/registry/registry.json").exists()
    assert (proj.root / ".pinmatrix/registry/config.yml").is_file()

    assert cli("registry", "start", cwd=proj.root).returncode == 0
    try:
        assert listening(proj.endpoint)
        again = cli("promote", "--stack", "demo", "--dry-run", cwd=proj.root)
        assert "started the embedded registry" not in again.stderr
        assert listening(proj.endpoint), "a command stopped the managed registry"
    finally:
        stopped = cli("registry", "stop", cwd=proj.root)
    assert stopped.returncode == 0 and "stopped the registry" in stopped.stdout
    assert not listening(proj.endpoint)


def test_python_m_pinmatrix() -> None:
    done = subprocess.run([sys.executable, "-m", "pinmatrix", "--version"], capture_output=True, text=True,
                          check=False, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("pinmatrix ")


def _big_matrix(path: Path) -> None:
    """A CPU-only stack of 30 x 30 cells: `cells --json` prints far more than a pipe holds."""
    values = ", ".join(f'"1.{i}.0"' for i in range(30))
    path.write_text(
        '[matrix]\nname = "big"\n'
        '[stacks.big]\ndescription = "many cells"\ngpu_required = false\nsmokes = ["host-probe"]\n'
        f"[stacks.big.packages]\nalpha = [{values}]\nbeta = [{values}]\n"
    )


@pytest.mark.parametrize("which", ["shipped", "big"])
def test_closed_pipe_exits_quietly(tmp_path: Path, which: str) -> None:
    """`pinmatrix cells --json | head -1` through a real shell pipe: head's line, nothing on stderr, and the
    status a tool stopped by SIGPIPE has (141) when the pipe closed under it (0 when all fitted in the pipe)."""
    matrix = REPO / "matrix.toml"
    if which == "big":
        matrix = tmp_path / "matrix.toml"
        _big_matrix(matrix)
        size = len(cli("cells", str(matrix), "--json", cwd=tmp_path).stdout)
        assert size > 1 << 18, size  # four times a pipe buffer: the pipe surely closes while pinmatrix writes
    script = f'"{sys.executable}" -m pinmatrix cells "{matrix}" --json | head -1; echo "status=${{PIPESTATUS[0]}}" >&2'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120, check=False,
                          cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.stdout == "{\n"
    assert lines[:-1] == [], done.stderr  # no traceback, no "Exception ignored" line
    assert lines[-1] in ({"status=141"} if which == "big" else {"status=0", "status=141"})


def test_dash_reads_stdin(tmp_path: Path) -> None:
    text = (REPO / "matrix.toml").read_text()
    ok = cli("validate", "-", cwd=REPO, stdin=text)
    assert ok.returncode == 0, ok.stderr
    bad = cli("validate", "-", cwd=REPO, stdin=text.replace("\nregistry = ", "\nregistri = ", 1))
    assert bad.returncode == 2 and bad.stderr.startswith("<stdin>:") and "registri" in bad.stderr
    assert "Traceback" not in bad.stderr
    cells = json.loads(cli("cells", "-", "--stack", "demo", "--json", cwd=REPO, stdin=text).stdout)["cells"]
    host = HostFingerprint.make(hostname="ci")
    rows = [SmokeRecord(cell_id=cells[0]["id"], stack="demo", host=host, smoke="host-probe", run_id="r1",
                        status="pass", failure_class=None, reason="", metrics={}, log_path=None,
                        started_at="2026-11-30T10:00:00Z", finished_at="2026-11-30T10:00:01Z", duration_s=1.0,
                        known_issue=None, image_digest=None).to_dict()]
    report = cli("report", str(REPO / "matrix.toml"), "--results", str(tmp_path / "none.sqlite"), "--from-json", "-",
                 "--out", str(tmp_path / "report"), "--stack", "demo", "--json", cwd=tmp_path, stdin=json.dumps(rows))
    assert report.returncode == 0, report.stderr
    row = next(c for c in json.loads(report.stdout)["stacks"][0]["cells"] if c["id"] == cells[0]["id"])
    assert row["smoke_status"]["host-probe"] == "pass"
    imported = cli("results", "--results", str(tmp_path / "r.sqlite"), "--import", "-", cwd=tmp_path,
                   stdin=json.dumps(rows))
    assert imported.returncode == 0 and "imported 1 record" in imported.stdout
    assert cli("report", "--from-json", "-", cwd=tmp_path, stdin="not json").returncode == 2
