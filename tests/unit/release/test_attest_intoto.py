"""The in-toto statements pinmatrix writes (``pinmatrix.release.attest``) are valid against the in-toto attestation
models (``in_toto_attestation.v1``, the framework's own protobuf bindings): parsed strictly into ``Statement``
(an unknown field is an error), ``Statement.validate()``, every ResourceDescriptor parsed and validated, and the v1
rule the bindings of 0.9.3 do not check yet (a descriptor MUST have a uri, digest or content). The test-result
predicate's fields have the types its spec (test-result v0.1) gives them. Checked for statements made in memory
and for the ones `pinmatrix promote` signed and pushed to a registry (DSSE payloads read back from it)."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest
from evidence import promote_signed
from google.protobuf import json_format
from in_toto_attestation.v1 import resource_descriptor_pb2, statement_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import Statement
from promotion import CPU_CELL, record  # noqa: F401 - the fixture

from pinmatrix.hashing import sha256_bytes
from pinmatrix.imageref import ImageRef
from pinmatrix.release import attest
from pinmatrix.results.store import HostFingerprint

DIGEST = "sha256:" + "cd" * 32
IMAGE = ImageRef.parse(f"127.0.0.1:5000/promoted/demo@{DIGEST}")
RESULTS = ("PASSED", "WARNED", "FAILED")


def check_descriptor(doc: dict[str, Any], where: str) -> None:
    """A v1 ResourceDescriptor: strictly parsed, the bindings' validate(), a uri, digest or content, and each
    digest a lower-case algorithm name with a lower-case hex value."""
    pb = json_format.ParseDict(doc, resource_descriptor_pb2.ResourceDescriptor())
    rd = ResourceDescriptor.copy_from_pb(pb)
    rd.validate()
    if not (rd.pb.uri or len(rd.pb.digest) or rd.pb.content):
        raise ValueError(f"{where}: a ResourceDescriptor MUST have a uri, digest or content")
    for alg, value in rd.pb.digest.items():
        if not re.fullmatch(r"[a-z0-9_-]+", alg) or not re.fullmatch(r"[0-9a-f]+", value):
            raise ValueError(f"{where}: digest {alg}: {value!r} is not a lower-case algorithm and hex value")


def check_statement(doc: dict[str, Any]) -> None:
    """The statement against the in-toto v1 models; raises (ValueError, ParseError) when it is not valid."""
    pb = json_format.ParseDict(doc, statement_pb2.Statement())
    Statement.copy_from_pb(pb).validate()
    for i, subject in enumerate(doc["subject"]):
        check_descriptor(subject, f"subject[{i}]")
    if doc["predicateType"] == attest.TEST_RESULT_PREDICATE:
        predicate = doc["predicate"]
        if predicate.get("result") not in RESULTS:
            raise ValueError(f"predicate.result {predicate.get('result')!r} is not one of {RESULTS}")
        for key in ("passedTests", "warnedTests", "failedTests"):
            if not all(isinstance(t, str) for t in predicate.get(key, [])):
                raise ValueError(f"predicate.{key} is not a list of strings")
        if not isinstance(predicate.get("url", ""), str):
            raise ValueError("predicate.url is not a string")
        for i, item in enumerate(predicate.get("configuration", [])):
            check_descriptor(item, f"predicate.configuration[{i}]")


def _host(name: str, driver: str) -> HostFingerprint:
    return HostFingerprint.make(hostname=name, gpu_name="NVIDIA H200", gpu_count=1, driver=driver, capability="9.0",
                                cuda_driver_api="13.0")


def test_the_test_result_statement_is_a_valid_in_toto_v1_statement() -> None:
    records = [record(CPU_CELL, "host-probe", "pass", DIGEST, host=_host("a", "580.1")),
               record(CPU_CELL, "host-probe", "xfail", DIGEST, host=_host("b", "590.2")),
               record(CPU_CELL, "cpu-threshold", "fail", DIGEST, host=_host("a", "580.1"))]
    statement = attest.test_result_statement(IMAGE, CPU_CELL, records, url="https://ci.example/run/1",
                                             policy={"require": ["host-probe"], "min_hosts": 1})
    check_statement(statement)
    configuration = statement["predicate"]["configuration"]
    assert [c["name"] for c in configuration][0] == f"pinmatrix-cell/{CPU_CELL.id}"
    assert len(configuration) == 4  # the cell, two hosts, the policy
    for item in configuration:  # the digest names the annotations it describes
        assert item["digest"] == {"sha256": sha256_bytes(attest.canonical(item["annotations"]))}
    # an empty run is still a valid statement
    check_statement(attest.test_result_statement(IMAGE, CPU_CELL, []))


def test_the_sbom_statement_is_a_valid_in_toto_v1_statement() -> None:
    from sbom_data import LOCK, MOMENT

    from pinmatrix.release.sbom import cell_bom

    statement = attest.sbom_statement(IMAGE, cell_bom(CPU_CELL, LOCK, moment=MOMENT))
    check_statement(statement)
    assert statement["predicateType"] == "https://cyclonedx.org/bom"


@pytest.mark.parametrize(("change", "message"), [
    # what attest.py wrote before: a configuration descriptor with a name only
    (lambda s: s["predicate"]["configuration"][0].pop("digest"), "MUST have a uri, digest or content"),
    (lambda s: s["subject"][0].pop("digest"), "At least one digest required"),
    (lambda s: s.update(_type="https://in-toto.io/Statement/v0.1"), "Wrong statement type"),
    (lambda s: s.update(extra=1), "no field named \"extra\""),
    (lambda s: s["predicate"].update(result="OK"), "is not one of"),
    (lambda s: s["predicate"]["configuration"][0].update(digest={"sha256": "AB"}), "lower-case"),
    (lambda s: s["predicate"]["configuration"][0].update(annotations="x"), "annotations"),
])
def test_the_check_refuses_what_the_spec_refuses(change, message: str) -> None:  # noqa: ANN001
    statement = attest.test_result_statement(IMAGE, CPU_CELL, [record(CPU_CELL, "host-probe", "pass", DIGEST)])
    check_statement(json.loads(json.dumps(statement)))
    broken = json.loads(json.dumps(statement))
    change(broken)
    with pytest.raises((ValueError, json_format.ParseError), match=re.escape(message)):
        check_statement(broken)


@pytest.mark.registry
def test_the_statements_promote_pushed_are_valid(oci_registry: str, tmp_path: Path, capsys) -> None:  # noqa: F811
    promoted = promote_signed(oci_registry, tmp_path, capsys, "intoto")
    image = promoted.target.with_digest(promoted.digest)
    found = attest.attachments(promoted.registry, image)
    assert {a.predicate_type for a in found} == {attest.TEST_RESULT_PREDICATE, attest.SBOM_PREDICATE}
    for att in found:
        assert att.media_type == attest.DSSE_MEDIA_TYPE
        envelope = json.loads(att.content)
        assert envelope["payloadType"] == attest.IN_TOTO_MEDIA_TYPE
        statement = json.loads(base64.b64decode(envelope["payload"]))
        check_statement(statement)
        assert statement["subject"][0]["digest"] == {"sha256": promoted.digest.split(":", 1)[1]}
