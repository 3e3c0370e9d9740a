"""pinmatrix.release.provenance against a registry in memory (tests/support/memregistry.py): what an image says of
itself (its manifest's source, revision and created annotations, the base layers its config's history names) and
the refusal, one line naming image and key, of an annotation pinmatrix would not write; the SLSA provenance v1
statement, valid against the in-toto bindings and the SLSA Provenance protobuf with a lock and without one; and
verify's reading of it: reported with its builder, subject and count of inputs, refused when it names another
cell. Same World as test_verify.py (one image, a trusted key and another)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1 import resource_descriptor_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from intoto_checks import check_statement
from memregistry import MemoryRegistry, serve_registry
from promotion import CPU_CELL
from sbom_data import LOCK
from test_verify import REPO, World

from pinmatrix.cli import main
from pinmatrix.errors import PinmatrixError
from pinmatrix.imageref import ImageRef
from pinmatrix.registry.client import OCI_MANIFEST
from pinmatrix.release.provenance import (
    BUILD_TYPE,
    BUILDER_ID,
    SLSA_PROVENANCE_PREDICATE,
    ImageFacts,
    image_facts,
    provenance_statement,
)
from pinmatrix.release.sbom import locked_packages

START = datetime(2026, 12, 1, 14, 0, tzinfo=timezone.utc)
END = datetime(2026, 12, 1, 14, 0, 7, tzinfo=timezone.utc)
REVISION = "0123456789abcdef0123456789abcdef01234567"
GOOD = {"org.opencontainers.image.source": "https://forge.example/team/stack.git",
        "org.opencontainers.image.revision": REVISION, "org.opencontainers.image.created": "2025-01-01T00:00:00Z"}


def _image(reg: MemoryRegistry, annotations: Any, history: list[str]) -> ImageRef:
    layers = [reg.add_blob(REPO, f"layer {i}".encode()) for i in range(3)]
    config = json.dumps({"config": {"Labels": {"org.opencontainers.image.base.name": "debian:trixie"}},
                         "history": [{"created_by": f"pinmatrix: {h}"} for h in history]}).encode()
    manifest: dict[str, Any] = {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": reg.add_blob(REPO, config),
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": d, "size": 7}
                   for d in layers]}
    if annotations is not None:
        manifest["annotations"] = annotations
    digest = reg.add_manifest(REPO, json.dumps(manifest).encode(), OCI_MANIFEST)
    return ImageRef(reg.address, REPO, None, digest)


def test_the_facts_are_the_annotations_and_the_layers_the_history_calls_the_base() -> None:
    from pinmatrix.registry.client import Registry

    with serve_registry() as reg:
        image = _image(reg, GOOD, ["base debian:trixie", "base debian:trixie", "venv"])
        facts = image_facts(Registry(reg.address), image)
        manifest = json.loads(reg.manifests[str(image.digest)][0])
        assert (facts.source, facts.revision, facts.created) == (GOOD["org.opencontainers.image.source"], REVISION,
                                                                 "2025-01-01T00:00:00Z")
        assert [(b.name, b.digest) for b in facts.base_layers] == [
            ("debian:trixie", manifest["layers"][0]["digest"]), ("debian:trixie", manifest["layers"][1]["digest"])]
        # a history that does not name each layer once says nothing of the base
        other = _image(reg, None, ["base debian:trixie", "venv"])
        assert image_facts(Registry(reg.address), other) == ImageFacts()


@pytest.mark.parametrize(("annotations", "key"), [
    ({**GOOD, "org.opencontainers.image.revision": "HEAD"}, "org.opencontainers.image.revision"),
    ({**GOOD, "org.opencontainers.image.source": "https://bot:token@forge.example/x.git"},
     "org.opencontainers.image.source"),
    ({**GOOD, "org.opencontainers.image.source": "file:///etc/passwd"}, "org.opencontainers.image.source"),
    ({**GOOD, "org.opencontainers.image.created": "yesterday"}, "org.opencontainers.image.created"),
    ({**GOOD, "org.opencontainers.image.revision": 7}, "org.opencontainers.image.revision"),
    ("not an object", "annotations"),
])
def test_an_annotation_pinmatrix_would_not_write_is_one_line_never_signed(annotations: Any, key: str) -> None:
    from pinmatrix.registry.client import Registry

    with serve_registry() as reg:
        image = _image(reg, annotations, ["base debian:trixie", "venv", "smoke"])
        with pytest.raises(PinmatrixError) as err:
            image_facts(Registry(reg.address), image)
        assert str(err.value).startswith(f"{image}: ") and key in str(err.value) and "\n" not in str(err.value)


def _check(statement: dict[str, Any]) -> provenance_pb2.Provenance:
    """The in-toto bindings' checks, and the predicate parsed strictly by the SLSA v1 model. (A dependency's digest
    may be the DigestSet spec's ``gitCommit``, which intoto_checks' lower-case rule for subjects would refuse.)"""
    check_statement(statement)
    for dep in statement["predicate"]["buildDefinition"]["resolvedDependencies"]:
        ResourceDescriptor.copy_from_pb(json_format.ParseDict(dep, resource_descriptor_pb2.ResourceDescriptor())
                                        ).validate()
        assert dep.get("uri") or dep.get("digest")
    return json_format.ParseDict(statement["predicate"], provenance_pb2.Provenance())


def test_the_statement_is_valid_slsa_provenance_v1_with_a_lock_and_without() -> None:
    image = ImageRef("127.0.0.1:5000", "promoted/demo", None, "sha256:" + "cd" * 32)
    facts = ImageFacts("https://forge.example/x.git", REVISION, "2025-01-01T00:00:00Z")
    statement = provenance_statement(image, CPU_CELL, facts, matrix_sha256="ef" * 32, lock_text=LOCK,
                                     started=START, finished=END)
    pb = _check(statement)
    assert statement["predicateType"] == SLSA_PROVENANCE_PREDICATE
    assert pb.build_definition.build_type == BUILD_TYPE and pb.run_details.builder.id == BUILDER_ID
    assert pb.run_details.metadata.started_on.ToJsonString() == "2026-12-01T14:00:00Z"
    assert pb.run_details.metadata.finished_on.ToJsonString() == "2026-12-01T14:00:07Z"
    deps = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert deps[0] == {"name": "source", "uri": "git+https://forge.example/x.git", "digest": {"gitCommit": REVISION}}
    files = [(f"pkg:pypi/{p.name}@{p.version}", h) for p in locked_packages(LOCK) for h in p.hashes]
    assert [(d["uri"], d["digest"]["sha256"]) for d in deps[1:]] == files and len(files) > len(locked_packages(LOCK))
    bare = provenance_statement(image, CPU_CELL, ImageFacts(), matrix_sha256=None, lock_text=None,
                                started=END, finished=START)  # a clock that went back: finished is not before
    pb = _check(bare)
    assert json_format.MessageToDict(pb.build_definition.external_parameters) == {"cell": CPU_CELL.id,
                                                                                 "stack": CPU_CELL.stack}
    assert list(pb.build_definition.resolved_dependencies) == []
    assert pb.run_details.metadata.finished_on == pb.run_details.metadata.started_on


def test_verify_reports_the_provenance_and_refuses_one_for_another_cell(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    def printed() -> list[str]:
        assert main(["verify", str(world.image), "--key", str(tmp_path / "trusted.pub")]) == 0
        return capsys.readouterr().out.splitlines()[1:]

    with serve_registry() as reg:
        world = World(reg, tmp_path)
        world.attach(world.statement("pass"))
        assert world.verify().ok and world.verify().provenance is None
        assert printed() == ["  no SLSA provenance attached"]
        ours = provenance_statement(world.image, CPU_CELL, ImageFacts(), matrix_sha256=None, lock_text=LOCK,
                                    started=START, finished=END)
        artifact = world.attach(ours)
        result = world.verify()
        assert result.ok, result.problems
        count = sum(len(p.hashes) for p in locked_packages(LOCK))
        assert printed() == [f"  SLSA provenance {artifact}: builder {BUILDER_ID}, subject {world.digest}, "
                             f"{count} inputs"]
        other = json.loads(json.dumps(ours))
        other["predicate"]["buildDefinition"]["externalParameters"]["cell"] = "0123456789ab"
        forged = world.attach(other)
        result = world.verify()
        assert not result.ok and result.problems == [
            f"the signed provenance {forged} is for cell '0123456789ab', not {CPU_CELL.id}"]
