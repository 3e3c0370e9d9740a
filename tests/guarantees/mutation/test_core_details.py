"""Details of the core that mutation testing (nox -s mutation, docs/testing.md) found untested: reading the
signature table, the last-line and signal rules of classification, known issues given as plain tables, the
results store's JSON exchange (exact format, defaults, malformed rows), run order, and nvidia-smi failures."""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

import pytest
from store_data import run_ids

from pinmatrix.errors import PinmatrixError
from pinmatrix.project.signatures import load_signatures
from pinmatrix.results.store import HostFingerprint, ResultsStore, SmokeRecord, write_json_atomic
from pinmatrix.results.storefile import ResultsError
from pinmatrix.smoke.classify import classify, signal_name
from pinmatrix.smoke.known import apply_known_issues

SMI = Path(__file__).resolve().parents[2] / "data" / "nvidia-smi"

# ----------------------------------------------------------------------------------------- signatures


def test_load_signatures_reads_every_field(tmp_path: Path) -> None:
    path = tmp_path / "sig.toml"
    path.write_text(
        '[[signature]]\nclass = "a"\npattern = "Boom (\\\\d+)"\nstatus = "degraded"\nmetric = "booms"\ncase = true\n'
        'source = "here"\n\n[[signature]]\nclass = "b"\npattern = "quiet"\n')
    a, b = load_signatures(path)
    assert (a.failure_class, a.status, a.metric, a.source) == ("a", "degraded", "booms", "here")
    assert a.pattern.search("Boom 3") and not a.pattern.search("boom 3")  # case = true: case-sensitive
    assert (b.failure_class, b.status, b.metric, b.source) == ("b", None, None, "")
    assert b.pattern.search("QUIET please")  # default: case-insensitive
    path.write_text("")
    assert load_signatures(path) == ()


