"""GPU hosts sign what they ran: the export, the envelope's checks, the import (all or nothing) and what
promotion counts under trusted_hosts, each refusal one line naming the smoke or envelope and why."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from promotion import GPU_CELL, record

from pinmatrix.project.policy import PromotionPolicy
from pinmatrix.release.hostsign import (
    HostSignatureError,
    host_key_descriptors,
    import_signed,
    named_host_keys,
    open_all,
    open_host_envelope,
    signed_exports,
    signed_only,
)
from pinmatrix.release.promote import check_policy
from pinmatrix.release.signing import generate_keypair, load_public_key, load_signer
from pinmatrix.results.signedfile import kept_envelopes
from pinmatrix.results.store import ResultsStore

DIGEST = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64


def _pair(tmp_path: Path, name: str):  # noqa: ANN202
    private, public, _ = generate_keypair(tmp_path / name)
    return load_signer(private), load_public_key(public)


def _records(digest: str = DIGEST, status: str = "pass"):  # noqa: ANN202
    return [record(GPU_CELL, smoke, status, digest) for smoke in GPU_CELL.smokes]


def _envelope(signer, records) -> bytes:  # noqa: ANN001
    (env,) = signed_exports(records, signer)
    return json.dumps(env).encode()


def _edited(envelope: bytes, change) -> bytes:  # noqa: ANN001
    doc = json.loads(envelope)
    statement = json.loads(base64.b64decode(doc["payload"]))
    change(statement)
    doc["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    return json.dumps(doc).encode()


def test_an_export_is_one_statement_per_cell_digest_and_host_and_opens_with_the_host_key(tmp_path: Path) -> None:
    signer, key = _pair(tmp_path, "host")
    records = _records() + _records(OTHER) + [record(GPU_CELL, "boundary", "pass", None)]  # a host run: no image
    envelopes = signed_exports(records, signer)
    assert len(envelopes) == 2
    opened = [open_host_envelope(json.dumps(e).encode(), [key], "e") for e in envelopes]
    assert sorted(a.digest for a in opened) == [DIGEST, OTHER]
    att = opened[0]
    assert att.keyid == key.keyid and att.cell_id == GPU_CELL.id and att.host.driver == "580.159.04"
    assert att.summary() == [(s, "pass") for s in sorted(GPU_CELL.smokes)]
    statement = json.loads(base64.b64decode(envelopes[0]["payload"]))
    assert statement["predicateType"] == "https://in-toto.io/attestation/test-result/v0.1"
    assert statement["subject"][0]["digest"] == {"sha256": "a" * 64}
    assert statement["predicate"]["result"] == "PASSED"


def test_a_forged_envelope_is_refused_in_one_line(tmp_path: Path) -> None:
    signer, key = _pair(tmp_path, "host")
    forged = _edited(_envelope(signer, _records(status="fail")),
                     lambda s: [r.update(status="pass") for r in s["predicate"]["pinmatrixRecords"]])
    with pytest.raises(HostSignatureError) as err:
        open_host_envelope(forged, [key], "signed.json: envelope 1")
    assert str(err.value).startswith("signed.json: envelope 1: the signature by trusted key ")
    assert "does not verify (payload edited?)" in str(err.value) and "\n" not in str(err.value)


def test_an_untrusted_host_key_is_refused(tmp_path: Path) -> None:
    signer, _ = _pair(tmp_path, "stranger")
    _, key = _pair(tmp_path, "host")
    with pytest.raises(HostSignatureError, match=r"^e: signed only by untrusted key\(s\) [0-9a-f]{12}$"):
        open_host_envelope(_envelope(signer, _records()), [key], "e")


def test_a_statement_carrying_a_record_of_another_digest_is_refused(tmp_path: Path) -> None:
    signer, key = _pair(tmp_path, "host")
    mixed = _records()[:1] + _records(OTHER)[1:]
    envelope = json.dumps(signed_exports(mixed, signer)[0]).encode()
    # signed_exports never mixes digests: an envelope that does was made by hand, and is refused
    doc = json.loads(envelope)
    statement = json.loads(base64.b64decode(doc["payload"]))
    statement["predicate"]["pinmatrixRecords"].append(
        {**statement["predicate"]["pinmatrixRecords"][0], "image_digest": OTHER, "smoke": "fwd-bwd"})
    from pinmatrix.release.signing import sign_envelope
    hand = json.dumps(sign_envelope(json.dumps(statement).encode(), signer)).encode()
    with pytest.raises(HostSignatureError, match="carries a record of cell .* image sha256:bbbb"):
        open_host_envelope(hand, [key], "e")


def test_the_import_verifies_every_envelope_before_writing_any(tmp_path: Path) -> None:
    signer, key = _pair(tmp_path, "host")
    good = _envelope(signer, _records())
    bad = _edited(_envelope(signer, _records(OTHER)), lambda s: s["predicate"].update(result="PASSED!"))
    with pytest.raises(HostSignatureError, match="f: envelope 2: .* does not verify"):
        open_all([good, bad], [key], "f")
    with pytest.raises(HostSignatureError, match="no host public key"):
        open_all([good], [], "f")
    store = ResultsStore(tmp_path / "results.sqlite")
    written = import_signed(store, open_all([good], [key], "f"))
    assert written == len(GPU_CELL.smokes) and kept_envelopes(store.path) == [good]
    assert {r.image_digest for r in store.query()} == {DIGEST}


def test_signed_only_keeps_the_signed_copies_and_says_why_each_other_smoke_does_not_count(tmp_path: Path) -> None:
    signer, key = _pair(tmp_path, "host")
    stranger, _ = _pair(tmp_path, "stranger")
    probe, boundary, fwd_bwd = _records()  # host-probe, boundary, fwd-bwd
    trusted = _envelope(signer, [boundary])
    other_digest = _envelope(signer, [record(GPU_CELL, "fwd-bwd", "pass", OTHER)])
    untrusted = _envelope(stranger, [probe])
    out = signed_only([boundary, fwd_bwd, probe], [trusted, other_digest, untrusted], [key])
    assert out.kept == [boundary] and [a.digest for a in out.attestations] == [DIGEST]
    assert out.dropped[fwd_bwd.smoke].startswith(f"the host signed it for another digest ({OTHER})")
    assert out.dropped[probe.smoke].startswith("signed only by a key the policy's trusted_hosts does not list")
    forged = _edited(trusted, lambda s: s["predicate"].update(result="WARNED"))
    out = signed_only([boundary], [forged], [key])
    assert out.kept == [] and "does not verify" in out.dropped[boundary.smoke]
    out = signed_only([boundary], [], [key])
    assert out.dropped == {boundary.smoke: "unsigned: no envelope signed by a trusted host carries it"}
    failed = record(GPU_CELL, boundary.smoke, "fail", DIGEST)
    assert signed_only([boundary], [_envelope(signer, [failed])], [key]).dropped == {
        boundary.smoke: "the host signed fail, the store says pass"}


def test_a_refused_promotion_names_the_smoke_and_why_its_result_does_not_count() -> None:
    policy = PromotionPolicy(hosts=["sm_90"], trusted_hosts=["h200.pub"])
    check = check_policy(GPU_CELL, policy, [], dropped={"boundary": "unsigned: no envelope signed by a trusted "
                                                                     "host carries it"})
    assert ("missing result: smoke 'boundary' has no result on a sm_90 host (its recorded result does not count: "
            "unsigned: no envelope signed by a trusted host carries it)") in check.problems
    assert not any("does not count" in p for p in check.problems if "'fwd-bwd'" in p)


def test_the_promotion_statement_names_the_host_keys_verify_reads_back(tmp_path: Path) -> None:
    signer, key = _pair(tmp_path, "host")
    att = open_host_envelope(_envelope(signer, _records()), [key], "e")
    statement = {"predicate": {"configuration": host_key_descriptors([att], ["sha256:" + "c" * 64])}}
    (named,) = named_host_keys(statement)
    assert named.keyid == key.keyid
    assert open_host_envelope(att.envelope, [named], "e").digest == DIGEST
    statement["predicate"]["configuration"][0]["annotations"]["key"] = "{not json"
    assert named_host_keys(statement) == []
