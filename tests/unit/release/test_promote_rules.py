"""The promotion rules, each pinned by a test that fails when the rule is removed: clean runs counted on the
tested digest only, "latest" by finish time per host (not by import order). The rules that need a registry
(the attestation bound to the promoted digest, the tested image still there, rebuild -> smoke -> promote):
tests/integration/test_promote_rules_registry.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from promote_rules_data import CELL, GB10, T0, rec
from promotion import push_image  # noqa: F401 - the fixture
from report_data import H200, make_cell

from pinmatrix.errors import PinmatrixError
from pinmatrix.project.known_good import read_known_good
from pinmatrix.project.policy import PromotionPolicy
from pinmatrix.release.attest import finished_key, latest_per_smoke_host
from pinmatrix.release.promote import check_policy
from pinmatrix.results.store import HostFingerprint, ResultsStore, SmokeRecord

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


# ------------------------------------------------------------------------------- clean runs per digest


def test_one_pass_on_image_a_and_one_on_image_b_do_not_promote_b() -> None:
    recs = [rec("boundary", "pass", A, run="r1", finished="2026-11-29T10:00:00Z"),
            rec("boundary", "pass", B, run="r2", finished="2026-11-29T11:00:00Z")]
    check = check_policy(CELL, PromotionPolicy(min_clean_runs=2), recs)
    assert check.digest == B  # the latest result is on B: B would be promoted ...
    assert check.problems == [f"smoke 'boundary' has 1 clean run(s) of {B} on a sm_90 host, the policy needs 2"]
    # ... and a second clean run on B itself meets the policy
    recs.append(rec("boundary", "pass", B, run="r3", finished="2026-11-29T12:00:00Z"))
    check = check_policy(CELL, PromotionPolicy(min_clean_runs=2), recs)
    assert check.ok and check.digest == B


def test_clean_runs_on_another_image_count_for_nothing_even_when_many() -> None:
    recs = [rec("boundary", "pass", A, run=f"a{i}", finished=f"2026-11-29T0{i}:00:00Z") for i in range(5)]
    recs.append(rec("boundary", "pass", B, run="b1", finished="2026-11-29T09:00:00Z"))
    problems = check_policy(CELL, PromotionPolicy(min_clean_runs=2), recs).problems
    assert problems == [f"smoke 'boundary' has 1 clean run(s) of {B} on a sm_90 host, the policy needs 2"]


# ------------------------------------------------------------------------------- latest by finish time


def test_an_older_pass_imported_after_a_newer_fail_does_not_make_the_cell_promotable(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "r.sqlite")
    newer_fail = rec("boundary", "fail", A, run="r2", finished="2026-11-29T12:00:00Z")
    older_pass = rec("boundary", "pass", A, run="r1", finished="2026-11-29T10:00:00+00:00")
    store.record(newer_fail)
    store.import_json([older_pass.to_dict()])  # imported last, finished first
    records = store.query(cell_id=CELL.id)
    assert [r.run_id for r in records] == ["r2", "r1"]  # insertion order
    check = check_policy(CELL, PromotionPolicy(), records)
    assert not check.ok
    assert check.problems[0].startswith("required smoke 'boundary' is fail [illegal-memory-access]")
    assert "(run r2)" in check.problems[0]
    # the store's own "latest" agrees
    assert [r.run_id for r in store.query(cell_id=CELL.id, latest_only=True)] == ["r2"]


def test_latest_is_per_host_and_ties_go_to_the_later_record() -> None:
    t = "2026-11-29T10:00:00Z"
    recs = [rec("boundary", "fail", A, run="r1", finished=t), rec("boundary", "pass", A, run="r2", finished=t),
            rec("boundary", "pass", A, run="g1", finished="2026-11-29T13:00:00Z", host=GB10),
            rec("boundary", "fail", A, run="g0", finished="2026-11-29T09:00:00Z", host=GB10)]
    latest = latest_per_smoke_host(recs)
    assert {(r.host.id, r.run_id) for r in latest} == {(H200.id, "r2"), (GB10.id, "g1")}
    assert finished_key(rec("x", "pass", A, run="x", finished="not a time")) < finished_key(recs[0])
    # a zone-less time is UTC, equal to the same instant written with Z
    assert finished_key(rec("x", "pass", A, run="x", finished="2026-11-29T10:00:00")) == finished_key(recs[0])


# ------------------------------------------------------------------------------------------ registry


# ---------------------------------------------------------------------------------------------- pull


@pytest.mark.parametrize("reference", [f"127.0.0.1:5000/pinmatrix/known-good/xf@{B}",
                                       "127.0.0.1:5000/pinmatrix/known-good/xf:known-good",
                                       f"127.0.0.1:5000/pinmatrix/known-good/xf:cell-1@{B}"])
def test_pull_takes_only_a_reference_that_carries_the_recorded_digest(reference: str) -> None:
    from pinmatrix.release.pull import reference_of

    entry = {"cell_id": CELL.id, "digest": A, "reference": reference}
    with pytest.raises(ValueError, match=f"does not carry the recorded digest {A}"):
        reference_of(entry)
    ok = reference_of({**entry, "reference": f"127.0.0.1:5000/pinmatrix/known-good/xf@{A}"})
    assert (ok.digest, ok.repository, ok.tag) == (A, "pinmatrix/known-good/xf", None)


# --------------------------------------------------------------------------------------- known-good.toml


def test_known_good_file_round_trip_header_and_errors(tmp_path: Path) -> None:
    from pinmatrix.project.known_good import HEADER, record_promotion

    path = tmp_path / "sub" / "known-good.toml"
    assert read_known_good(path) == []
    entry = {"stack": "xf", "cell_id": "c1", "digest": A, "reference": f"r/x@{A}", "promoted_at": "2026-11-30T10:00:00Z",
             "min_driver": None, "pins": {"gpu": "sm_90", "none": None}, "arch_flags": ["9.0a", None],
             "evidence": [{"smoke": "boundary", "image_digest": None, "run_id": "r1"}]}
    record_promotion(path, entry)
    text = path.read_text()
    assert text.startswith("".join(f"# {line}\n" for line in HEADER.splitlines()))
    record_promotion(path, {**entry, "cell_id": "c2", "evidence": []})
    assert text in path.read_text() and path.read_text().count("\n[[promoted]]\n") == 2
    first, second = read_known_good(path)
    assert "min_driver" not in first and first["pins"] == {"gpu": "sm_90"} and first["arch_flags"] == ["9.0a"]
    assert first["evidence"] == [{"smoke": "boundary", "run_id": "r1"}] and second.get("evidence", []) == []
    assert sorted(p.name for p in path.parent.iterdir()) == ["known-good.toml"]  # no temporary file left
    for key in ("stack", "cell_id", "digest", "reference", "promoted_at"):
        bad = tmp_path / f"bad-{key}.toml"
        record_promotion(bad, {k: v for k, v in entry.items() if k != key})
        record_promotion(bad, entry)
        line = bad.read_text().splitlines().index("[[promoted]]") + 1  # the first entry's table
        with pytest.raises(PinmatrixError, match=rf"^{bad}:{line}: promoted\.0\.{key}: required key is missing$"):
            read_known_good(bad)
    broken = tmp_path / "broken.toml"
    broken.write_text("[[promoted]\n")
    with pytest.raises(PinmatrixError, match=rf"^{broken}:1: syntax error: "):
        read_known_good(broken)
    broken.write_text('[[promoted]]\nstack = "s"\ncell_id = "c"\ndigest = "sha256:1"\n')
    with pytest.raises(PinmatrixError, match=rf"^{broken}:4: promoted\.0\.digest: String should match pattern"):
        read_known_good(broken)


def test_pull_judges_newest_first_once_per_cell() -> None:
    from pinmatrix.release.candidates import choose
    from pinmatrix.release.pull import judge, requirements_of

    def e(cell: str, when: str, stack: str = "xf", **kw) -> dict:  # noqa: ANN003
        return {"stack": stack, "cell_id": cell, "cell_name": f"{stack}[{cell}]", "digest": A,
                "reference": f"r/x@{A}", "promoted_at": when, **kw}

    host = HostFingerprint.make(hostname="h", gpu_name="NVIDIA H200", gpu_count=1, driver="580.159.04",
                                capability="9.0")
    entries = [e("old", "2026-11-01T00:00:00Z", min_driver="580.65.06", arch_flags=["9.0a"]),
               e("new", "2026-11-20T00:00:00Z", min_driver="590.44.01", arch_flags=["9.0a"]),
               e("old", "2026-11-10T00:00:00Z", min_driver="999.0", arch_flags=["9.0a"]),
               e("cpu", "2026-11-05T00:00:00Z", stack="demo", gpu_required=False),
               e("tie", "2026-11-01T00:00:00Z", min_driver="580.65.06", arch_flags=["9.0a"])]
    verdicts = judge(entries, host)
    assert [(v.entry["cell_id"], v.ok) for v in verdicts] == [("new", False), ("old", False), ("cpu", True),
                                                               ("tie", True)]
    assert verdicts[1].entry["min_driver"] == "999.0"  # a cell promoted twice is judged by its newest entry
    assert any("590.44.01" in r for r in verdicts[0].reasons)
    assert choose(verdicts).entry["cell_id"] == "cpu"
    assert [v.entry["cell_id"] for v in judge(entries, host, stack="xf")] == ["new", "old", "tie"]
    assert choose(judge(entries, host, stack="xf")).entry["cell_id"] == "tie"
    assert choose([]) is None
    assert verdicts[2].label == "cpu demo[cpu] (promoted 2026-11-05T00:00:00Z)"
    assert e("x", "t", cell_name="").get("cell_name") == "" and \
        judge([{**e("x", "t"), "cell_name": ""}], host)[0].label == "x (promoted t)"
    req = requirements_of({})
    assert (req.gpu_required, req.min_driver, req.compute_capability, req.arch_flags) == (True, None, None, ())
    req = requirements_of({"gpu_required": 0, "arch_flags": None, "min_driver": "1", "compute_capability": "9.0"})
    assert (req.gpu_required, req.arch_flags, req.min_driver, req.compute_capability) == (False, (), "1", "9.0")


# ------------------------------------------------------------------------------------------------ policy

POLICY_MATRIX = """\
[matrix]
[matrix.promotion]
min_clean_runs = MATRIX_RUNS
[stacks.s]
gpu_required = false
STACK_PROMOTION
[stacks.s.packages]
six = ["1.17.0"]
"""


@pytest.mark.parametrize(("matrix_runs", "stack_promotion", "where", "line"), [
    ("0", "", "matrix.promotion.min_clean_runs", 3),
    ("1", "[stacks.s.promotion]\nmin_clean_runs = -1\n", "stacks.s.promotion.min_clean_runs", 7),
    ("1", "[stacks.s.promotion]\naccept = [\"pass\", \"fail\"]\n", "stacks.s.promotion.accept", 7),
])
def test_policy_errors_name_the_table_that_set_the_key(tmp_path: Path, matrix_runs: str, stack_promotion: str,
                                                       where: str, line: int) -> None:
    from pinmatrix.project.matrix_toml import load_matrix
    from pinmatrix.project.policy import policy_for

    path = tmp_path / "matrix.toml"
    path.write_text(POLICY_MATRIX.replace("MATRIX_RUNS", matrix_runs).replace("STACK_PROMOTION", stack_promotion))
    matrix = load_matrix(path)
    with pytest.raises(Exception) as err:
        policy_for(matrix, "s")
    assert str(err.value).startswith(f"matrix.toml:{line}: {where}: ")
    with pytest.raises(Exception, match=r"^matrix.toml: unknown stack 'nope' \(stacks: s\)$"):
        policy_for(matrix, "nope")


def test_policy_validation_messages() -> None:
    from pydantic import ValidationError

    for bad, message in (({"accept": ["nope"]}, "unknown status 'nope' (statuses: pass, fail, skip, xfail, xpass, "
                                              "degraded)"),
                         ({"accept": ["pass", "fail"]}, "'fail' can never count as clean"),
                         ({"hosts": []}, 'hosts: list at least one gpu, or use "every-gpu"')):
        with pytest.raises(ValidationError) as err:
            PromotionPolicy.model_validate(bad)
        assert message in str(err.value)
    ok = PromotionPolicy.model_validate({"accept": ["pass", "xfail"], "hosts": ["sm_90"]})
    assert ok.accept == ["pass", "xfail"] and ok.hosts == ["sm_90"] and ok.required_smokes == ["*"]
    assert (ok.min_clean_runs, ok.repository, ok.tag) == (1, "known-good", "known-good")


def test_required_gpus_and_smokes() -> None:
    from pinmatrix.release.promote import required_gpus, required_smoke_names

    cpu = make_cell("c" * 12, "demo", {"six": "1"}, smokes=("a", "b"), gpu_required=False)
    assert required_gpus(cpu, PromotionPolicy()) == ["*"]
    assert required_gpus(cpu, PromotionPolicy(hosts=["sm_90", "H200"])) == ["sm_90", "H200"]
    two = make_cell("d" * 12, "xf", {"gpu": "sm_90, sm_100"}, arch_flags=("9.0a",))
    assert required_gpus(two, PromotionPolicy(), ["sm_90", "sm_120", "weird"]) == ["sm_90", "sm_100"]
    nogpu = make_cell("e" * 12, "xf", {}, arch_flags=())
    assert required_gpus(nogpu, PromotionPolicy()) == ["*"]
    # without the catalogue, selectors are matched against the cell's own selection
    assert required_smoke_names(cpu, PromotionPolicy()) == (["a", "b"], [])
    assert required_smoke_names(cpu, PromotionPolicy(required_smokes=["b", "zz"])) == (["b"], ["zz"])
    assert required_smoke_names(cpu, PromotionPolicy(required_smokes=["*", "zz"])) == (["a", "b"], ["zz"])
    assert required_smoke_names(cpu, PromotionPolicy(), ["a", "a-x", "b", "c"]) == (["a", "a-x", "b"], [])


def test_a_known_good_file_without_promotions(tmp_path: Path) -> None:
    from pinmatrix.project.known_good import HEADER

    path = tmp_path / "known-good.toml"
    path.write_text("".join(f"# {line}\n" for line in HEADER.splitlines()))
    assert read_known_good(path) == []


# ------------------------------------------------------------------------- every refusal, word for word

C3 = make_cell("5e6f708192a3", "words", {"driver": "580.159.04", "gpu": "sm_90"}, smokes=("boundary", "probe", "extra"))


def _problems(records: list[SmokeRecord], cell=C3, **policy) -> list[str]:  # noqa: ANN001, ANN003
    return check_policy(cell, PromotionPolicy.model_validate({"hosts": ["sm_90"], **policy}), records).problems


def test_a_failed_smoke_is_named_with_its_class_host_run_and_reason() -> None:
    failed = dataclasses.replace(rec("boundary", "fail", A, run="r1", finished=T0, cell=C3),
                                 reason="an illegal memory access was encountered")
    passed = [rec(s, "pass", A, run="r1", finished=T0, cell=C3) for s in ("probe", "extra")]
    assert _problems([failed, *passed]) == [
        f"required smoke 'boundary' is fail [illegal-memory-access] on {H200.label()} (run r1): "
        "an illegal memory access was encountered"]
    bare = rec("boundary", "skip", A, run="r2", finished="2026-11-29T11:00:00Z", cell=C3)  # no class, no reason
    assert _problems([failed, bare, *passed]) == [f"required smoke 'boundary' is skip on {H200.label()} (run r2)"]


def test_results_on_several_images_are_listed_per_image() -> None:
    recs = [rec("boundary", "pass", A, run="r1", finished=T0, cell=C3), rec("probe", "pass", A, run="r1", finished=T0,
            cell=C3), rec("extra", "pass", B, run="r2", finished=T0, cell=C3)]
    assert _problems(recs)[0] == f"the results were measured on different images: {A} (boundary, probe); {B} (extra)"


def test_host_runs_that_do_not_count_are_named_with_the_policy_that_refuses_them() -> None:
    host_runs = [rec(s, "pass", None, run="h1", finished=T0, cell=C3) for s in C3.smokes]
    assert _problems(host_runs) == [
        "results of boundary, extra, probe were not measured in an image (no image digest recorded): the stack's "
        "promotion policy does not count host runs (host_runs = \"refuse\")"]
    for r in host_runs:
        r.environment["host_vs_lock"] = {"identical": False}
    assert _problems(host_runs, host_runs="identical") == [
        "results of boundary, extra, probe were not measured in an image (no image digest recorded): the stack's "
        "promotion policy counts host runs only when the host matched the cell's lock (host_runs = \"identical\"), "
        "and these did not"]
    for r in host_runs:
        r.environment["host_vs_lock"] = {"identical": True}
    assert _problems(host_runs, host_runs="identical") == []
    assert _problems(host_runs, host_runs="identical", min_clean_runs=2) == [
        f"smoke {s!r} has 1 clean run(s) on a sm_90 host, the policy needs 2" for s in C3.smokes]


def test_a_counted_host_run_and_image_runs_promote_that_image() -> None:
    """Host runs the policy counts are set aside one by one, and the image the other smokes ran on is the one
    checked and promoted."""
    host = rec("boundary", "pass", None, run="h1", finished=T0, cell=C3)
    host.environment["host_vs_lock"] = {"identical": True}
    image = [rec(s, "pass", A, run="r1", finished=T0, cell=C3) for s in ("probe", "extra")]
    check = check_policy(C3, PromotionPolicy(hosts=["sm_90"], host_runs="identical"), [host, *image])
    assert check.ok and check.digest == A
    assert {(e.smoke, e.host, e.finished_at, e.image_digest) for e in check.evidence} == {
        ("boundary", H200.label(), T0, None), ("probe", H200.label(), T0, A), ("extra", H200.label(), T0, A)}


def test_a_gpu_without_results_does_not_hide_the_next_gpu() -> None:
    recs = [rec(s, "fail", A, run="g1", finished=T0, host=GB10, cell=C3) for s in C3.smokes]
    problems = _problems(recs, hosts=["sm_90", "sm_121"])
    assert problems[:3] == [f"missing result: smoke {s!r} has no result on a sm_90 host" for s in ("boundary",)] + [
        f"required smoke 'boundary' is fail [illegal-memory-access] on {GB10.label()} (run g1)",
        "missing result: smoke 'probe' has no result on a sm_90 host"]


def test_group_selectors_without_a_catalogue_match_recorded_smokes_by_group() -> None:
    """Without the smoke catalogue, a cell's group selector is matched against the recorded smoke names, and
    a required smoke that is a member of a selected group is known."""
    cell = make_cell("6f708192a3b4", "grp", {"driver": "580.159.04", "gpu": "sm_90"}, smokes=("grp",))
    recs = [rec("grp-a", "pass", A, run="r1", finished=T0, cell=cell)]
    assert check_policy(cell, PromotionPolicy(hosts=["sm_90"]), recs).ok
    assert check_policy(cell, PromotionPolicy(hosts=["sm_90"], required_smokes=["grp-a"]), recs).ok
    with_catalogue = check_policy(cell, PromotionPolicy(hosts=["sm_90"]), recs, catalogue=["grp-a", "other"])
    assert with_catalogue.ok and [e.smoke for e in with_catalogue.evidence] == ["grp-a"]


def test_a_cell_that_requires_nothing_has_no_required_results() -> None:
    empty = make_cell("708192a3b4c5", "none", {"driver": "580.159.04", "gpu": "sm_90"}, smokes=())
    assert check_policy(empty, PromotionPolicy(hosts=["sm_90"]), []).problems == ["no required results"]
    assert check_policy(empty, PromotionPolicy(hosts=["sm_90"]), []).cell_id == empty.id


def test_required_gpus_use_the_cells_capability_when_it_names_no_arch_flags() -> None:
    from pinmatrix.release.promote import required_gpus

    plain = dataclasses.replace(make_cell("8192a3b4c5d6", "cap", {"driver": "580.159.04", "gpu": "sm_90"}),
                                arch_flags=(), compute_capability="9.0")
    assert required_gpus(plain, PromotionPolicy(), ["sm_90", "sm_100", "sm_120"]) == ["sm_90"]


