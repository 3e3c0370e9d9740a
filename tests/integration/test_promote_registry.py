"""Promotion against a registry (docker-registry): copy, mount and verify, copies by digest with evidence attached
and recorded, a digest that no longer matches refused, a tag moved between plan and execute, the command's
refusals, dry run and success."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomlkit
from helpers import fetch_statements
from promote_hosts import CPU
from promotion import _matrix_for, push_image, record
from report_data import H200, make_cell

from pinmatrix.cli import main
from pinmatrix.imageref import ImageRef
from pinmatrix.project.known_good import read_known_good
from pinmatrix.project.policy import PromotionPolicy
from pinmatrix.registry.client import Registry, referrers_tag
from pinmatrix.release.attest import IN_TOTO_MEDIA_TYPE, TEST_RESULT_PREDICATE
from pinmatrix.release.promote import PromotionRefused, execute, plan_promotion
from pinmatrix.results.store import ResultsStore


def test_distribution_copy_mount_and_verify(oci_registry: str) -> None:
    reg = Registry(oci_registry)
    digest = push_image(oci_registry, "t/src", "v1", "hello")
    assert reg.resolve(ImageRef.parse(f"{oci_registry}/t/src:v1")) == digest
    copied = reg.copy(ImageRef.parse(f"{oci_registry}/t/src@{digest}"), "t/dst", ["x", "y"])
    assert copied == digest
    assert reg.tags("t/dst") == ["x", "y"]
    m = reg.get_manifest("t/dst", digest)
    assert m is not None and m.digest == digest
    layer = m.json["layers"][0]["digest"]
    assert reg.has_blob("t/dst", layer)
    with pytest.raises(Exception, match="needs a digest"):
        reg.copy(ImageRef.parse(f"{oci_registry}/t/src:v1"), "t/dst", ["z"])


def _setup_promotion(oci_registry: str, tmp_path: Path, cell, content: str):
    repo = f"pinmatrix/{cell.stack}"
    digest = push_image(oci_registry, repo, cell.id, content)
    store = ResultsStore(tmp_path / "results.sqlite")
    host = CPU if not cell.gpu_required else H200
    for s in cell.smokes:
        store.record(record(cell, s, "pass", digest, host=host))
    return digest, store, ImageRef.parse(f"{oci_registry}/{repo}:{cell.id}")


def test_promote_copies_by_digest_attaches_evidence_and_records(oci_registry: str, tmp_path: Path) -> None:
    cell = make_cell("d1d1d1d1d1d1", "promo", {"six": "1.17.0"}, smokes=("host-probe", "python-imports"),
                     gpu_required=False, arch_flags=(), min_driver=None, compute_capability=None)
    digest, store, source = _setup_promotion(oci_registry, tmp_path, cell, "good image")
    reg = Registry(oci_registry)
    policy = PromotionPolicy()
    plan = plan_promotion(cell, policy, store.query(), source=source, registry_prefix=f"{oci_registry}/pinmatrix",
                          registry=reg)
    assert plan.describe()[0] == f"copy {source.name}@{digest} -> {oci_registry}/pinmatrix/known-good/promo@{digest} (by digest)"
    kg = tmp_path / "known-good.toml"
    result = execute(plan, reg, store.query(), kg)
    assert result.digest == digest
    target = ImageRef.parse(f"{oci_registry}/pinmatrix/known-good/promo")
    assert reg.resolve(target.with_tag("known-good")) == digest
    assert reg.resolve(target.with_tag(f"cell-{cell.id}")) == digest
    # the attestation, through the OCI 1.1 referrers tag schema (distribution 2.8 has no referrers API)
    assert referrers_tag(digest) in reg.tags(target.repository)
    statements = fetch_statements(reg, target.with_digest(digest))
    assert len(statements) == 1
    st = statements[0]
    assert st["_type"] == "https://in-toto.io/Statement/v1"
    assert st["predicateType"] == TEST_RESULT_PREDICATE
    assert st["subject"] == [{"name": target.name, "digest": {"sha256": digest.split(":")[1]}}]
    assert st["predicate"]["result"] == "PASSED"
    assert sorted(st["predicate"]["passedTests"]) == sorted(f"{s} [host {CPU.id}]" for s in cell.smokes)
    assert st["predicate"]["failedTests"] == []
    hosts = [c for c in st["predicate"]["configuration"] if c["name"].startswith("pinmatrix-host/")]
    assert hosts[0]["annotations"]["hostname"] == "ci"
    art = reg.referrers(target.repository, digest, artifact_type=IN_TOTO_MEDIA_TYPE)[0]
    manifest = reg.get_manifest(target.repository, art["digest"]).json
    assert manifest["subject"]["digest"] == digest and manifest["artifactType"] == IN_TOTO_MEDIA_TYPE
    # known-good.toml
    entries = read_known_good(kg)
    assert len(entries) == 1
    e = entries[0]
    assert (e["stack"], e["cell_id"], e["digest"]) == ("promo", cell.id, digest)
    assert e["reference"] == f"{target.name}@{digest}" and e["pins"] == {"six": "1.17.0"}
    assert {ev["smoke"] for ev in e["evidence"]} == set(cell.smokes)
    assert tomlkit.parse(kg.read_text())["promoted"][0]["policy"]["accept"] == ["pass"]


def test_digest_that_no_longer_matches_is_refused(oci_registry: str, tmp_path: Path) -> None:
    cell = make_cell("e1e1e1e1e1e1", "moved", {"six": "1.16.0"}, smokes=("python-imports",),
                     gpu_required=False, arch_flags=(), min_driver=None, compute_capability=None)
    tested, store, source = _setup_promotion(oci_registry, tmp_path, cell, "tested")
    rebuilt = push_image(oci_registry, source.repository, cell.id, "rebuilt after the smokes ran")
    assert rebuilt != tested
    with pytest.raises(PromotionRefused) as err:
        plan_promotion(cell, PromotionPolicy(), store.query(), source=source,
                       registry_prefix=f"{oci_registry}/pinmatrix", registry=Registry(oci_registry))
    assert f"digest no longer matches: {source} now names {rebuilt}, but the smokes ran on {tested}" in str(err.value)
    assert Registry(oci_registry).tags("pinmatrix/known-good/moved") == []


def test_plan_then_tag_moves_before_execute_still_copies_the_tested_digest(oci_registry: str, tmp_path: Path) -> None:
    cell = make_cell("f1f1f1f1f1f1", "race", {"six": "1.16.0"}, smokes=("python-imports",),
                     gpu_required=False, arch_flags=(), min_driver=None, compute_capability=None)
    tested, store, source = _setup_promotion(oci_registry, tmp_path, cell, "tested")
    reg = Registry(oci_registry)
    plan = plan_promotion(cell, PromotionPolicy(), store.query(), source=source,
                          registry_prefix=f"{oci_registry}/pinmatrix", registry=reg)
    push_image(oci_registry, source.repository, cell.id, "someone pushed over the tag")  # after the check
    result = execute(plan, reg, store.query(), tmp_path / "kg.toml")
    assert result.digest == tested
    assert reg.resolve(ImageRef.parse(f"{oci_registry}/pinmatrix/known-good/race:known-good")) == tested


def test_promote_command_refusals_dry_run_and_success(oci_registry: str, tmp_path: Path, capsys,
                                                      monkeypatch) -> None:
    from pinmatrix.matrix.selection import load

    monkeypatch.chdir(tmp_path)
    matrix_path = _matrix_for(tmp_path, f"{oci_registry}/cmdtest")
    _, expansion = load(matrix_path)
    demo = [c for c in expansion.cells if c.stack == "demo"]
    cell = demo[0]
    store = ResultsStore(tmp_path / "r.sqlite")
    base = ["promote", str(matrix_path), "--results", str(store.path), "--known-good", str(tmp_path / "kg.toml")]

    # 1. missing results
    rc = main(base + ["--cell", cell.id])
    err = capsys.readouterr().err
    assert rc == 1 and "missing result: smoke 'host-probe' has no result on any host" in err
    assert len(err.strip().splitlines()) == 1

    # 2. a failed required smoke
    digest = push_image(oci_registry, "cmdtest/demo", cell.id, "demo image")
    store.record(record(cell, "host-probe", "pass", digest, host=CPU))
    store.record(record(cell, "python-imports", "fail", digest, host=CPU, failure_class="import-error",
                        reason="No module named 'six'"))
    rc = main(base + ["--cell", cell.id])
    err = capsys.readouterr().err
    assert rc == 1 and "required smoke 'python-imports' is fail [import-error]" in err

    # 3. dry run of a passing cell changes nothing
    store.record(record(cell, "python-imports", "pass", digest, host=CPU, run="r2"))
    rc = main(base + ["--cell", cell.id, "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0 and "would promote" in out and f"@{digest} (by digest)" in out
    assert not (tmp_path / "kg.toml").exists()
    assert Registry(oci_registry).tags("cmdtest/known-good/demo") == []

    # 4. the real thing, then idempotence
    rc = main(base + ["--cell", cell.id])
    out = capsys.readouterr().out
    assert rc == 0 and f"promoted {cell.id}" in out
    assert read_known_good(tmp_path / "kg.toml")[0]["digest"] == digest
    rc = main(base + ["--cell", cell.id])
    assert rc == 0 and "already promoted" in capsys.readouterr().out
    assert len(read_known_good(tmp_path / "kg.toml")) == 1

    # 5. a whole stack: cells without results are refused, the promoted one is kept; exit 0
    rc = main(base + ["--stack", "demo"])
    captured = capsys.readouterr()
    assert rc == 0
    assert captured.out.count("refused") == len(demo) - 1

    # 6. bad input: unknown cell is one line, exit 2
    rc = main(base + ["--cell", "000000000000"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "000000000000" in err[0]
