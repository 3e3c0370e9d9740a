"""End to end on the demo stack, in one test, through the CLI:
build (podman/buildah, mmdebstrap base) -> push -> smoke in the image -> (the cell's Kubernetes Job command,
run in the image, then `ci collect`) -> report -> promote by digest (signed attestation and SBOM) -> drop the
local image -> verified pull by digest from the local registry -> run the pulled image.

Real components only: the session's docker-registry and private podman storage (tests/conftest.py), the
shared base root filesystem cache, the package index for the demo's two wheels.
"""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from helpers import fetch_statements
from packageurl import PackageURL

from conftest import require_binaries
from pinmatrix.cli import main
from pinmatrix.imageref import ImageRef
from pinmatrix.matrix.selection import load
from pinmatrix.project.known_good import read_known_good
from pinmatrix.registry.client import Registry
from pinmatrix.release.attest import SBOM_PREDICATE
from pinmatrix.results.store import ResultsStore

ROOT = Path(__file__).resolve().parents[2]
NEEDED = ("podman", "buildah", "mmdebstrap", "docker-registry", "runc")

pytestmark = [pytest.mark.slow, pytest.mark.podman, pytest.mark.registry, pytest.mark.network]


@pytest.fixture()
def podman_here(podman_env, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN001 - conftest's Service
    """conftest's private podman storage, for the CLI and the podman calls of this test."""
    require_binaries(*NEEDED)
    for key, value in podman_env.env.items():
        monkeypatch.setenv(key, value)
    return podman_env


def podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=600, check=False)


