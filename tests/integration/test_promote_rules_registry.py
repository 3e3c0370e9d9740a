"""Promotion rules against a registry: a tested image that is gone, host runs, the attestation's results, rebuild
then smoke then promote, the plan, UTC times, another registry's repository, a build tag that is gone."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from helpers import fetch_statements
from promote_rules_data import GB10, T0, rec
from promotion import push_image  # noqa: F401 - the fixture
from report_data import H200, make_cell

from pinmatrix.imageref import ImageRef
from pinmatrix.project.known_good import read_known_good
from pinmatrix.project.policy import PromotionPolicy
from pinmatrix.registry.client import Registry
from pinmatrix.release.promote import PromotionRefused, execute, plan_promotion
from pinmatrix.results.store import ResultsStore


def _delete_manifest(host: str, repository: str, digest: str) -> None:
    req = urllib.request.Request(f"http://{host}/v2/{repository}/manifests/{digest}", method="DELETE")
    with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - the test's loopback registry
        assert resp.status == 202


def _gpu_cell(cid: str):  # noqa: ANN202
    return make_cell(cid, f"rules{cid[:4]}", {"driver": "580.159.04", "gpu": "sm_90"}, smokes=("boundary", "probe"))


def test_tested_image_that_is_gone_is_refused(oci_registry: str) -> None:  # noqa: F811
    cell = _gpu_cell("2b3c4d5e6f70")
    repo = f"pinmatrix/{cell.stack}"
    digest = push_image(oci_registry, repo, cell.id, "tested then deleted")
    recs = [rec(s, "pass", digest, run="r1", finished="2026-11-29T10:00:00Z", cell=cell) for s in cell.smokes]
    _delete_manifest(oci_registry, repo, digest)
    with pytest.raises(PromotionRefused) as err:
        plan_promotion(cell, PromotionPolicy(), recs, source=ImageRef.parse(f"{oci_registry}/{repo}:{cell.id}"),
                       registry_prefix=f"{oci_registry}/pinmatrix", registry=Registry(oci_registry))
    assert f"the tested image {oci_registry}/{repo}@{digest} is no longer in the registry" in str(err.value)


def test_host_runs_only_promote_the_image_built_from_the_cells_lock(oci_registry: str) -> None:  # noqa: F811
    """Under host_runs = "identical", results measured in the host's environment carry no image digest: the
    image promoted is the one the cell's build tag names, and without it nothing is promoted."""
    cell = _gpu_cell("4d5e6f708192")
    repo = f"pinmatrix/{cell.stack}"
    policy = PromotionPolicy(host_runs="identical")
    recs = [rec(s, "pass", None, run="r1", finished="2026-11-29T10:00:00Z", cell=cell) for s in cell.smokes]
    for r in recs:
        r.environment["host_vs_lock"] = {"identical": True, "python_differs": False, "packages": []}
    source = ImageRef.parse(f"{oci_registry}/{repo}:{cell.id}")
    with pytest.raises(PromotionRefused) as err:
        plan_promotion(cell, policy, recs, source=source, registry_prefix=f"{oci_registry}/pinmatrix",
                       registry=Registry(oci_registry))
    assert str(err.value) == f"cell {cell.id} ({cell.name}) not promoted: image {source} is not in the registry"
    digest = push_image(oci_registry, repo, cell.id, "built from the lock the host matched")
    plan = plan_promotion(cell, policy, recs, source=source, registry_prefix=f"{oci_registry}/pinmatrix",
                          registry=Registry(oci_registry))
    assert plan.digest == digest and plan.check.digest == digest


def test_attestation_lists_only_results_of_the_promoted_digest(oci_registry: str, tmp_path: Path) -> None:  # noqa: F811
    cell = _gpu_cell("3c4d5e6f7081")
    repo = f"pinmatrix/{cell.stack}"
    digest = push_image(oci_registry, repo, cell.id, "the promoted image")
    other = push_image(oci_registry, repo, "elsewhere", "another image of the same cell")
    recs = [rec(s, "pass", digest, run="r1", finished="2026-11-29T10:00:00Z", cell=cell) for s in cell.smokes]
    # Results of ANOTHER image of this cell, on a host the policy does not require, finished later.
    recs += [rec(s, "fail", other, run="g1", finished="2026-11-29T11:00:00Z", cell=cell, host=GB10)
             for s in cell.smokes]
    reg = Registry(oci_registry)
    policy = PromotionPolicy(hosts=["sm_90"])
    plan = plan_promotion(cell, policy, recs, source=ImageRef.parse(f"{oci_registry}/{repo}:{cell.id}"),
                          registry_prefix=f"{oci_registry}/pinmatrix", registry=reg)
    result = execute(plan, reg, recs, tmp_path / "kg.toml")
    promoted = ImageRef.parse(result.reference)
    assert promoted.digest == digest
    (statement,) = fetch_statements(reg, promoted)
    assert statement["subject"][0]["digest"] == {"sha256": digest.split(":")[1]}
    predicate = statement["predicate"]
    assert predicate["result"] == "PASSED"
    assert predicate["failedTests"] == []
    assert sorted(predicate["passedTests"]) == sorted(f"{s} [host {H200.id}]" for s in cell.smokes)
    hosts = {c["name"] for c in predicate["configuration"] if c["name"].startswith("pinmatrix-host/")}
    assert hosts == {f"pinmatrix-host/{H200.id}"}


