"""The in-toto statements pinmatrix writes (``pinmatrix.release.attest``) are valid against the in-toto attestation
models (``in_toto_attestation.v1``, the framework's own protobuf bindings): parsed strictly into ``Statement``
(an unknown field is an error), ``Statement.validate()``, every ResourceDescriptor parsed and validated, and the v1
rule the bindings of 0.9.3 do not check yet (a descriptor MUST have a uri, digest or content). The test-result
predicate's fields have the types its spec (test-result v0.1) gives them. For statements made in memory; the
ones `pinmatrix promote` pushed to a registry: tests/integration/test_attest_intoto_pushed.py."""

from __future__ import annotations

import json
import re

import pytest
from google.protobuf import json_format
from intoto_checks import check_statement
from promotion import CPU_CELL, record  # noqa: F401 - the fixture

from pinmatrix.hashing import sha256_bytes
from pinmatrix.imageref import ImageRef
from pinmatrix.release import attest
from pinmatrix.results.store import HostFingerprint

DIGEST = "sha256:" + "cd" * 32
IMAGE = ImageRef.parse(f"127.0.0.1:5000/promoted/demo@{DIGEST}")


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


