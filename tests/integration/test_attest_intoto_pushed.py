"""The in-toto statements promote pushed to a registry are valid (checked against the in-toto v1 models)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from evidence import promote_signed
from intoto_checks import check_statement
from promotion import CPU_CELL, record  # noqa: F401 - the fixture

from pinmatrix.release import attest
from pinmatrix.release.provenance import SLSA_PROVENANCE_PREDICATE


@pytest.mark.registry
def test_the_statements_promote_pushed_are_valid(oci_registry: str, tmp_path: Path, capsys) -> None:  # noqa: F811
    promoted = promote_signed(oci_registry, tmp_path, capsys, "intoto")
    image = promoted.target.with_digest(promoted.digest)
    found = attest.attachments(promoted.registry, image)
    assert {a.predicate_type for a in found} == {attest.TEST_RESULT_PREDICATE, attest.SBOM_PREDICATE,
                                                 SLSA_PROVENANCE_PREDICATE}
    for att in found:
        assert att.media_type == attest.DSSE_MEDIA_TYPE
        envelope = json.loads(att.content)
        assert envelope["payloadType"] == attest.IN_TOTO_MEDIA_TYPE
        statement = json.loads(base64.b64decode(envelope["payload"]))
        check_statement(statement)
        assert statement["subject"][0]["digest"] == {"sha256": promoted.digest.split(":", 1)[1]}