def test_rebuild_then_smoke_then_promote(oci_registry: str, tmp_path: Path) -> None:  # noqa: F811
    """One path: image A promoted; the cell is rebuilt (B under the same tag): refused until B has its own
    clean runs (A's do not count for B), then B is promoted and the known-good tag moves to B."""
    cell = _gpu_cell("4d5e6f708192")
    repo = f"pinmatrix/{cell.stack}"
    source = ImageRef.parse(f"{oci_registry}/{repo}:{cell.id}")
    reg = Registry(oci_registry)
    store = ResultsStore(tmp_path / "r.sqlite")
    kg = tmp_path / "known-good.toml"
    policy = PromotionPolicy(min_clean_runs=2)
    kwargs = dict(source=source, registry_prefix=f"{oci_registry}/pinmatrix", registry=reg)

    image_a = push_image(oci_registry, repo, cell.id, "build 1")
    for run, t in (("a1", "10"), ("a2", "11")):
        store.record_many([rec(s, "pass", image_a, run=run, finished=f"2026-11-29T{t}:00:00Z", cell=cell)
                           for s in cell.smokes])
    first = execute(plan_promotion(cell, policy, store.query(cell_id=cell.id), **kwargs), reg,
                    store.query(cell_id=cell.id), kg)
    assert first.digest == image_a

    image_b = push_image(oci_registry, repo, cell.id, "build 2: a pin changed")  # the rebuild
    with pytest.raises(PromotionRefused, match=f"now names {image_b}, but the smokes ran on {image_a}"):
        plan_promotion(cell, policy, store.query(cell_id=cell.id), **kwargs)

    store.record_many([rec(s, "pass", image_b, run="b1", finished="2026-11-29T12:00:00Z", cell=cell)
                       for s in cell.smokes])
    with pytest.raises(PromotionRefused, match=f"1 clean run\\(s\\) of {image_b}"):
        plan_promotion(cell, policy, store.query(cell_id=cell.id), **kwargs)

    store.record_many([rec(s, "pass", image_b, run="b2", finished="2026-11-29T13:00:00Z", cell=cell)
                       for s in cell.smokes])
    second = execute(plan_promotion(cell, policy, store.query(cell_id=cell.id), **kwargs), reg,
                     store.query(cell_id=cell.id), kg)
    assert second.digest == image_b
    target = ImageRef.parse(f"{oci_registry}/pinmatrix/known-good/{cell.stack}")
    assert reg.resolve(target.with_tag("known-good")) == image_b
    assert [e["digest"] for e in read_known_good(kg)] == [image_a, image_b]
    runs = {ev["run_id"] for ev in read_known_good(kg)[1]["evidence"]}
    assert runs == {"b2"}
    (statement,) = fetch_statements(reg, target.with_digest(image_b))
    assert json.dumps(statement).count(image_a.split(":")[1]) == 0


def test_plan_describes_every_step(oci_registry: str, tmp_path: Path) -> None:  # noqa: F811
    cell = _gpu_cell("5e6f708192a3")
    repo = f"pinmatrix/{cell.stack}"
    digest = push_image(oci_registry, repo, cell.id, "described")
    recs = [rec(s, "pass", digest, run="r1", finished="2026-11-29T10:00:00Z", cell=cell) for s in cell.smokes]
    plan = plan_promotion(cell, PromotionPolicy(tag="stable"), recs,
                          source=ImageRef.parse(f"{oci_registry}/{repo}:{cell.id}"),
                          registry_prefix=f"{oci_registry}/pinmatrix/", registry=Registry(oci_registry))
    target = f"{oci_registry}/pinmatrix/known-good/{cell.stack}"
    assert plan.describe() == [
        f"copy {oci_registry}/{repo}@{digest} -> {target}@{digest} (by digest)",
        f"tag {target}:cell-{cell.id}",
        f"attach in-toto test-result attestation (and SBOM, SLSA provenance) to {target}@{digest}",
        f"move {target}:stable -> {digest}",
        f"record {cell.stack} {cell.id} in known-good.toml",
    ]
    result = execute(plan, Registry(oci_registry), recs, tmp_path / "kg.toml")
    assert (result.stack, result.cell_id, result.digest, result.sbom, result.signed_by) == (
        cell.stack, cell.id, digest, None, None)  # no lock given, no signer: neither SBOM nor signature
    (entry,) = read_known_good(tmp_path / "kg.toml")
    assert entry["tag"] == f"{target}:stable" and entry["source"] == f"{oci_registry}/{repo}@{digest}"
    assert entry["attestation"] == f"{target}@{result.attestation}" and entry["cell_name"] == cell.name
    assert (entry["gpu_required"], entry["min_driver"], entry["compute_capability"], entry["arch_flags"]) == (
        True, "580.65.06", "9.0", ["9.0a"])
    assert entry["pins"] == dict(cell.pins) and entry["policy"]["tag"] == "stable"
    assert entry["promoted_at"] == result.promoted_at and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ",
                                                                       result.promoted_at)
    assert {(ev["smoke"], ev["gpu"], ev["host_id"], ev["status"], ev["run_id"], ev["image_digest"])
            for ev in entry["evidence"]} == {(s, "sm_90", H200.id, "pass", "r1", digest) for s in cell.smokes}
    assert Registry(oci_registry).resolve(ImageRef.parse(f"{target}:stable")) == digest
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", result.attestation)
    (statement,) = fetch_statements(Registry(oci_registry), ImageRef.parse(f"{target}@{digest}"))
    policy = [c for c in statement["predicate"]["configuration"] if c["name"] == "pinmatrix-promotion-policy"]
    assert policy and json.loads(policy[0]["annotations"]["tag"]) == "stable"


