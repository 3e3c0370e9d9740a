"""Shared by tests in several folders."""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import tomlkit
from oci_layout import cell_labels, push_cell_image
from promotion import _matrix_for, oci_registry, record  # noqa: F401 - the fixture

from conftest import require_binaries
from pinmatrix.cli import main
from pinmatrix.hashing import sha256_digest
from pinmatrix.imageref import ImageRef
from pinmatrix.registry.client import OCI_INDEX, Manifest, Registry, referrers_tag
from pinmatrix.release.attest import DSSE_MEDIA_TYPE, attachments
from pinmatrix.results.store import HostFingerprint, ResultsStore

CPU = HostFingerprint.make(hostname="ci")

@dataclass
class Promoted:
    registry: Registry
    prefix: str
    matrix: Path
    known_good: Path
    host_json: Path
    pub: Path
    cell_id: str
    digest: str
    target: ImageRef  # the promoted repository (no tag)

    def pull(self, *extra: str) -> list[str]:
        return ["pull", "--known-good", str(self.known_good), "--stack", "demo", "--host-json", str(self.host_json),
                "--key", str(self.pub), *extra]

    def verify(self, ref: str, *extra: str) -> list[str]:
        return ["verify", ref, "--key", str(self.pub), *extra]

def _lock_text(cell) -> str:  # noqa: ANN001
    """A lock for the demo cell, in uv's format (the hashes are made up: nothing is installed from it)."""
    lines = [f"# pinmatrix lock for cell {cell.id}: {cell.name}"]
    for name in ("idna", "six"):
        version = cell.pins[name]
        h = hashlib.sha256(f"{name}-{version}".encode()).hexdigest()
        lines += [f"{name}=={version} \\", f"    --hash=sha256:{h}", "    # via -r requirements.in"]
    return "\n".join(lines) + "\n"

def promote_signed(host: str, tmp_path: Path, capsys, name: str,  # noqa: ANN001
                   authfile: Path | None = None, built_from_lock: str | None = None, sign: bool = True) -> Promoted:
    """keygen, an image for the first demo cell (pushed by skopeo, with ``authfile`` if given), passing results
    for it, then `promote --signing-key`. The registry client finds credentials the usual way."""
    from pinmatrix.matrix.selection import load

    require_binaries("skopeo")
    prefix = f"{host}/{name}"
    matrix = _matrix_for(tmp_path, prefix)
    _, expansion = load(matrix)
    cell = next(c for c in expansion.cells if c.stack == "demo")
    lock = _lock_text(cell)
    (tmp_path / "locks").mkdir(exist_ok=True)
    (tmp_path / "locks" / f"{cell.id}.txt").write_text(lock)
    built = built_from_lock if built_from_lock is not None else lock
    labels = {**cell_labels(cell), "io.pinmatrix.lock.sha256": hashlib.sha256(built.encode()).hexdigest()}
    digest = push_cell_image(tmp_path / "layout", f"{prefix}/{cell.stack}:{cell.id}", labels, f"{name} demo image",
                             authfile=authfile)

    assert main(["keygen", "--out", str(tmp_path / "keys" / "signer")]) == 0
    capsys.readouterr()
    store = ResultsStore(tmp_path / "results.sqlite")
    for smoke in cell.smokes:
        store.record(record(cell, smoke, "pass", digest, host=CPU))
    known_good = tmp_path / "known-good.toml"
    signing = ["--signing-key", str(tmp_path / "keys" / "signer.key")] if sign else []
    rc = main(["promote", str(matrix), "--cell", cell.id, "--results", str(store.path), "--known-good",
               str(known_good), *signing])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert f"promoted {cell.id}" in out and ("warning: no signing key" in err) != sign
    print(err, end="", file=sys.stderr)  # the notes, for the caller's capsys
    host_json = tmp_path / "host.json"
    host_json.write_text(json.dumps(CPU.to_dict()))
    return Promoted(Registry(host), prefix, matrix, known_good, host_json, tmp_path / "keys" / "signer.pub", cell.id,
                    digest, ImageRef.parse(f"{prefix}/known-good/demo"))

def _one_line_error(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("pinmatrix: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]

def _set_entry(known_good: Path, **changes: str) -> str:
    """Edit the (only) [[promoted]] entry of known-good.toml; returns the original text."""
    original = known_good.read_text()
    doc = tomlkit.parse(original)
    for key, value in changes.items():
        doc["promoted"][0][key] = value
    known_good.write_text(tomlkit.dumps(doc))
    return original

def _referrers_index(p: Promoted) -> Manifest:
    index = p.registry.get_manifest(p.target.repository, referrers_tag(p.digest))
    assert index is not None
    return index

def _replace_referrer(p: Promoted, old: str, envelope: bytes, predicate: str) -> None:
    """What an attacker with push access does: push another artifact for the image and make the referrers
    index list it instead of ``old``."""
    reg, repo = p.registry, p.target.repository
    subject = reg.get_manifest(repo, p.digest)
    new = reg.push_artifact(repo, subject, artifact_type=DSSE_MEDIA_TYPE, payload=envelope,
                            payload_media_type=DSSE_MEDIA_TYPE, annotations={"in-toto.io/predicate-type": predicate})
    index = _referrers_index(p)
    doc = index.json
    doc["manifests"] = [m for m in doc["manifests"] if m["digest"] not in (old, new)] + \
        [next(m for m in doc["manifests"] if m["digest"] == new)]
    body = json.dumps(doc).encode()
    reg.put_manifest(repo, referrers_tag(p.digest), Manifest(body, OCI_INDEX, sha256_digest(body)))

def _envelope_of(p: Promoted, predicate: str) -> tuple[str, dict]:
    att = next(a for a in attachments(p.registry, p.target.with_digest(p.digest)) if a.predicate_type == predicate)
    return att.digest, json.loads(att.content)