def test_build_smoke_report_promote_pull(oci_registry: str, podman_here, build_cache: Path, tmp_path: Path,  # noqa: F811
                                         monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    matrix = str(ROOT / "matrix.toml")
    prefix = f"{oci_registry}/e2e"
    _, expansion = load(ROOT / "matrix.toml")
    cell = next(c for c in expansion.cells if c.stack == "demo")
    results = tmp_path / "results.sqlite"
    known_good = tmp_path / "known-good.toml"

    # build and push
    rc = main(["build", matrix, "--stack", "demo", "-k", cell.id, "--engine", "podman", "--push",
               "--registry", prefix, "--cache-dir", str(build_cache), "--logs-dir", str(tmp_path / "logs")])
    out = capsys.readouterr()
    assert rc == 0, out.out[-2000:] + out.err[-2000:]
    registry = Registry(oci_registry)
    tag = ImageRef.parse(f"{prefix}/demo:{cell.id}")
    digest = registry.resolve(tag)
    assert digest is not None
    # smoking the freshly built image by its tag records the pushed digest, not podman's local one
    from pinmatrix.engine import get_engine
    from pinmatrix.smoke.container import image_digest

    assert image_digest(get_engine("podman"), str(tag)) == digest

    # smoke exactly the pushed image: pulled by digest, as a GPU runner would (podman's local manifest digest of
    # the image it built differs from the pushed, recompressed one; the registry's is what gets promoted)
    pulled = podman("pull", "--tls-verify=false", str(tag.with_digest(digest)))
    assert pulled.returncode == 0, pulled.stderr
    rc = main(["smoke", matrix, "--cell", cell.id, "--runtime", "podman", "--image", str(tag.with_digest(digest)),
               "--results", str(results), "--logs", str(tmp_path / "smoke-logs"), "--smoke-dir", str(ROOT / "smoke")])
    out = capsys.readouterr().out
    assert rc == 0, out
    records = ResultsStore(results).query(cell_id=cell.id)
    assert {r.smoke: r.status for r in records} == {"host-probe": "pass", "python-imports": "pass"}, out
    assert {r.image_digest for r in records} == {digest}
    # each smoke container had the image's kernel cache folder mounted (smoke/kernel_cache.py)
    assert {r.environment.get("kernel_cache") for r in records} == {"keep"}
    assert f"kernel-cache/{digest[7:]}" in out

    # the Kubernetes Job for this cell, its container command run in the image as the pod would run it
    # (ConfigMap files at the smoke mount, a directory as the results volume), then `pinmatrix ci collect`
    from pinmatrix.ci.k8s import RESULTS_MOUNT, SMOKE_MOUNT, k8s_manifests

    emitted = k8s_manifests([cell], [], {cell.id: str(tag.with_digest(digest))}, smoke_dir=ROOT / "smoke",
                            run_id="e2e")
    configmap, job = emitted.documents
    mount, volume = tmp_path / "configmap", tmp_path / "pvc"
    mount.mkdir()
    volume.mkdir()
    for name, text in configmap["data"].items():
        (mount / name).write_text(text)
    container = job["spec"]["template"]["spec"]["containers"][0]
    env_args = [a for e in container["env"] if "value" in e for a in ("-e", f"{e['name']}={e['value']}")]
    pod = podman("run", "--rm", "--network=none", "-v", f"{mount}:{SMOKE_MOUNT}:ro", "-v", f"{volume}:{RESULTS_MOUNT}",
                 *env_args, "-e", "PINMATRIX_NODE_NAME=e2e-node", container["image"], *container["command"])
    assert pod.returncode == 0, pod.stdout + pod.stderr
    rc = main(["ci", "collect", str(volume), "--matrix", matrix, "--json", str(tmp_path / "k8s.json")])
    assert rc == 0, capsys.readouterr().err
    k8s_rows = json.loads((tmp_path / "k8s.json").read_text())
    assert {(r["smoke"], r["status"]) for r in k8s_rows} == {("host-probe", "pass"), ("python-imports", "pass")}
    assert {r["image_digest"] for r in k8s_rows} == {digest}
    assert {r["host"]["hostname"] for r in k8s_rows} == {"e2e-node"}
    capsys.readouterr()

    # report
    rc = main(["report", matrix, "--results", str(results), "--out", str(tmp_path / "report"), "--stack", "demo"])
    assert rc == 0
    junit = ET.parse(tmp_path / "report" / "junit.xml").getroot()
    cases = {(c.get("classname"), c.get("name")): c for c in junit.iter("testcase")}
    assert (f"demo.{cell.id}", "python-imports") in cases
    assert cases[(f"demo.{cell.id}", "python-imports")].find("failure") is None
    data = json.loads((tmp_path / "report" / "report.json").read_text())
    row = next(c for c in data["stacks"][0]["cells"] if c["id"] == cell.id)
    assert row["status"] == "pass" and row["image_digests"] == [digest]
    assert "🟢 pass" in (tmp_path / "report" / "summary.md").read_text()

    # promote by digest, the evidence signed with a key made here
    assert main(["keygen", "--out", str(tmp_path / "signing")]) == 0
    rc = main(["promote", matrix, "--cell", cell.id, "--results", str(results), "--registry", prefix,
               "--known-good", str(known_good), "--signing-key", str(tmp_path / "signing.key"),
               "--cache-dir", str(build_cache)])
    out = capsys.readouterr()
    assert rc == 0, out.err
    entry = read_known_good(known_good)[0]
    promoted = ImageRef.parse(f"{prefix}/known-good/demo")
    assert entry["digest"] == digest and entry["reference"] == f"{promoted.name}@{digest}"
    assert registry.resolve(promoted.with_tag("known-good")) == digest
    statement = fetch_statements(registry, promoted.with_digest(digest))[0]
    assert statement["predicate"]["result"] == "PASSED"
    assert sorted(t.split(" [")[0] for t in statement["predicate"]["passedTests"]) == ["host-probe", "python-imports"]
    # the SBOM: the two wheels and the Debian packages of the mmdebstrap base, valid CycloneDX 1.6; the base and
    # every wheel were found (no note)
    assert "note: cell" not in out.err, out.err
    [sbom] = fetch_statements(registry, promoted.with_digest(digest), SBOM_PREDICATE)
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(sbom["predicate"])) is None
    purls = {c["purl"] for c in sbom["predicate"]["components"]}
    assert {f"pkg:pypi/six@{cell.pins['six']}", f"pkg:pypi/idna@{cell.pins['idna']}"} <= purls
    debs = {PackageURL.from_string(p).name for p in purls if p.startswith("pkg:deb/debian/")}
    assert {"base-files", "dpkg", "python3", "ca-certificates"} <= debs, sorted(debs)

    # nothing local: the pull must fetch from the registry, by digest. Builds are reproducible, so an
    # earlier test of the session may hold the same image under another name: remove it by image id.
    for ref in (str(tag), str(tag.with_digest(digest))):
        podman("rmi", "--force", ref)
    listing = podman("images", "--digests", "--format", "{{.ID}} {{.Digest}}").stdout.split("\n")
    for image_id in {line.split()[0] for line in listing if line.strip().endswith(digest)}:
        podman("rmi", "--force", image_id)
    assert digest not in podman("images", "--digests", "--format", "{{.Digest}}").stdout
    rc = main(["pull", "--known-good", str(known_good), "--stack", "demo", "--engine", "podman",
               "--key", str(tmp_path / "signing.pub")])
    out = capsys.readouterr()
    assert rc == 0, out.err
    reference = out.out.strip()
    assert reference == f"{promoted.name}@{digest}"
    ran = podman("run", "--rm", "--network=none", reference, "/opt/venv/bin/python", "-c",
                 "import six, idna; print(six.__version__, idna.__version__)")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == [cell.pins["six"], cell.pins["idna"]]


def test_smoke_records_the_digest_its_reference_names() -> None:
    """The digest the smokes record is the one promotion checks against the registry: for a reference by
    digest it is that digest, whatever order the engine lists the image's repo digests in."""
    from pinmatrix.engine import ImageInfo
    from pinmatrix.smoke.container import image_digest

    a, b, c = ("sha256:" + x * 64 for x in "abc")

    class Engine:
        def inspect(self, ref: str) -> ImageInfo | None:
            return ImageInfo(id="sha256:" + "f" * 64, labels={}, env=(), size=0,
                             repo_digests=(f"127.0.0.1:1/other/demo@{a}", f"127.0.0.1:5000/e2e/demo@{b}",
                                           f"127.0.0.1:5000/e2e/demo@{c}"))

    engine = Engine()
    assert image_digest(engine, f"127.0.0.1:5000/e2e/demo@{c}") == c  # type: ignore[arg-type]
    assert image_digest(engine, "127.0.0.1:5000/e2e/demo:d29a728f476e") == b  # type: ignore[arg-type]