@pytest.mark.parametrize(("text", "message"), [
    ("[[signature]\n", "1: syntax error: Expected ']]'"),
    ('[[signature]]\nclass = "a"\npattern = "x"\n[[signature]]\nclass = "b"\n', "4: signature #2: 'pattern'"),
    ('[[signature]]\npattern = "x"\n', "1: signature #1: 'class'"),
    ('[[signature]]\nclass = "a"\npattern = "(unclosed"\n', "3: signature #1: missing ), unterminated subpattern"),
])
def test_load_signatures_errors_name_the_file_and_row(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "sig.toml"
    path.write_text(text)
    with pytest.raises(PinmatrixError) as err:
        load_signatures(path)
    assert str(err.value).startswith(f"{path}:{message}")
    with pytest.raises(PinmatrixError, match="absent.toml: no such file$"):
        load_signatures(tmp_path / "absent.toml")


def test_last_line_and_signal_names() -> None:
    out = classify(result=None, returncode=2, timed_out=False, log_text="first\n\n   last words  \n\n\n", timeout_s=1)
    assert out.reason == "exited with status 2 without a result: last words"
    out = classify(result=None, returncode=2, timed_out=False, log_text="\n \n", timeout_s=1)
    assert out.reason == "exited with status 2 without a result: no output"
    out = classify(result=None, returncode=2, timed_out=False, log_text="x" * 500 + "\n", timeout_s=1)
    assert out.reason.endswith(": " + "x" * 300)
    assert signal_name(-9) == "SIGKILL" and signal_name(-11) == "SIGSEGV" and signal_name(-99) == "signal 99"
    killed = classify(result=None, returncode=-9, timed_out=False, log_text="", timeout_s=1)
    assert (killed.status, killed.failure_class, killed.reason) == ("fail", "crash", "killed by SIGKILL")


def test_known_issues_given_as_plain_tables() -> None:
    issue = {"id": "k", "smokes": ["boundary*"], "expect": "fail", "failure_class": "illegal-memory-access",
             "note": "int32 offsets"}
    v = apply_known_issues("boundary-a", "fail", "illegal-memory-access", "died", [issue])
    assert (v.status, v.known_issue, v.failure_class) == ("xfail", "k", "illegal-memory-access")
    assert v.reason == "known issue k: int32 offsets (died)"
    v = apply_known_issues("boundary-a", "fail", "timeout", "hung", [issue])
    assert (v.status, v.known_issue) == ("fail", None)
    assert v.reason == "hung [known issue k expects illegal-memory-access, this is timeout]"
    v = apply_known_issues("boundary-a", "pass", None, "", [issue])
    assert v.status == "xpass" and v.reason == "expected fail by known issue k, but it passed: the issue may be gone " \
                                               "(int32 offsets)"
    # a fail without a class takes the issue's class; an issue without smokes matches nothing
    assert apply_known_issues("boundary-a", "fail", None, "x", [issue]).failure_class == "illegal-memory-access"
    assert apply_known_issues("boundary-a", "fail", None, "x", [{"id": "n", "expect": "fail"}]).status == "fail"
    no_note = apply_known_issues("boundary-a", "fail", "illegal-memory-access", "x", [{**issue, "note": None}])
    assert no_note.reason == "known issue k:  (x)"


# -------------------------------------------------------------------------------------------- results


def test_write_json_atomic_exact_text(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "out.json"
    write_json_atomic(path, {"b": 1, "a": [1, "x"]})
    assert path.read_text() == '{\n  "a": [\n    1,\n    "x"\n  ],\n  "b": 1\n}\n'
    write_json_atomic(path, [])
    assert path.read_text() == "[]\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["out.json"]


ROW = {
    "cell_id": "c1", "stack": "s", "smoke": "torch-gemm", "run_id": "r1", "status": "pass",
    "started_at": "2026-11-29T10:00:00Z", "finished_at": "2026-11-29T10:00:01Z",
    "host": {"id": "h1"},
}


def test_result_rows_take_defaults_and_name_what_is_missing() -> None:
    rec = SmokeRecord.from_dict({**ROW, "reason": None, "metrics": None, "duration_s": None, "environment": None,
                                 "params": None})
    assert (rec.reason, rec.metrics, rec.duration_s, rec.environment, rec.params) == ("", {}, 0.0, {}, {})
    assert (rec.failure_class, rec.log_path, rec.known_issue, rec.image_digest) == (None, None, None, None)
    assert rec.host == HostFingerprint(id="h1", hostname="", gpu_name=None, gpu_count=0, driver=None,
                                       capability=None, cuda_driver_api=None)
    full = SmokeRecord.from_dict({**ROW, "reason": "ok", "metrics": {"x": 1}, "duration_s": "2.5",
                                  "image_digest": "sha256:" + "a" * 64, "known_issue": "k", "log_path": "l",
                                  "failure_class": None, "environment": {"driver": "580"}, "params": {"M": 3},
                                  "host": {"id": "h2", "hostname": "gpu1", "gpu_count": "2", "gpu_name": "H200",
                                           "driver": "580.159.04", "capability": "9.0", "cuda_driver_api": "13.0"}})
    assert full.to_dict()["host"] == {"id": "h2", "hostname": "gpu1", "gpu_name": "H200", "gpu_count": 2,
                                      "driver": "580.159.04", "capability": "9.0", "cuda_driver_api": "13.0"}
    back = SmokeRecord.from_dict(full.to_dict())
    assert back == full and back.duration_s == 2.5 and back.params == {"M": 3}
    for key in ("cell_id", "stack", "smoke", "run_id", "status", "started_at", "finished_at", "host"):
        row = {k: v for k, v in ROW.items() if k != key}
        with pytest.raises(ResultsError, match=f"^malformed result row: missing or bad field '{key}'$"):
            SmokeRecord.from_dict(row)
    with pytest.raises(ResultsError, match="malformed result row"):
        SmokeRecord.from_dict({**ROW, "duration_s": "fast"})
    with pytest.raises(ResultsError, match="status 'great' is not one of pass, fail"):
        SmokeRecord.from_dict({**ROW, "status": "great"})


def test_import_counts_rows_and_run_ids_keep_first_seen_order(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "r.sqlite")
    rows = [{**ROW, "run_id": run, "smoke": smoke} for run, smoke in
            (("r9", "a"), ("r2", "a"), ("r9", "b"), ("r5", "a"))]
    assert store.import_json(rows) == 4
    assert store.import_json([]) == 0
    assert run_ids(store) == ["r9", "r2", "r5"]
    for bad in ({"rows": rows}, "r9", None):
        with pytest.raises(ResultsError, match="^results import: expected a JSON list of result rows$"):
            store.import_json(bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ nvidia-smi


def _fake_smi(tmp_path: Path, query_rc: int, banner_rc: int) -> None:
    exe = tmp_path / "bin" / "nvidia-smi"
    exe.parent.mkdir(exist_ok=True)
    exe.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"if sys.argv[1:]:\n    sys.stdout.write(open({str(SMI / 'h200-query.csv')!r}).read()); sys.exit({query_rc})\n"
        f"sys.stdout.write(open({str(SMI / 'h200-banner.txt')!r}).read()); sys.exit({banner_rc})\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


def test_nvidia_smi_that_fails_is_no_gpu_but_its_banner_still_counts(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    _fake_smi(tmp_path, query_rc=9, banner_rc=0)
    host = HostFingerprint.detect()
    assert (host.gpu_count, host.is_cpu_only) == (0, True)  # a failing query: no GPU, no guess
    assert host.label().endswith("(cpu-only)")
    _fake_smi(tmp_path, query_rc=0, banner_rc=3)
    host = HostFingerprint.detect()
    assert (host.gpu_count, host.cuda_driver_api) == (1, "13.0")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert HostFingerprint.detect().gpu_count == 0


def test_a_banner_without_a_version_and_a_query_without_capability() -> None:
    from pinmatrix.hostprobe import DriverVersion, Gpu, parse_cuda_version, parse_gpu_query

    assert parse_cuda_version("| NVIDIA-SMI 580 Driver Version: 580 CUDA Version: |\n") is None
    assert parse_cuda_version("CUDA Version: 12.8|") == "12.8"
    assert parse_gpu_query("A, 1, \nB, 2\n,3,4\n") == [Gpu("A", DriverVersion.parse("1"), None)]
    assert re.fullmatch(r"[0-9a-f]{12}", HostFingerprint.compute_id(None, None, None, 0))


# ------------------------------------------------------------------------------------- matrix messages


def test_unknown_keys_say_what_was_meant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pinmatrix.cli import main

    path = tmp_path / "m.toml"
    path.write_text('[matrix]\n[stacks.s]\ngpu_requird = false\nzzqqxx = 1\n[stacks.s.packages]\nsix = ["1.17.0"]\n'
                    '[[known_issues]]\nid = "k"\nsmoke = ["a"]\nexpect = "fail"\nnote = "n"\nwhen = {six = "1.17.0"}\n'
                    '[matrix.base]\nkind = "mmdebstrap"\nwhatever = 1\n')
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert "m.toml:3: stacks.s.gpu_requird: unknown key (did you mean 'gpu_required'?)" in err
    assert ("m.toml:4: stacks.s.zzqqxx: unknown key (expected one of: axes, base, description, exclude, extra, "
            "gpu_required, include, packages, platform, promotion, python, smokes, zip)") in err
    assert "m.toml:9: known_issues.0.smoke: unknown key (did you mean 'smokes'?)" in err
    assert "m.toml:7: known_issues.0.smokes: required key is missing" in err
    assert ("m.toml:15: matrix.base.whatever: unknown key (expected one of: image, kind, mirror, packages, "
            "source_date_epoch, suite, variant)") in err


def test_requirement_urls_must_lie_under_a_declared_index() -> None:
    from pinmatrix.matrix.validation import _under

    index = "https://mirror.example/simple/"
    assert _under("https://mirror.example/simple/six/six-1.17.0-py3-none-any.whl", index)
    assert _under("https://mirror.example/simple", index)  # the index itself
    assert _under("https://mirror.example/simple/x.whl", "https://mirror.example/simple")  # index without slash
    assert _under("https://h/indeX/x.whl", "https://h/indeX")
    assert not _under("https://mirror.example/simplest/x.whl", index)
    assert not _under("https://mirror.example/simple/../evil/x.whl", index)
    assert not _under("https://mirror.example/simple/a/..", index)
    assert not _under("http://mirror.example/simple/x.whl", index)
    assert not _under("https://other.example/simple/x.whl", index)


def test_read_lock_and_pruned_cells(tmp_path: Path) -> None:
    from helpers import read_lock

    from conftest import make_cell
    from pinmatrix.errors import LockError
    from pinmatrix.matrix.selection import load
    from pinmatrix.project.lockfile import lock_path

    cell = make_cell("t", ("six==1.17.0",))
    with pytest.raises(LockError) as err:
        read_lock(cell, tmp_path)
    assert str(err.value) == (f"cell {cell.id} ({cell.name}) has no lock at {lock_path(cell, tmp_path)}: run "
                              f"`pinmatrix lock -k {cell.id}`")
    lock_path(cell, tmp_path).parent.mkdir(parents=True)
    lock_path(cell, tmp_path).write_bytes("six==1.17.0 # \u00e9\n".encode())
    assert read_lock(cell, tmp_path) == "six==1.17.0 # \u00e9\n"
    _, expansion = load(Path(__file__).resolve().parents[3] / "matrix.toml")
    pruned = expansion.pruned[0]
    assert pruned.to_dict() == {"stack": pruned.stack, "name": pruned.name, "pins": pruned.pins,
                                "reasons": pruned.reasons} and pruned.reasons


# ------------------------------------------------------------------------------------ classification rules

CUSTOM = (
    '[[signature]]\nclass = "first-fault"\npattern = "AAA"\n\n[[signature]]\nclass = "second-fault"\npattern = "BBB"\n\n'
    '[[signature]]\nclass = "counted"\npattern = "count=(\\\\d+)"\nmetric = "count"\n\n'
    '[[signature]]\nclass = "uncounted"\npattern = "no number here"\nmetric = "nothing"\n')


def test_classification_with_a_table_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "sig.toml"
    path.write_text(CUSTOM)
    table = load_signatures(path)
    log = "x\nBBB then AAA\ncount=7\nno number here\n"
    out = classify(result=None, returncode=1, timed_out=False, log_text=log, timeout_s=1, signatures=table)
    assert (out.status, out.failure_class) == ("fail", "first-fault")  # table order, not log order
    assert out.metrics == {"count": 7, "log_signatures": "first-fault, second-fault, counted, uncounted"}
    assert out.reason == "exited with status 1 without a result (log: BBB then AAA)"
    # the default table knows none of these
    assert classify(result=None, returncode=1, timed_out=False, log_text=log, timeout_s=1).failure_class == "error"
    t = classify(result=None, returncode=None, timed_out=True, log_text=log, timeout_s=2.5, signatures=table)
    assert (t.status, t.failure_class, t.reason, t.metrics["count"]) == (
        "fail", "timeout", "timed out after 2.5 s (log: BBB then AAA)", 7)
    c = classify(result=None, returncode=-6, timed_out=False, log_text=log, timeout_s=1, signatures=table)
    assert (c.status, c.reason, c.metrics["log_signatures"].split(", ")[0]) == (
        "fail", "killed by SIGABRT (log: BBB then AAA)", "first-fault")


def test_result_defaults_unknown_status_and_exit_status() -> None:
    empty = classify(result={}, returncode=0, timed_out=False, log_text="", timeout_s=1)
    assert (empty.status, empty.failure_class, empty.reason) == ("fail", "error", "")
    ok = classify(result={"status": "pass"}, returncode=0, timed_out=False, log_text="AAA\n", timeout_s=1)
    assert (ok.status, ok.failure_class, ok.reason, ok.metrics) == ("pass", None, "", {})
    odd = classify(result={"status": "w" * 60}, returncode=0, timed_out=False,
                   log_text="CUDA error: an illegal memory access was encountered\n", timeout_s=1)
    assert (odd.status, odd.failure_class) == ("fail", "error")
    assert odd.reason == f"recorded an unknown status {'w' * 40!r}"
    assert odd.metrics == {"log_signatures": "illegal-memory-access"}
    lied = classify(result={"status": "pass", "reason": "fine"}, returncode=3, timed_out=False, log_text="",
                    timeout_s=1)
    assert (lied.status, lied.failure_class, lied.reason) == ("fail", "exit-status",
                                                              "recorded 'pass' but exited with status 3 (fine)")
    failed = classify(result={"status": "fail", "failure_class": "wrong-result"}, returncode=1, timed_out=False,
                      log_text="", timeout_s=1)
    assert (failed.status, failed.failure_class) == ("fail", "wrong-result")


def test_record_fields_survive_the_round_trip() -> None:
    rec = SmokeRecord.from_dict({**ROW, "status": "xfail", "failure_class": "illegal-memory-access",
                                 "known_issue": "xformers-tiled-matmul-int32-offsets"})
    assert (rec.failure_class, rec.known_issue) == ("illegal-memory-access", "xformers-tiled-matmul-int32-offsets")


def test_a_host_with_two_kinds_of_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = tmp_path / "nvidia-smi"
    exe.write_text(f"#!{sys.executable}\nimport sys\nif sys.argv[1:]:\n"
                   "    print('NVIDIA H200, 580.159.04, 9.0'); print('NVIDIA RTX PRO 6000, 580.159.04, 12.0')\n"
                   "    print('NVIDIA H200, 580.159.04, 9.0')\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    host = HostFingerprint.detect()
    assert (host.gpu_name, host.capability, host.gpu_count, host.cuda_driver_api) == (
        "NVIDIA H200 + NVIDIA RTX PRO 6000", "12.0,9.0", 3, None)


def test_waiting_messages_go_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    from pinmatrix.results.store import _say_on_stderr

    _say_on_stderr("waiting for the writer pid 42")
    assert capsys.readouterr() == ("", "waiting for the writer pid 42\n")


def test_known_issue_objects_may_lack_fields() -> None:
    from types import SimpleNamespace

    bare = SimpleNamespace(id="k", smokes=("boundary*",), expect="fail")  # no failure_class, no note
    v = apply_known_issues("boundary-a", "fail", "illegal-memory-access", "died", [bare])
    assert (v.status, v.known_issue, v.reason) == ("xfail", "k", "known issue k:  (died)")


def test_scan_reports_the_whole_matching_line_and_integer_metrics_only(tmp_path: Path) -> None:
    from pinmatrix.smoke.classify import scan

    path = tmp_path / "sig.toml"
    path.write_text('[[signature]]\nclass = "n"\npattern = "count=(\\\\w+)"\nmetric = "count"\n\n'
                    '[[signature]]\nclass = "g"\npattern = "group=(\\\\d+)"\n\n'
                    '[[signature]]\nclass = "z"\npattern = "ZZZ"\n')
    table = load_signatures(path)
    (m,) = scan("one\ntwo\nthree count=12 here\nfour\n", table)
    assert (m.line, m.value) == ("three count=12 here", 12)
    (m,) = scan("a\nb\ncount=abc", table)  # not an integer; and the last line has no newline
    assert (m.line, m.value) == ("count=abc", None)
    (m,) = scan("x\ngroup=5\n", table)  # a group but no metric: no value
    assert (m.signature.failure_class, m.value) == ("g", None)
    (m,) = scan("\n" + "p" * 100 + "ZZZ" + "q" * 400, table)
    assert len(m.line) == 300 and m.line.startswith("p" * 100 + "ZZZ")
    (m,) = scan("ZZZ at the very start\nnext", table)
    assert m.line == "ZZZ at the very start"


def test_exit_status_degraded_reason_and_class_length() -> None:
    log = "[AutoTuner]: Skipped 3 unsupported tactic(s) for gemm\nCUDA error: misaligned address\n"
    lied = classify(result={"status": "pass"}, returncode=3, timed_out=False, log_text=log, timeout_s=1)
    assert lied.reason == "recorded 'pass' but exited with status 3"
    assert lied.metrics == {"autotuner_skipped_tactics": 3, "log_signatures": "device-fault"}
    line = "[AutoTuner]: Skipped 3 unsupported tactic(s) for gemm"
    d = classify(result={"status": "pass", "reason": "ran"}, returncode=0, timed_out=False, log_text=line, timeout_s=1)
    assert (d.status, d.failure_class, d.reason) == ("degraded", "unsupported-tactics", f"{line}; ran")
    d = classify(result={"status": "pass"}, returncode=0, timed_out=False, log_text=line, timeout_s=1)
    assert d.reason == line
    long = classify(result={"status": "fail", "failure_class": "c" * 100}, returncode=1, timed_out=False,
                    log_text="", timeout_s=1)
    assert long.failure_class == "c" * 80


def test_known_issue_verdicts_in_every_corner() -> None:
    fail_issue = {"id": "k", "smokes": ["s"], "expect": "fail", "failure_class": "illegal-memory-access", "note": "n"}
    v = apply_known_issues("s", "pass", None, "", [fail_issue])
    assert (v.status, v.known_issue, v.failure_class) == ("xpass", "k", None)
    v = apply_known_issues("s", "fail", "timeout", "hung", [fail_issue])
    assert (v.status, v.failure_class, v.known_issue) == ("fail", "timeout", None)
    # a skip is not the failure an issue expects: left alone, reason untouched
    v = apply_known_issues("s", "skip", None, "no GPU", [fail_issue])
    assert (v.status, v.failure_class, v.reason, v.known_issue) == ("skip", None, "no GPU", None)
    # an issue that expects degraded says nothing about a fail
    degraded = {**fail_issue, "expect": "degraded", "failure_class": "unsupported-tactics"}
    v = apply_known_issues("s", "fail", "error", "boom", [degraded])
    assert (v.status, v.failure_class, v.reason, v.known_issue) == ("fail", "error", "boom", None)
    v = apply_known_issues("s", "degraded", "unsupported-tactics", "slow", [degraded])
    assert (v.status, v.known_issue) == ("xfail", "k")


def test_uv_reason_key_path_and_duplicate_promotions() -> None:
    from pinmatrix.datamodel import key_path
    from pinmatrix.lock.resolve import _uv_reason
    from pinmatrix.release.pull import judge

    assert _uv_reason("warning: slow index\n\n  error: no version of six==9  \n  hint: check\n") == \
        "error: no version of six==9 hint: check"
    assert _uv_reason("WARNING: kept (uv writes warnings lower case)\n") == "WARNING: kept (uv writes warnings lower case)"
    assert _uv_reason("warning: only a warning\n") == "uv failed without a message"
    assert _uv_reason("") == "uv failed without a message"
    assert _uv_reason("e" * 700) == "e" * 600
    assert key_path(()) == "(top)" and key_path(("stacks", "demo", 0)) == "stacks.demo.0"
    host = HostFingerprint.make(hostname="c")
    entries = [{"stack": "d", "cell_id": c, "digest": "x", "reference": "r", "promoted_at": t, "gpu_required": False}
               for c, t in (("a", "2026-11-03"), ("b", "2026-11-02"), ("a", "2026-11-01"), ("z", "2026-10-01"))]
    assert [v.entry["cell_id"] for v in judge(entries, host)] == ["a", "b", "z"]


def test_has_result_follows_the_image_and_the_parameters(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "r.sqlite")
    digest = "sha256:" + "d" * 64
    store.import_json([{**ROW, "image_digest": digest, "params": {"M": 3}}])
    assert store.has_result("c1", "h1", "torch-gemm", digest, {"M": 3})
    assert not store.has_result("c1", "h1", "torch-gemm", digest)
    assert not store.has_result("c1", "h1", "torch-gemm", digest, {"M": 4})
    assert not store.has_result("c1", "h1", "torch-gemm", None, {"M": 3})


# ---------------------------------------------------------------------------------- expansion details

RULES_MATRIX = """\
[matrix]
[stacks.s]
gpu_required = false
include = INCLUDE
exclude = [{ env = { A = "1" } }]
[stacks.s.axes]
env = [{}, { A = "1" }, { label = "lab", vars = { B = "2" } }]
driver = ["580.65.06"]
[stacks.s.packages]
six = ["1.17.0", "1.16.0"]
"""


def test_include_and_exclude_rules_take_every_env_form(tmp_path: Path) -> None:
    from pinmatrix.matrix.selection import load

    path = tmp_path / "m.toml"
    path.write_text(RULES_MATRIX.replace("INCLUDE", '[{ env = { A = "1" }, six = "1.15.0" }, '
                                         '{ env = { label = "lab", vars = { B = "2" } }, six = "1.14.0" }]'))
    _, expansion = load(path)
    assert [c.name for c in expansion.cells] == [
        "s[env=default,six=1.17.0]", "s[env=default,six=1.16.0]", "s[env=lab,six=1.17.0]", "s[env=lab,six=1.16.0]",
        "s[env=A=1,six=1.15.0]", "s[env=lab,six=1.14.0]"]
    assert expansion.cells[-1].env == {"B": "2"} and expansion.cells[-2].env == {"A": "1"}


@pytest.mark.parametrize(("include", "message"), [
    ('[{ driver = { version = "1" } }]', "stacks.s.include.0.driver: bad value for axis 'driver': must be a string"),
    ('[{ six = { version = "1.17.0", bogus = 1 } }]',
     "stacks.s.include.0.six: bad value for axis 'six': Extra inputs are not permitted"),
    ('[{ env = { label = "x", vars = { "bad name" = "1" } } }]', "stacks.s.include.0.env: bad value for axis 'env': "),
])
def test_bad_rule_values_name_the_rule_and_axis(tmp_path: Path, include: str, message: str) -> None:
    from pinmatrix.errors import MatrixError
    from pinmatrix.matrix.selection import expand_matrix
    from pinmatrix.project.matrix_toml import load_matrix

    path = tmp_path / "m.toml"
    path.write_text(RULES_MATRIX.replace("INCLUDE", include))
    with pytest.raises(MatrixError) as err:
        expand_matrix(load_matrix(path))
    lines = str(err.value).splitlines()
    assert any(line.startswith("m.toml:4: " + message) for line in lines), lines


def test_select_cells_by_stack_id_prefix_and_keyword() -> None:
    from pinmatrix.matrix.expand import select_cells
    from pinmatrix.matrix.selection import load

    _, expansion = load(Path(__file__).resolve().parents[3] / "matrix.toml")
    cells = expansion.cells
    h200 = select_cells(cells, stack="h200")
    assert h200 and all(c.stack == "h200" for c in h200) and len(h200) < len(cells)
    first = cells[0]
    assert select_cells(cells, cell_id=first.id[:6]) == [c for c in cells if c.id.startswith(first.id[:6])]
    assert first in select_cells(cells, cell_id=first.id)
    assert select_cells(cells, cell_id="zzzz") == []
    int64 = select_cells(cells, keyword="int64")
    assert int64 and all("int64" in c.name for c in int64)
    assert select_cells(cells, keyword=first.id) == [first]  # the id is part of what -k matches
    assert select_cells(cells, stack="h200", keyword="not int64") == [c for c in h200 if "int64" not in c.name]
    assert select_cells(cells) == cells and select_cells(cells, keyword="") == cells


def test_split_arch_and_known_issue_version_rules() -> None:
    from pinmatrix.archflag import split_flags as split_arch
    from pinmatrix.matrix.expand import _value_matches
    from pinmatrix.project.matrix_toml import AxisValue

    assert split_arch(" 9.0a;12.1a, 8.0 +PTX ") == ["9.0a", "12.1a", "8.0+PTX"]
    assert split_arch("+ptx 9.0") == ["+ptx", "9.0"]  # a leading +PTX has no flag to attach to
    assert split_arch("8.0 +PTX 9.0") == ["8.0+PTX", "9.0"] and split_arch("") == []
    v = AxisValue(version="0.0.35", label="int64")
    assert _value_matches(v, ">=0.0.28,<=0.0.35") and not _value_matches(v, "<0.0.35")
    assert _value_matches(v, "0.0.35") and _value_matches(v, "0.0.35-int64") and not _value_matches(v, "0.0.3")
    assert not _value_matches(v, ">=not a version") and _value_matches("13.0", "~=13.0")
    assert not _value_matches("13.0", "!=13.0") and _value_matches("580.142", "580.142")


def test_compat_tables_and_their_errors() -> None:
    from pinmatrix.matrix.compat import ArchFlag, CompatRules, UnknownVersion

    r = CompatRules.default()
    got = {f: r.arch_min_cuda(ArchFlag.parse(f)) for f in ("9.0", "9.0a", "12.0f", "12.1a", "10.0f", "7.5")}
    assert got == {"9.0": "11.8", "9.0a": "12.0", "12.0f": "12.9", "12.1a": "12.9", "10.0f": "12.9", "7.5": "10.0"}
    with pytest.raises(UnknownVersion, match=r"^unknown arch 11.0 \(known: 7.5, 8.0, "):
        r.arch_min_cuda(ArchFlag.parse("11.0"))
    # family flags need the later of the arch's own floor and the family floor, compared as versions
    mini = CompatRules({"arch": {"min_cuda": {"10.0": "10.0", "9.0": "9.0"}, "family_min_cuda": "9.1"}})
    assert mini.arch_min_cuda(ArchFlag.parse("10.0f")) == "10.0"
    assert mini.arch_min_cuda(ArchFlag.parse("9.0f")) == "9.1"
    assert r.min_driver("13.0") == "580.65.06"
    with pytest.raises(UnknownVersion, match=r"^unknown CUDA version '99.9' \(known: 11.8, 12.0, "):
        r.min_driver("99.9")
    assert r.torch_series("2.9.1")["triton"] == "3.5.1" and r.torch_series("2.9.0")["triton"] == "3.5.0"
    assert r.torch_series("2.10.0+cu128")["triton"] == "3.6.0"
    with pytest.raises(UnknownVersion, match=r"^unknown torch version '1.0.0' \(known series: 2.6, 2.7, "):
        r.torch_series("1.0.0")
    assert r.xformers_torch("0.0.35") == ">=2.10"
    with pytest.raises(UnknownVersion, match=r"^unknown xformers version '0.0.1' \(known: 0.0.28, 0.0.29.post2, "):
        r.xformers_torch("0.0.1")


def test_env_values_given_as_vars_only_or_label_only(tmp_path: Path) -> None:
    from pinmatrix.archflag import split_flags as split_arch
    from pinmatrix.matrix.expand import _value_matches, select_cells
    from pinmatrix.matrix.selection import load
    from pinmatrix.project.matrix_toml import AxisValue

    path = tmp_path / "m.toml"
    path.write_text('[matrix]\n[stacks.s]\ngpu_required = false\n'
                    'exclude = [{ env = { vars = { A = "1" } }, six = "1.16.0" }, { env = { label = "lab" }, six = "1.17.0" }]\n'
                    '[stacks.s.axes]\nenv = [{ vars = { A = "1" } }, { label = "lab" }]\n'
                    '[stacks.s.packages]\nsix = ["1.17.0", "1.16.0"]\n')
    _, expansion = load(path)
    assert [(c.name, c.env) for c in expansion.cells] == [("s[env=A=1,six=1.17.0]", {"A": "1"}),
                                                         ("s[env=lab,six=1.16.0]", {})]
    cells = expansion.cells
    assert select_cells(cells, cell_id=cells[-1].id) == [cells[-1]]  # a later cell: the scan goes on past misses
    assert split_arch(";9.0a") == ["9.0a"] and split_arch("9.0a;;12.1a") == ["9.0a", "12.1a"]
    assert _value_matches(AxisValue(version="0.0.35"), "<1") and not _value_matches(AxisValue(version="2"), "<1")


def test_a_refusal_lists_every_problem_and_group_selectors_expand() -> None:
    from report_data import make_cell

    from pinmatrix.imageref import ImageRef
    from pinmatrix.project.policy import PromotionPolicy
    from pinmatrix.release.promote import PromotionRefused, plan_promotion

    cell = make_cell("9a9a9a9a9a9a", "xf", {"gpu": "sm_90"}, smokes=("host-probe", "tiled-boundary"))
    catalogue = ["host-probe", "tiled-boundary-a", "tiled-boundary-b"]
    with pytest.raises(PromotionRefused) as err:
        plan_promotion(cell, PromotionPolicy(), [], source=ImageRef.parse("127.0.0.1:5000/p/xf:x"),
                       registry_prefix="127.0.0.1:5000/p", registry=None, catalogue=catalogue)  # type: ignore[arg-type]
    assert str(err.value) == (
        f"cell {cell.id} ({cell.name}) not promoted: missing result: smoke 'host-probe' has no result on a sm_90 "
        "host; missing result: smoke 'tiled-boundary-a' has no result on a sm_90 host; missing result: smoke "
        "'tiled-boundary-b' has no result on a sm_90 host")


def test_ca_certificates_join_the_cell_id_by_content_only_when_they_go_into_images(tmp_path: Path) -> None:
    from pinmatrix.matrix.selection import expand_matrix
    from pinmatrix.project.matrix_toml import load_matrix

    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "proxy.crt").write_text("one")

    def cell_id(in_images: bool) -> str:
        (tmp_path / "m.toml").write_text(f"""[matrix]
python = "3.13"
ca_certificates = ["{certs}"]
ca_certificates_in_images = {str(in_images).lower()}
[stacks.s]
gpu_required = false
[stacks.s.packages]
six = ["1.17.0"]
""")
        return expand_matrix(load_matrix(tmp_path / "m.toml")).cells[0].id

    outside, inside = cell_id(False), cell_id(True)
    assert outside != inside
    (certs / "proxy.crt").write_text("two")  # new content: a new id only when the certificate is in the image
    assert cell_id(False) == outside and cell_id(True) != inside
    (certs / "proxy.crt").rename(certs / "other.crt")
    (certs / "other.crt").write_text("one")  # same content under another name: another image, another id
    assert cell_id(True) not in (inside, outside)
    moved = cell_id(True)
    (certs / "notes.txt").write_text("not a certificate")  # only *.crt files of a folder count
    assert cell_id(True) == moved


def test_ca_certificates_in_images_name_files_or_folders_relative_to_the_matrix(tmp_path: Path) -> None:
    from pinmatrix.matrix.selection import expand_matrix
    from pinmatrix.project.matrix_toml import load_matrix

    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "a.crt").write_text("A")
    (tmp_path / "single.crt").write_text("S")

    def cell_id(entries: list[str]) -> str:
        listed = ", ".join(f'"{e}"' for e in entries)
        (tmp_path / "m.toml").write_text(f"""[matrix]
python = "3.13"
ca_certificates = [{listed}]
ca_certificates_in_images = true
[stacks.s]
gpu_required = false
[stacks.s.packages]
six = ["1.17.0"]
""")
        return expand_matrix(load_matrix(tmp_path / "m.toml")).cells[0].id

    folder, single = cell_id(["certs"]), cell_id(["single.crt"])
    assert folder == cell_id([str(tmp_path / "certs")])  # relative to the matrix = the absolute path
    assert single == cell_id([str(tmp_path / "single.crt")]) and single != folder
    both = cell_id(["certs", "single.crt"])
    assert both == cell_id(["single.crt", "certs"]) and both not in (folder, single)  # sorted: order is no input
    assert cell_id(["missing"]) == cell_id([]) != folder  # a path that is not there adds nothing
