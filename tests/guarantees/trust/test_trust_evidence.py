"""Evidence carries its time and is judged whole: a statement carries the signer's time and the run's; verify
and pull take the newest signed result and refuse one older than what known-good.toml records (a registry that
withholds a newer result cannot bring back an older one); every signature by a trusted key id must verify (one
good and one bad by the same key id is refused); a signed FAILED result, or a result that disagrees with its
own lists, is refused; the result, the platform and the cell are all compared."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from evidence import _envelope_of, _one_line_error, _referrers_index, _set_entry, promote_signed
from promotion import CPU_CELL, record  # noqa: F401 - the fixture

from pinmatrix.cli import main
from pinmatrix.imageref import ImageRef
from pinmatrix.registry.client import referrers_tag
from pinmatrix.release import attest
from pinmatrix.release.attest import TEST_RESULT_PREDICATE, attach
from pinmatrix.release.signing import check_envelope, generate_keypair, load_public_key, load_signer, sign_envelope
from pinmatrix.release.verify import label_problems, newest_first, result_problem, statement_cell

DIGEST = "sha256:" + "ab" * 32
IMAGE = ImageRef.parse(f"127.0.0.1:5000/promoted/demo@{DIGEST}")


def _pair(tmp_path: Path, name: str = "k"):  # noqa: ANN202
    private, public, _ = generate_keypair(tmp_path / name)
    return load_signer(private), load_public_key(public)


# -- signatures ---------------------------------------------------------------------------------------

def test_one_good_and_one_bad_signature_by_the_trusted_key_id_is_refused(tmp_path: Path) -> None:
    signer, trusted = _pair(tmp_path)
    intruder, _ = _pair(tmp_path, "intruder")
    payload = b'{"_type": "https://in-toto.io/Statement/v1"}'
    good = sign_envelope(payload, signer)
    bad_sig = sign_envelope(payload, intruder)["signatures"][0]["sig"]
    for order in ([good["signatures"][0], {"keyid": trusted.keyid, "sig": bad_sig}],
                  [{"keyid": trusted.keyid, "sig": bad_sig}, good["signatures"][0]]):
        check = check_envelope(json.dumps(dict(good, signatures=order)).encode(), [trusted])
        assert check.verified_by is None
        assert check.problem == f"the signature by trusted key {trusted.keyid[:12]} ({trusted.source}) does not verify"
    twice = check_envelope(json.dumps(dict(good, signatures=good["signatures"] * 2)).encode(), [trusted])
    assert twice.verified_by == trusted and twice.problem is None
    # a bad signature by an untrusted key next to a good trusted one does not matter
    other = {"keyid": "f" * 64, "sig": bad_sig}
    assert check_envelope(json.dumps(dict(good, signatures=[other, *good["signatures"]])).encode(),
                          [trusted]).verified_by == trusted


# -- times --------------------------------------------------------------------------------------------

def test_a_statement_carries_the_signers_time_and_the_runs() -> None:
    cell = CPU_CELL
    early = record(cell, "host-probe", "pass", DIGEST)
    late = record(cell, "python-imports", "pass", DIGEST)
    late = type(late)(**{**late.__dict__, "finished_at": "2026-11-30T08:00:00+01:00"})
    signed = datetime(2026, 12, 1, 14, 0, 5, tzinfo=timezone.utc)
    predicate = attest.test_result_statement(IMAGE, cell, [early, late], signed_at=signed)["predicate"]
    assert predicate["signedAt"] == "2026-12-01T14:00:05Z"
    assert predicate["runFinishedAt"] == "2026-11-30T07:00:00Z"  # the later of the two, in UTC
    before = datetime.now(timezone.utc).replace(microsecond=0)
    now = attest.test_result_statement(IMAGE, cell, [early])["predicate"]
    assert now["runFinishedAt"] == "2026-11-29T20:00:01Z"
    assert datetime.fromisoformat(now["signedAt"].replace("Z", "+00:00")) >= before
    assert "runFinishedAt" not in attest.test_result_statement(IMAGE, cell, [], signed_at=signed)["predicate"]


def _result(result: str, signed: str | None, run: str | None = None, **lists: list[str]) -> dict:
    predicate: dict = {"result": result, "failedTests": [], "warnedTests": [], **lists}
    if signed:
        predicate["signedAt"] = signed
    if run:
        predicate["runFinishedAt"] = run
    return {"predicate": predicate}


def test_the_newest_signed_result_comes_first(tmp_path: Path) -> None:
    _, key = _pair(tmp_path)
    a = _result("PASSED", "2026-12-01T10:00:00Z")
    b = _result("FAILED", "2026-12-01T11:00:00Z")
    c = _result("PASSED", None)
    d = _result("WARNED", "2026-12-01T11:00:00Z", "2026-12-01T10:59:00Z")
    e = _result("PASSED", "2026-12-01T12:00:00+02:00")  # 10:00 UTC
    f = _result("PASSED", "not a time")
    ordered = [s for s, _ in newest_first([(x, key) for x in (a, b, c, d, e, f)])]
    assert ordered[:2] == [d, b]  # same signing time: the later run first
    assert ordered[2:4] in ([a, e], [e, a]) and ordered[4:] in ([c, f], [f, c])


@pytest.mark.parametrize(("predicate", "problem"), [
    ({"result": "PASSED"}, None),
    ({"result": "WARNED", "warnedTests": ["x [host h]"]}, None),
    ({"result": "FAILED", "failedTests": ["x [host h]"]}, "is FAILED, not PASSED"),
    ({"result": ""}, "is missing, not PASSED"),
    ({"result": "passed"}, "is passed, not PASSED"),
    ({"result": "WARNED", "failedTests": ["x [host h]"], "warnedTests": ["y"]},
     "says WARNED but lists 1 failed test(s) (x [host h])"),
    ({"result": "PASSED", "failedTests": ["x"]}, "says PASSED but lists 1 failed test(s) (x)"),
    ({"result": "PASSED", "warnedTests": ["y", "z"]}, "says PASSED but lists 2 warned test(s)"),
])
def test_the_result_must_pass_and_agree_with_its_lists(predicate: dict, problem: str | None) -> None:
    found = result_problem(predicate, DIGEST)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(f"the newest signed test result for {DIGEST} ")
        assert found.endswith(problem)


def test_every_cell_field_is_compared_the_platform_too() -> None:
    statement = attest.test_result_statement(IMAGE, CPU_CELL, [], signed_at=datetime(2026, 12, 1, tzinfo=timezone.utc))
    cell = statement_cell(statement)
    assert cell is not None
    labels = {"io.pinmatrix.cell.id": CPU_CELL.id, **{f"io.pinmatrix.cell.{k}": cell[k]
                                                       for k in ("stack", "name", "python", "platform")},
              **{f"io.pinmatrix.pin.{k[4:]}": v for k, v in cell.items() if k.startswith("pin.")}}
    assert label_problems(cell, labels) == []
    other = dict(labels, **{"io.pinmatrix.cell.platform": "aarch64-manylinux_2_28"})
    assert label_problems(cell, other) == [
        f"cell {CPU_CELL.id}: the attestation says platform {cell['platform']!r}, the image's label "
        "io.pinmatrix.cell.platform says 'aarch64-manylinux_2_28'"]
    missing = {k: v for k, v in cell.items() if k != "platform"}
    assert label_problems(missing, labels) == [
        f"cell {CPU_CELL.id}: the attestation says platform None, the image's label io.pinmatrix.cell.platform "
        f"says {cell['platform']!r}"]
    for key in ("stack", "name", "python"):
        assert len(label_problems(cell, dict(labels, **{f"io.pinmatrix.cell.{key}": "x"}))) == 1


# -- end to end against a registry ---------------------------------------------------------------------



def _statement(p, **predicate: object) -> dict:  # noqa: ANN001
    _, envelope = _envelope_of(p, TEST_RESULT_PREDICATE)
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"].update(predicate)
    return statement


@pytest.mark.registry
def test_the_newest_result_decides_and_an_older_one_than_recorded_is_refused(oci_registry: str,  # noqa: F811
                                                                              tmp_path: Path, capsys) -> None:
    p = promote_signed(oci_registry, tmp_path, capsys, "trust-times")
    good = f"{p.target.name}@{p.digest}"
    signer = load_signer(p.pub.with_suffix(".key"))
    image = p.target.with_digest(p.digest)
    repo = p.target.repository
    promoted_at = str(__import__("tomlkit").parse(p.known_good.read_text())["promoted"][0]["promoted_at"])
    original = _statement(p)
    assert original["predicate"]["signedAt"] == promoted_at
    assert original["predicate"]["runFinishedAt"] == "2026-11-29T20:00:01Z"
    index_before = _referrers_index(p)

    # a newer signed FAILED result: verify and pull refuse, though the older PASSED one is still there
    failed = _statement(p, result="FAILED", failedTests=["python-imports [host ci]"], passedTests=[],
                        signedAt="2099-01-01T00:00:00Z")
    attach(p.registry, image, failed, signer=signer)
    rc = main(p.verify(good))
    line = _one_line_error(capsys.readouterr().err)
    assert rc == 1 and f"the newest signed test result for {p.digest} is FAILED, not PASSED" in line
    rc = main(p.pull("--print"))
    assert rc == 2 and "is FAILED, not PASSED" in _one_line_error(capsys.readouterr().err)
    # a still newer PASSED one supersedes it
    attach(p.registry, image, _statement(p, signedAt="2099-01-02T00:00:00Z"), signer=signer)
    assert main(p.verify(good)) == 0
    capsys.readouterr()
    p.registry.put_manifest(repo, referrers_tag(p.digest), index_before)

    # known-good.toml records a promotion newer than every result the registry still shows (it withholds one)
    kept = _set_entry(p.known_good, promoted_at="2099-01-01T00:00:00Z")
    rc = main(p.pull("--print"))
    line = _one_line_error(capsys.readouterr().err)
    assert rc == 2 and (f"the newest signed test result for {p.digest} was signed at {promoted_at}, before the "
                        "recorded promotion at 2099-01-01T00:00:00Z") in line
    p.known_good.write_text(kept)
    assert main(p.pull("--print")) == 0
    capsys.readouterr()


@pytest.mark.registry
def test_a_signed_failed_result_or_another_platform_is_refused(oci_registry: str, tmp_path: Path,  # noqa: F811
                                                                capsys) -> None:
    from evidence import _replace_referrer

    p = promote_signed(oci_registry, tmp_path, capsys, "trust-failed")
    good = f"{p.target.name}@{p.digest}"
    signer = load_signer(p.pub.with_suffix(".key"))
    att, envelope = _envelope_of(p, TEST_RESULT_PREDICATE)
    index_before = _referrers_index(p)
    repo = p.target.repository

    def signed(statement: dict) -> bytes:
        return json.dumps(sign_envelope(json.dumps(statement).encode(), signer)).encode()

    # the only result, signed by the trusted key, is FAILED
    _replace_referrer(p, att, signed(_statement(p, result="FAILED", failedTests=["x [host ci]"])),
                      TEST_RESULT_PREDICATE)
    rc = main(p.verify(good))
    assert rc == 1 and "is FAILED, not PASSED" in _one_line_error(capsys.readouterr().err)
    p.registry.put_manifest(repo, referrers_tag(p.digest), index_before)

    # WARNED, with a failed test in its lists
    _replace_referrer(p, att, signed(_statement(p, result="WARNED", failedTests=["x [host ci]"],
                                                warnedTests=["y [host ci]"])), TEST_RESULT_PREDICATE)
    rc = main(p.verify(good))
    assert rc == 1 and "says WARNED but lists 1 failed test(s)" in _one_line_error(capsys.readouterr().err)
    p.registry.put_manifest(repo, referrers_tag(p.digest), index_before)

    # another platform, signed
    statement = _statement(p)
    statement["predicate"]["configuration"][0]["annotations"]["platform"] = "aarch64-manylinux_2_28"
    _replace_referrer(p, att, signed(statement), TEST_RESULT_PREDICATE)
    rc = main(p.verify(good))
    line = _one_line_error(capsys.readouterr().err)
    assert rc == 1 and "the attestation says platform 'aarch64-manylinux_2_28'" in line
    p.registry.put_manifest(repo, referrers_tag(p.digest), index_before)

    # one good and one bad signature by the trusted key id
    intruder = load_signer(generate_keypair(tmp_path / "intruder")[0])
    payload = base64.b64decode(envelope["payload"])
    bad = {"keyid": envelope["signatures"][0]["keyid"], "sig": sign_envelope(payload, intruder)["signatures"][0]["sig"]}
    both = dict(envelope, signatures=[envelope["signatures"][0], bad])
    _replace_referrer(p, att, json.dumps(both).encode(), TEST_RESULT_PREDICATE)
    rc = main(p.verify(good))
    assert rc == 1 and "does not verify (tampered?)" in _one_line_error(capsys.readouterr().err)
    p.registry.put_manifest(repo, referrers_tag(p.digest), index_before)
    assert main(p.verify(good)) == 0
