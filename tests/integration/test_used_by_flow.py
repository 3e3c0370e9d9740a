"""The used-by flow out of the box, as ./dev runs it, on a project whose matrix names a loopback registry that
nothing serves: every command that needs the registry starts the project's embedded one and stops it again.

build (no push) -> smoke in the local image -> build --push -> smoke again: the pushed image has another digest,
so its smokes run again instead of "already recorded" -> smoke once more: now "already recorded" -> report
(JUnit valid against the xunit2 schema) -> promote, no --rerun anywhere -> drop the local images -> pull the
known-good image by digest -> run a command in it. `smoke --stack demo` passes over the cells that were never
built, names them and exits 1, after smoking the one that was.

Real components only: podman/buildah with the session's private storage, Debian's docker-registry started by
pinmatrix itself, the shared base root filesystem cache, the package index for the demo's two wheels.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from test_cli_conventions import make_project

from conftest import REPO, require_binaries
from pinmatrix.cli import main
from pinmatrix.imageref import ImageRef
from pinmatrix.registry.local import listening
from pinmatrix.results.store import ResultsStore

pytestmark = [pytest.mark.slow, pytest.mark.podman, pytest.mark.registry, pytest.mark.network]


def podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=600, check=False)


def test_build_push_smoke_promote_pull_with_the_embedded_registry(podman_env, build_cache: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    require_binaries("podman", "buildah", "mmdebstrap", "docker-registry", "runc")
    for key, value in podman_env.env.items():
        monkeypatch.setenv(key, value)
    (tmp_path / "project").mkdir()
    project = make_project(tmp_path / "project")
    monkeypatch.chdir(project.root)
    jobs = json.loads(_run(capsys, ["ci", "github", "--stack", "demo"])[1])["include"]
    cell, image = jobs[0]["cell"], jobs[0]["image-tag"]
    others = [j["cell"] for j in jobs[1:]]
    build = ["build", "--stack", "demo", "-k", cell, "--engine", "podman", "--cache-dir", str(build_cache)]
    assert not listening(project.endpoint)

    # 1. build without pushing, smoke the stack: the local image is smoked, the cells never built are named
    rc, out, err = _run(capsys, build)
    assert rc == 0, err[-3000:]
    rc, out, err = _run(capsys, ["smoke", "--stack", "demo", "--runtime", "podman"])
    assert rc == 1, out + err  # some cells had no image
    for other in others:
        assert f"no image: cell {other}" in err
    store = ResultsStore(project.root / ".pinmatrix" / "results.sqlite")
    local = {r.image_digest for r in store.query(cell_id=cell)}
    assert len(local) == 1 and {r.status for r in store.query(cell_id=cell)} == {"pass"}, out

    # 2. push: the embedded registry serves the push and stops with the command; its data stays
    rc, out, err = _run(capsys, [*build, "--push"])
    assert rc == 0, err[-3000:]
    assert "started the embedded registry" in err
    assert not listening(project.endpoint)
    assert any((project.root / ".pinmatrix/registry/data").rglob("data")), "no blob stored"

    # 3. smoke the pushed image. Results follow the digest: they are "already recorded" only when the pushed
    # manifest is the very one smoked before; any other digest is smoked again. Either way the registry's
    # digest ends up with results, without --rerun.
    rc, out, err = _run(capsys, ["smoke", "--cell", cell, "--runtime", "podman"])
    assert rc == 0, out + err
    after = {r.image_digest for r in store.query(cell_id=cell)}
    (digest,) = after - local if after - local else local
    if digest in local:
        assert out.count(f"already recorded for this cell and host on image {digest}") == 2, out
    else:
        assert "already recorded" not in out, out
    rc, out, err = _run(capsys, ["smoke", "--cell", cell, "--runtime", "podman"])
    assert rc == 0 and out.count(f"already recorded for this cell and host on image {digest}") == 2, out

    # 4. report: the cell passes; junit.xml is valid xunit2
    rc, out, err = _run(capsys, ["report", "--stack", "demo", "--json"])
    assert rc == 0, err
    row = next(c for c in json.loads(out)["stacks"][0]["cells"] if c["id"] == cell)
    assert row["status"] == "pass" and digest in row["image_digests"]
    import xmlschema

    schema = xmlschema.XMLSchema(REPO / "tests" / "data" / "junit-10.xsd")
    schema.validate(str(project.root / ".pinmatrix" / "report" / "junit.xml"))

    # 5. promote by digest, with no --rerun anywhere
    rc, out, err = _run(capsys, ["keygen", "--out", str(project.key)])
    assert rc == 0, err
    rc, out, err = _run(capsys, ["promote", "--cell", cell, "--signing-key", f"{project.key}.key", "--json"])
    assert rc == 0, out + err
    (promoted,) = json.loads(out)
    assert promoted["outcome"] == "promoted" and promoted["digest"] == digest

    # 6. nothing local any more: pull the known-good image by digest, run a command in it
    for ref in (image, ImageRef.parse(image).with_digest(digest)):
        podman("rmi", "--force", str(ref))
    listing = podman("images", "--digests", "--format", "{{.ID}} {{.Digest}}").stdout.splitlines()
    for image_id in {line.split()[0] for line in listing if line.strip().endswith(digest)}:
        podman("rmi", "--force", image_id)
    rc, out, err = _run(capsys, ["pull", "--stack", "demo", "--engine", "podman", "--key", f"{project.key}.pub"])
    assert rc == 0, err
    reference = out.strip()
    assert reference.endswith("@" + digest)
    ran = podman("run", "--rm", "--network=none", reference, "/opt/venv/bin/python", "-c",
                 "import six, idna; print(six.__version__, idna.__version__)")
    assert ran.returncode == 0, ran.stderr
    pins = next(c["pins"] for c in json.loads(_run(capsys, ["cells", "--stack", "demo", "--json"])[1])["cells"]
                if c["id"] == cell)
    assert ran.stdout.split() == [pins["six"], pins["idna"]]
    assert not listening(project.endpoint)


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    rc = main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err
