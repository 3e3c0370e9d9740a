"""GPU hosts sign what they ran, end to end through the CLI against Debian's docker-registry: `keygen --host`,
`results --export-signed` on the "GPU host", a stack whose policy names the host's key in trusted_hosts;
`promote` refuses while the store holds only unsigned results (one line naming the smoke and why), and after
`results --import-signed --key` promotes, attaching the host's envelope next to the project's evidence;
`verify` prints who ran what. A forged signed file is refused at import, in one line, and imports nothing."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from evidence import CPU, Promoted, _one_line_error, _replace_referrer
from oci_layout import cell_labels, push_cell_image
from promotion import _matrix_for, oci_registry, record  # noqa: F401 - the fixture

from conftest import require_binaries
from pinmatrix.cli import main
from pinmatrix.imageref import ImageRef
from pinmatrix.registry.client import Registry
from pinmatrix.release.attest import TEST_RESULT_PREDICATE, attachments
from pinmatrix.results.store import ResultsStore

pytestmark = [pytest.mark.registry]


def _setup(host: str, tmp_path: Path, capsys, name: str):  # noqa: ANN001, ANN202
    from pinmatrix.matrix.selection import load

    require_binaries("skopeo")
    prefix = f"{host}/{name}"
    (tmp_path / "keys").mkdir()
    assert main(["keygen", "--host", "--out", str(tmp_path / "keys" / "h200")]) == 0
    assert main(["keygen", "--out", str(tmp_path / "keys" / "project")]) == 0
    capsys.readouterr()
    matrix = _matrix_for(tmp_path, prefix, promotion='[stacks.demo.promotion]\ntrusted_hosts = ["keys/h200.pub"]\n')
    _, expansion = load(matrix)
    cell = next(c for c in expansion.cells if c.stack == "demo")
    digest = push_cell_image(tmp_path / "layout", f"{prefix}/{cell.stack}:{cell.id}", cell_labels(cell),
                             f"{name} demo image")
    gpu_store = ResultsStore(tmp_path / "gpu-host.sqlite")  # what the GPU host recorded
    for smoke in cell.smokes:
        gpu_store.record(record(cell, smoke, "pass", digest, host=CPU))
    return prefix, matrix, cell, digest, gpu_store


def _promote(matrix: Path, cell_id: str, tmp_path: Path, store: Path) -> list[str]:
    return ["promote", str(matrix), "--cell", cell_id, "--results", str(store), "--known-good",
            str(tmp_path / "known-good.toml"), "--signing-key", str(tmp_path / "keys" / "project.key")]


def test_a_promotion_under_trusted_hosts_carries_the_host_signed_results(oci_registry: str, tmp_path: Path,  # noqa: F811
                                                                         capsys) -> None:
    prefix, matrix, cell, digest, gpu_store = _setup(oci_registry, tmp_path, capsys, "hs-ok")
    signed = tmp_path / "signed.json"
    assert main(["results", "--results", str(gpu_store.path), "--cell", cell.id, "--export-signed", str(signed),
                 "--host-key", str(tmp_path / "keys" / "h200.key")]) == 0
    capsys.readouterr()

    # the same results imported plainly: promotion under trusted_hosts does not count them
    store = ResultsStore(tmp_path / "results.sqlite")
    store.record_many(gpu_store.query())
    assert main(_promote(matrix, cell.id, tmp_path, store.path)) == 1
    line = _one_line_error(capsys.readouterr().err)
    assert f"missing result: smoke '{cell.smokes[0]}' has no result on any host (its recorded result does not " \
           "count: unsigned: no envelope signed by a trusted host carries it)" in line

    assert main(["results", "--results", str(store.path), "--import-signed", str(signed), "--key",
                 str(tmp_path / "keys" / "h200.pub")]) == 0
    assert f"cell {cell.id} image {digest} on host {CPU.id}" in capsys.readouterr().out
    assert main(_promote(matrix, cell.id, tmp_path, store.path)) == 0
    out = capsys.readouterr().out
    assert f"promoted {cell.id}" in out and ", host-signed sha256:" in out

    target = ImageRef.parse(f"{prefix}/known-good/demo")
    found = attachments(Registry(oci_registry), target.with_digest(digest))
    assert [a.predicate_type for a in found].count(TEST_RESULT_PREDICATE) == 2  # the project's and the host's
    host_artifact = out.split(", host-signed ")[1].split(")")[0]
    assert host_artifact in {a.digest for a in found}

    rc = main(["verify", f"{target.name}:known-good", "--key", str(tmp_path / "keys" / "project.pub")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    (host_line,) = [ln for ln in out.splitlines() if ln.startswith("  host-signed ")]
    assert host_line.startswith(f"  host-signed {host_artifact}: host key ")
    assert f"host {CPU.id} (" in host_line and f"cell {cell.id}: {len(cell.smokes)} pass: " in host_line
    assert all(f"{s} pass" in host_line for s in cell.smokes)
    rc = main(["verify", f"{target.name}:known-good", "--key", str(tmp_path / "keys" / "project.pub"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["hosts"][0]["host"]["id"] == CPU.id and doc["hosts"][0]["attestation"] == host_artifact


    # the host's envelope swapped for one whose payload was edited (a failed smoke turned into a pass): refused
    envelope = json.loads(next(a.content for a in found if a.digest == host_artifact))
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["passedTests"].append("made-up-smoke")
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    promoted = Promoted(Registry(oci_registry), prefix, matrix, tmp_path / "known-good.toml", tmp_path,
                        tmp_path / "keys" / "project.pub", cell.id, digest, target)
    _replace_referrer(promoted, host_artifact, json.dumps(envelope).encode(), TEST_RESULT_PREDICATE)
    assert main(promoted.verify(f"{target.name}:known-good")) == 1
    line = _one_line_error(capsys.readouterr().err)
    assert "host-signed attestation sha256:" in line and "does not verify (payload edited?)" in line


def test_a_forged_signed_file_is_refused_at_import_and_imports_nothing(oci_registry: str, tmp_path: Path,  # noqa: F811
                                                                       capsys) -> None:
    _, _, cell, _, gpu_store = _setup(oci_registry, tmp_path, capsys, "hs-forged")
    signed = tmp_path / "signed.json"
    assert main(["results", "--results", str(gpu_store.path), "--export-signed", str(signed),
                 "--host-key", str(tmp_path / "keys" / "h200.key")]) == 0
    capsys.readouterr()
    (envelope,) = json.loads(signed.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["pinmatrixRecords"][0]["status"] = "fail"  # edited after signing
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    signed.write_text(json.dumps([envelope]))
    store = tmp_path / "results.sqlite"
    rc = main(["results", "--results", str(store), "--import-signed", str(signed), "--key",
               str(tmp_path / "keys" / "h200.pub")])
    line = _one_line_error(capsys.readouterr().err)
    assert rc == 2 and f"{signed}: envelope 1: the signature by trusted key " in line and "does not verify" in line
    assert not store.exists() and not (tmp_path / "results-signed").exists()  # nothing written
