"""Promotion policy checks, and promotion by digest against a real registry (Debian's docker-registry,
started here on a free loopback port and stopped by PID): the copy, the moved tag, the in-toto attestation
read back through the referrers tag schema, known-good.toml, and each refusal."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomlkit
from helpers import fetch_statements
from promotion import CPU_CELL, DIGEST, GPU_CELL, _matrix_for, push_image, record
from pydantic import ValidationError
from report_data import H200, make_cell

from pinmatrix.cli import main
from pinmatrix.imageref import ImageRef
from pinmatrix.project.known_good import read_known_good
from pinmatrix.project.policy import PromotionPolicy, policy_for
from pinmatrix.registry.client import Registry, referrers_tag
from pinmatrix.release.attest import IN_TOTO_MEDIA_TYPE, TEST_RESULT_PREDICATE
from pinmatrix.release.promote import PromotionRefused, check_policy, execute, plan_promotion
from pinmatrix.results.store import HostFingerprint, ResultsStore, SmokeRecord

CPU = HostFingerprint.make(hostname="ci")
GB10 = HostFingerprint.make(hostname="spark", gpu_name="NVIDIA GB10", gpu_count=1, driver="580.142",
                            capability="12.1")


# ------------------------------------------------------------------------------------------ registry










# ------------------------------------------------------------------------------------------ policy


def test_policy_model_validates() -> None:
    p = PromotionPolicy.model_validate({"required_smokes": ["boundary"], "hosts": ["sm_90"], "min_clean_runs": 2})
    assert p.repository == "known-good" and p.accept == ["pass"]
    for bad in ({"min_clean_runs": 0}, {"hosts": []}, {"accept": ["fail"]}, {"accept": ["nope"]},
                {"repository": "Known Good"}, {"colour": "red"}, {"required_smokes": []}):
        with pytest.raises(ValidationError):
            PromotionPolicy.model_validate(bad)


def test_clean_results_pass_the_policy() -> None:
    recs = [record(GPU_CELL, s, "pass", DIGEST) for s in GPU_CELL.smokes]
    check = check_policy(GPU_CELL, PromotionPolicy(), recs)
    assert check.ok, check.problems
    assert check.digest == DIGEST
    assert {e.smoke for e in check.evidence} == set(GPU_CELL.smokes)


def test_missing_results_refused() -> None:
    recs = [record(GPU_CELL, "host-probe", "pass", DIGEST)]
    check = check_policy(GPU_CELL, PromotionPolicy(), recs)
    assert not check.ok
    assert "missing result: smoke 'boundary' has no result on a sm_90 host" in check.problems
    # results on the wrong GPU do not count for sm_90
    other = [record(GPU_CELL, s, "pass", DIGEST, host=GB10) for s in GPU_CELL.smokes]
    assert len(check_policy(GPU_CELL, PromotionPolicy(), other).problems) == 3


def test_failed_required_smoke_refused_and_latest_result_counts() -> None:
    recs = [record(GPU_CELL, s, "pass", DIGEST, run="r1") for s in GPU_CELL.smokes]
    recs.append(record(GPU_CELL, "boundary", "fail", DIGEST, run="r2", failure_class="illegal-memory-access",
                       reason="CUDA error: an illegal memory access was encountered"))
    check = check_policy(GPU_CELL, PromotionPolicy(), recs)
    assert not check.ok
    assert any("required smoke 'boundary' is fail [illegal-memory-access]" in p and "(run r2)" in p
               for p in check.problems)
    # a smoke that is not required may fail
    ok = check_policy(GPU_CELL, PromotionPolicy(required_smokes=["host-probe", "fwd-bwd"]), recs)
    assert ok.ok, ok.problems
    # xfail only counts when the policy accepts it
    recs2 = [record(GPU_CELL, s, "xfail" if s == "boundary" else "pass", DIGEST) for s in GPU_CELL.smokes]
    assert not check_policy(GPU_CELL, PromotionPolicy(), recs2).ok
    assert check_policy(GPU_CELL, PromotionPolicy(accept=["pass", "xfail"]), recs2).ok


def test_min_clean_runs_and_hosts_list() -> None:
    recs = [record(GPU_CELL, s, "pass", DIGEST) for s in GPU_CELL.smokes]
    check = check_policy(GPU_CELL, PromotionPolicy(min_clean_runs=2), recs)
    assert f"smoke 'boundary' has 1 clean run(s) of {DIGEST} on a sm_90 host, the policy needs 2" in check.problems
    recs += [record(GPU_CELL, s, "pass", DIGEST, run="r2") for s in GPU_CELL.smokes]
    assert check_policy(GPU_CELL, PromotionPolicy(min_clean_runs=2), recs).ok
    policy = PromotionPolicy(hosts=["sm_90", "H100"])
    problems = check_policy(GPU_CELL, policy, recs).problems
    assert problems == [f"missing result: smoke {s!r} has no result on a H100 host" for s in GPU_CELL.smokes]


def test_every_gpu_of_the_stack_that_the_arch_covers() -> None:
    multi = make_cell("b2b2b2b2b2b2", "gb", {"gpu": "sm_120"}, smokes=("probe",), arch_flags=("12.0f",),
                      compute_capability="12.0")
    recs = [record(multi, "probe", "pass", DIGEST, host=HostFingerprint.make(
        hostname="rtx", gpu_name="RTX PRO 6000", gpu_count=1, driver="580.142", capability="12.0"))]
    # the stack also has sm_121 (GB10) cells: a 12.0f binary runs there too, so results are needed there
    check = check_policy(multi, PromotionPolicy(), recs, stack_gpus=["sm_120", "sm_121", "sm_90"])
    assert check.problems == ["missing result: smoke 'probe' has no result on a sm_121 host"]
    recs.append(record(multi, "probe", "pass", DIGEST, host=GB10))
    assert check_policy(multi, PromotionPolicy(), recs, stack_gpus=["sm_120", "sm_121", "sm_90"]).ok


def test_group_selectors_expand_to_the_catalogue_smokes() -> None:
    cell = make_cell("g1g1g1g1g1g1", "xf", {"gpu": "sm_90"}, smokes=("host-probe", "tiled-boundary"))
    catalogue = ["host-probe", "tiled-boundary-output", "tiled-boundary-a", "tiled-boundary-b", "other"]
    policy = PromotionPolicy(required_smokes=["tiled-boundary"])
    recs = [record(cell, "tiled-boundary-output", "pass", DIGEST), record(cell, "tiled-boundary-a", "pass", DIGEST)]
    check = check_policy(cell, policy, recs, catalogue=catalogue)
    assert check.problems == ["missing result: smoke 'tiled-boundary-b' has no result on a sm_90 host"]
    recs.append(record(cell, "tiled-boundary-b", "fail", DIGEST, failure_class="illegal-memory-access"))
    check = check_policy(cell, policy, recs, catalogue=catalogue)
    assert check.problems == ["required smoke 'tiled-boundary-b' is fail [illegal-memory-access] on "
                              f"{H200.label()} (run r1)"]
    assert check_policy(cell, PromotionPolicy(required_smokes=["other"]), recs, catalogue=catalogue).problems == \
        ["required smoke 'other' is not selected for stack 'xf'"]


def test_results_without_digest_or_from_two_images_refused() -> None:
    recs = [record(CPU_CELL, s, "pass", None, host=CPU) for s in CPU_CELL.smokes]
    check = check_policy(CPU_CELL, PromotionPolicy(), recs)
    assert any("not measured in an image" in p for p in check.problems)
    recs = [record(CPU_CELL, "host-probe", "pass", DIGEST, host=CPU),
            record(CPU_CELL, "python-imports", "pass", "sha256:" + "2" * 64, host=CPU)]
    check = check_policy(CPU_CELL, PromotionPolicy(), recs)
    assert any("measured on different images" in p for p in check.problems)


def test_policy_from_matrix_toml(tmp_path: Path, capsys) -> None:
    from pinmatrix.project.matrix_toml import load_matrix

    root = Path(__file__).resolve().parents[3]
    text = (root / "matrix.toml").read_text()
    assert "[matrix.promotion]\nrequired_smokes = [\"*\"]\nhosts = \"every-gpu\"\nmin_clean_runs = 1\n" in text
    text = text.replace("min_clean_runs = 1", "min_clean_runs = 2", 1)
    text = text.replace('[stacks.demo.packages]', '[stacks.demo.promotion]\nrequired_smokes = ["python-imports"]\n'
                        '\n[stacks.demo.packages]', 1)
    (tmp_path / "matrix.toml").write_text(text)
    matrix = load_matrix(tmp_path / "matrix.toml")
    demo = policy_for(matrix, "demo")
    assert demo.required_smokes == ["python-imports"] and demo.min_clean_runs == 2
    assert policy_for(matrix, "gb10-nvfp4").required_smokes == ["*"]
    assert "xformers-tiled-matmul-boundary" in policy_for(matrix, "h200").required_smokes
    (tmp_path / "matrix.toml").write_text(text.replace("min_clean_runs = 2", "min_clean_runs = 0"))
    with pytest.raises(Exception) as err:
        policy_for(load_matrix(tmp_path / "matrix.toml"), "demo")
    msg = str(err.value)
    assert msg.startswith("matrix.toml:") and "matrix.promotion.min_clean_runs" in msg


# ------------------------------------------------------------------------------------------ registry


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


# ------------------------------------------------------------------------------------------ command




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


# ------------------------------------------------------------------------------- host-runtime results


def _host_run(cell, smoke: str, identical: bool) -> SmokeRecord:
    rec = record(cell, smoke, "pass", None)
    rec.environment["host_vs_lock"] = {"identical": identical, "python_differs": not identical, "packages": []}
    return rec


def test_host_runs_count_only_when_the_policy_says_so_and_the_host_matched_the_lock() -> None:
    smokes = ("host-probe", "boundary", "fwd-bwd")
    refuse = PromotionPolicy.model_validate({"hosts": ["sm_90"]})
    identical = PromotionPolicy.model_validate({"hosts": ["sm_90"], "host_runs": "identical"})
    same = [_host_run(GPU_CELL, s, True) for s in smokes]
    differs = [_host_run(GPU_CELL, s, False) for s in smokes]
    refused = check_policy(GPU_CELL, refuse, same)
    assert not refused.ok and any('host_runs = "refuse"' in p for p in refused.problems), refused.problems
    assert check_policy(GPU_CELL, identical, same).ok
    not_same = check_policy(GPU_CELL, identical, differs)
    assert not not_same.ok and any("did not" in p for p in not_same.problems), not_same.problems
    with pytest.raises(ValidationError):
        PromotionPolicy.model_validate({"host_runs": "always"})