def test_promotion_times_are_utc_and_the_given_moment(oci_registry: str, tmp_path: Path,  # noqa: F811
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import time
    from datetime import datetime, timezone

    cell = _gpu_cell("6f708192a3b4")
    repo = f"pinmatrix/{cell.stack}"
    digest = push_image(oci_registry, repo, cell.id, "timed")
    recs = [rec(s, "pass", digest, run="r1", finished="2026-11-29T10:00:00Z", cell=cell) for s in cell.smokes]
    reg = Registry(oci_registry)

    def plan():  # noqa: ANN202
        return plan_promotion(cell, PromotionPolicy(), recs, source=ImageRef.parse(f"{oci_registry}/{repo}:{cell.id}"),
                              registry_prefix=f"{oci_registry}/pinmatrix", registry=reg)

    moment = datetime(2020, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    given = execute(plan(), reg, recs, tmp_path / "kg.toml", now=moment)
    assert given.promoted_at == "2020-01-02T03:04:05Z"
    target = f"{oci_registry}/pinmatrix/known-good/{cell.stack}"
    created = {d.get("annotations", {}).get("org.opencontainers.image.created")
               for d in reg.referrers(f"pinmatrix/known-good/{cell.stack}", digest)}
    assert created == {"2020-01-02T03:04:05Z"}
    monkeypatch.setenv("TZ", "Asia/Tokyo")  # +09:00: a naive local clock would be nine hours off
    time.tzset()
    try:
        before = datetime.now(timezone.utc).replace(microsecond=0)
        now = execute(plan(), reg, recs, tmp_path / "kg.toml")
        stamp = datetime.strptime(now.promoted_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        assert 0 <= (stamp - before).total_seconds() < 120, (now.promoted_at, before)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert ImageRef.parse(now.reference).name == target


def test_a_promoted_repository_on_another_registry_is_refused(oci_registry: str) -> None:  # noqa: F811
    cell = _gpu_cell("92a3b4c5d6e7")
    repo = f"pinmatrix/{cell.stack}"
    digest = push_image(oci_registry, repo, cell.id, "elsewhere")
    recs = [rec(s, "pass", digest, run="r1", finished=T0, cell=cell) for s in cell.smokes]
    source = ImageRef.parse(f"{oci_registry}/{repo}:{cell.id}")
    with pytest.raises(PromotionRefused) as err:
        plan_promotion(cell, PromotionPolicy(), recs, source=source, registry_prefix="other.example:5000/pinmatrix",
                       registry=Registry(oci_registry))
    assert str(err.value) == (f"promoted repository other.example:5000/pinmatrix/known-good/{cell.stack} is on another "
                              f"registry than {source.name}")


def test_a_tested_image_whose_build_tag_is_gone_is_refused(oci_registry: str) -> None:  # noqa: F811
    """The tested digest is still in the registry, but the cell's build tag names nothing: refused by name."""
    cell = _gpu_cell("a7b8c9d0e1f2")
    repo = f"pinmatrix/{cell.stack}"
    digest = push_image(oci_registry, repo, "not-the-cells-tag", "tested under another tag")
    recs = [rec(s, "pass", digest, run="r1", finished="2026-11-29T10:00:00Z", cell=cell) for s in cell.smokes]
    source = ImageRef.parse(f"{oci_registry}/{repo}:{cell.id}")
    with pytest.raises(PromotionRefused) as err:
        plan_promotion(cell, PromotionPolicy(), recs, source=source, registry_prefix=f"{oci_registry}/pinmatrix",
                       registry=Registry(oci_registry))
    assert str(err.value) == f"cell {cell.id} ({cell.name}) not promoted: image {source} is not in the registry"
