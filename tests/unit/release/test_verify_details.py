"""pinmatrix.release.verify, the details test_verify_rules leaves open (each found by a mutant that survived it):
what a statement's subjects are called when none is the image's, a cell id with a slash in it, a result or a
time the statement leaves out, the signers of every signed result, and the JSON report's layout."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from memregistry import serve_registry
from promotion import CPU_CELL
from test_verify import REPO, World

from pinmatrix.imageref import ImageRef
from pinmatrix.registry.client import OCI_INDEX, OCI_MANIFEST, referrers_tag
from pinmatrix.release import attest
from pinmatrix.release.signing import generate_keypair, load_public_key, load_signer, sign_envelope
from pinmatrix.release.verify import _moment, result_problem, statement_cell, verify_image

DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def world(tmp_path: Path):  # noqa: ANN201
    with serve_registry() as reg:
        yield World(reg, tmp_path)


# -- subjects -------------------------------------------------------------------------------------------

def test_subjects_of_other_digests_are_all_named_and_one_without_a_sha256_is_no_digest(world: World) -> None:
    statement = world.statement()
    statement["subject"] = [{"name": f"{world.reg.address}/{REPO}", "digest": {"sha512": "00" * 64}}]
    att = world.attach(statement)
    assert world.verify().problems[0] == (f"the signed attestation {att} is for no digest, not for the image's "
                                          f"digest {world.digest}")


def test_two_other_digests_are_both_named(world: World) -> None:
    statement = world.statement()
    statement["subject"] = [{"name": f"{world.reg.address}/{REPO}", "digest": {"sha256": h}} for h in ("cd" * 32,
                                                                                                     "12" * 32)]
    att = world.attach(statement)
    assert world.verify().problems[0] == (f"the signed attestation {att} is for sha256:{'12' * 32}, "
                                          f"sha256:{'cd' * 32}, not for the image's digest {world.digest}")


def test_every_repository_a_subject_of_the_digest_names_is_listed(world: World) -> None:
    statement = world.statement()
    statement["subject"] = [{"name": f"{world.reg.address}/{name}", "digest": {"sha256": world.digest[7:]}}
                            for name in ("other/b", "other/a")]
    att = world.attach(statement)
    assert world.verify().problems[0] == (f"the signed attestation {att} names repository other/a, other/b, not "
                                          f"{REPO}")


# -- the cell, the result and the times a statement carries ---------------------------------------------

def test_a_cell_id_is_everything_after_the_prefix_so_a_forged_path_is_not_the_cell() -> None:
    statement = {"predicate": {"configuration": [
        {"name": "other"}, "junk", {"annotations": {}},
        {"name": f"pinmatrix-cell/forged/{CPU_CELL.id}", "annotations": {"stack": "demo", "python": 3}}]}}
    assert statement_cell(statement) == {"id": f"forged/{CPU_CELL.id}", "stack": "demo", "python": "3"}
    assert statement_cell({"predicate": {"configuration": [{"annotations": {}}]}}) is None
    assert statement_cell({}) is None


def test_a_forged_cell_path_in_a_signed_result_does_not_match_the_images_label(world: World) -> None:
    statement = world.statement()
    for item in statement["predicate"]["configuration"]:
        if str(item.get("name", "")).startswith("pinmatrix-cell/"):
            item["name"] = f"pinmatrix-cell/forged/{CPU_CELL.id}"
    world.attach(statement)
    out = world.verify()
    assert out.problems == [f"the attestation is for cell forged/{CPU_CELL.id}, but the image's "
                            f"io.pinmatrix.cell.id label is {CPU_CELL.id}"]


def test_a_result_the_statement_leaves_out_is_missing() -> None:
    assert result_problem({}, DIGEST) == f"the newest signed test result for {DIGEST} is missing, not PASSED"


def test_a_failed_test_is_quoted_to_80_characters() -> None:
    name = "t" * 100
    problem = result_problem({"result": "PASSED", "failedTests": [name]}, DIGEST)
    assert problem is not None and problem.endswith(f"lists 1 failed test(s) ({'t' * 80})")


def test_a_newest_result_without_result_or_times_reports_none_of_them(world: World) -> None:
    statement = world.statement()
    for key in ("result", "runFinishedAt", "signedAt"):
        del statement["predicate"][key]
    world.attach(statement)
    out = world.verify()
    assert (out.result, out.signed_at, out.run_finished_at) == (None, None, None)
    assert out.problems[0] == f"the newest signed test result for {world.digest} is missing, not PASSED"


def test_every_signer_of_a_signed_result_is_listed_after_one_without_a_cell(world: World, tmp_path: Path) -> None:
    private, public, _ = generate_keypair(tmp_path / "second")
    second, second_key = load_signer(private), load_public_key(public)
    nocell = world.statement(signed_at=datetime(2026, 12, 2, tzinfo=timezone.utc))
    nocell["predicate"]["configuration"] = []
    world.attach(nocell)  # the newest, by the first key
    attest.attach(world.registry, world.image, world.statement(), signer=second)
    out = verify_image(world.registry, world.ref, [world.key, second_key])
    assert out.keyids == [world.key.keyid, second_key.keyid]
    assert out.problems == ["the signed test-result statement names no pinmatrix cell"]
    assert out.cell_id == CPU_CELL.id  # the older statement's cell, still compared with the others


# -- the report -----------------------------------------------------------------------------------------

def test_the_json_report_is_indented_by_two_spaces_like_the_clis_other_json(world: World) -> None:
    world.attach(world.statement())
    text = world.verify().to_json()
    assert text.splitlines()[:2] == ["{", f'  "reference": "{world.ref}",']
    assert json.loads(text)["ok"] is True


@pytest.mark.parametrize("value", ["2026-12-01T14:00:00Z", "2026-12-01T14:00:00+00:00", "2026-12-01T15:00:00+01:00",
                                   "2026-12-01T14:00:00"])
def test_a_recorded_promotion_time_is_read_in_any_iso_form(world: World, value: str) -> None:
    world.attach(world.statement())
    assert world.verify(not_before=value).ok
    assert not world.verify(not_before=value.replace("14:00:00", "14:00:01").replace("15:00:00", "15:00:01")).ok


# -- what is listed for the image -----------------------------------------------------------------------

def test_an_attestation_listed_for_the_image_but_made_for_another_is_refused_and_the_rest_still_read(
        world: World) -> None:
    other = world.reg.add_manifest(REPO, json.dumps({**world.manifest, "layers": []}).encode(), OCI_MANIFEST)
    stray = world.attach_raw(attest.canonical(sign_envelope(attest.canonical(world.statement()), world.signer)),
                             subject=other)
    good = world.attach(world.statement())
    listed = world.registry.get_manifest(REPO, referrers_tag(world.digest))
    strays = world.registry.get_manifest(REPO, referrers_tag(other))
    assert listed is not None and strays is not None
    index = {**listed.json, "manifests": [*strays.json["manifests"], *listed.json["manifests"]]}
    world.reg.add_manifest(REPO, json.dumps(index).encode(), OCI_INDEX, referrers_tag(world.digest))
    out = world.verify()
    assert out.problems == [f"attestation {stray} is listed for {world.digest} but its subject is {other}"]
    reports = {e.digest: (e.note, e.verified) for e in out.evidence}
    assert reports == {stray: (f"its manifest's subject is {other}, not {world.digest}", False), good: (None, True)}


def test_the_report_names_the_reference_and_the_artifact_of_the_newest_result(world: World) -> None:
    world.attach(world.statement())
    newest = world.attach(world.statement(signed_at=datetime(2026, 12, 3, tzinfo=timezone.utc)))
    unsigned = world.attach(world.statement(), signer=None)
    out = world.verify()
    assert out.ok and out.reference == str(world.ref) and out.attestation == newest
    report = next(e for e in out.evidence if e.digest == unsigned)
    assert (report.signed, report.verified, report.keyid) == (False, False, None)


def test_every_ignored_attestation_is_named_in_the_refusal(world: World) -> None:
    unsigned = world.attach(world.statement(), signer=None)
    foreign = world.attach(world.statement(), signer="other")
    out = world.verify()
    notes = {e.digest: e.note for e in out.evidence}
    detail = "; ".join(f"{d[:19]}: {notes[d]}" for d in (e.digest for e in out.evidence))
    assert set(notes) == {unsigned, foreign}
    assert out.problems == [f"no test-result attestation signed by a trusted key (2 attestation(s) found: {detail})"]


def test_a_manifest_without_a_config_is_not_one_image(world: World) -> None:
    world.reg.add_manifest(REPO, json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": []}).encode(),
                           OCI_MANIFEST, "bare")
    out = world.verify(ImageRef(world.reg.address, REPO, "bare"))
    assert out.problems == [f"{world.reg.address}/{REPO}:bare is an image index, not one image: pinmatrix promotes "
                            "single images"]


def test_a_z_zone_is_utc_in_every_form_a_statement_may_carry() -> None:
    """Python 3.11's fromisoformat reads "Z" after a time but not after a bare date: the replace still matters."""
    utc = timezone.utc
    assert _moment("2026-12-01Z") == datetime(2026, 12, 1, tzinfo=utc)
    assert _moment("2026-12-01T14:00:00Z") == datetime(2026, 12, 1, 14, tzinfo=utc)
    assert _moment("2026-12-01T14:00:00+02:00") == datetime(2026, 12, 1, 12, tzinfo=utc)
    assert _moment("2026-12-01T14:00:00") == datetime(2026, 12, 1, 14, tzinfo=utc)  # no zone: UTC
    assert _moment("2026-12-01T14:00:00ZZ") is None and _moment(1764597600) is None
