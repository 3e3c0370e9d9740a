"""Promotion policy checks without a registry. Promotion by digest against a real registry:
tests/integration/test_promote_registry.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from promote_hosts import CPU
from promotion import CPU_CELL, DIGEST, GPU_CELL, record
from pydantic import ValidationError
from report_data import H200, make_cell

from pinmatrix.project.policy import PromotionPolicy, policy_for
from pinmatrix.release.promote import check_policy
from pinmatrix.results.store import HostFingerprint, SmokeRecord

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


# ------------------------------------------------------------------------------------------ command


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
