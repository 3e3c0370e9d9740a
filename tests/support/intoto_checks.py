"""Shared by tests/unit/release/test_attest_intoto.py and tests/integration/test_attest_intoto_pushed.py."""

from __future__ import annotations

import re
from typing import Any

from google.protobuf import json_format
from in_toto_attestation.v1 import resource_descriptor_pb2, statement_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import Statement
from promotion import CPU_CELL, record  # noqa: F401 - the fixture

from pinmatrix.release import attest

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
