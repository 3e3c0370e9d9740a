"""The report model and its Markdown, JUnit XML and JSON renderings; `pinmatrix report` end to end on a store."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from report_data import CPU, make_cell, rec

from pinmatrix.cell import Cell
from pinmatrix.cli import main
from pinmatrix.report.model import build_report, worst
from pinmatrix.report.write import render, write_reports
from pinmatrix.results.store import ResultsStore, SmokeRecord


@pytest.fixture()
def sample() -> tuple[list[Cell], list[SmokeRecord]]:
    pins = {"driver": "580.159.04", "cuda": "13.0", "gpu": "sm_90"}
    a = make_cell("aaaaaaaaaaa1", "xf", {**pins, "xformers": "0.0.35"})
    b = make_cell("bbbbbbbbbbb2", "xf", {**pins, "xformers": "0.0.35-int64"})
    c = make_cell("ccccccccccc3", "xf", {**pins, "xformers": "0.0.30"})
    d = make_cell("ddddddddddd4", "demo", {"six": "1.17.0"}, smokes=("python-imports",), gpu_required=False,
                  arch_flags=(), min_driver=None, compute_capability=None)
    records = [
        rec(a, "host-probe", "pass"),
        rec(a, "boundary", "pass", run="r0"),  # older run, superseded below
        rec(a, "boundary", "fail", failure_class="illegal-memory-access",
            reason="CUDA error: an illegal memory access was encountered", metrics={"m": 33344}),
        rec(b, "host-probe", "pass"),
        rec(b, "boundary", "pass", metrics={"m": 33344, "seconds": 0.25}),
        rec(c, "host-probe", "pass"),
        rec(c, "boundary", "xfail", failure_class="import-error", reason="libcudart.so.12"),
        rec(d, "python-imports", "pass", host=CPU, digest=None),
    ]
    return [a, b, c, d], records


def test_statuses_worst_last_and_every_format_renders(sample, tmp_path) -> None:  # noqa: ANN001
    from pinmatrix.statuses import FORMATS, SEVERITY_ORDER

    assert SEVERITY_ORDER[0] == "pass" and SEVERITY_ORDER[-1] == "fail"
    assert worst(["pass", "xfail", "skip"]) == "xfail" and worst([]) == "missing"
    cells, records = sample
    written = write_reports(build_report(records, cells), tmp_path)
    assert set(written) == set(FORMATS) and all(p.name == FORMATS[f] for f, p in written.items())


def test_worst_order() -> None:
    assert worst(["pass", "skip"]) == "skip"
    assert worst(["xfail", "pass", "degraded"]) == "degraded"
    assert worst(["xpass", "fail"]) == "fail"
    assert worst([]) == "missing"


def test_model_latest_result_wins_and_worst_per_cell(sample) -> None:
    cells, records = sample
    report = build_report(records, cells)
    by_id = {c.id: c for c in report.cells}
    assert by_id["aaaaaaaaaaa1"].status == "fail"  # r1 fail replaced r0 pass
    assert by_id["aaaaaaaaaaa1"].failure_class == "illegal-memory-access"
    assert by_id["bbbbbbbbbbb2"].status == "pass"
    assert by_id["ccccccccccc3"].status == "xfail"
    assert [s.name for s in report.stacks] == ["xf", "demo"]  # a stack with a failure first
    xf = report.stacks[0]
    assert xf.axes == ["xformers"]  # the only varying axis
    assert xf.fixed == {"driver": "580.159.04", "cuda": "13.0", "gpu": "sm_90"}
    assert xf.status == "fail"


def test_cells_without_results_and_results_without_cells(sample) -> None:
    cells, records = sample
    lonely = make_cell("eeeeeeeeeee5", "xf", {"driver": "580.159.04", "cuda": "13.0", "gpu": "sm_90",
                                               "xformers": "0.0.34"})
    orphan = rec(make_cell("fffffffffff6", "xf", {}), "boundary", "pass")
    report = build_report(records + [orphan], cells + [lonely])
    by_id = {c.id: c for c in report.cells}
    assert by_id["eeeeeeeeeee5"].status == "missing"
    assert by_id["eeeeeeeeeee5"].smoke_status == {"host-probe": "missing", "boundary": "missing"}
    assert not by_id["fffffffffff6"].in_matrix and by_id["fffffffffff6"].status == "pass"
    partial = build_report([r for r in records if r.smoke != "boundary"], cells)
    assert {c.id: c.status for c in partial.cells}["bbbbbbbbbbb2"] == "missing"


def test_group_selectors_show_the_smokes_that_ran(sample) -> None:
    cell = make_cell("hhhhhhhhhhh8", "xf", {"xformers": "0.0.35"}, smokes=("host-probe", "tiled-boundary"))
    recs = [rec(cell, "tiled-boundary-a", "pass"), rec(cell, "tiled-boundary-b", "fail")]
    row = build_report(recs, [cell]).cells[0]
    assert row.smokes == ["host-probe", "tiled-boundary-a", "tiled-boundary-b"]
    assert row.status == "fail"
    catalogue = ["host-probe", "tiled-boundary-output", "tiled-boundary-a", "tiled-boundary-b"]
    row = build_report(recs, [cell], catalogue=catalogue).cells[0]
    assert row.smoke_status == {"host-probe": "missing", "tiled-boundary-output": "missing",
                                "tiled-boundary-a": "pass", "tiled-boundary-b": "fail"}


def test_markdown_summary(sample) -> None:
    cells, records = sample
    md = render(build_report(records, cells), "md")
    assert md.startswith("# pinmatrix report\n")
    assert "4 cells in 2 stacks" in md
    assert "## 🔴 xf" in md and "## 🟢 demo" in md
    row = next(line for line in md.splitlines() if "aaaaaaaaaaa1" in line and line.startswith("|"))
    assert "FAIL" in row and "illegal-memory-access" in row and "0.0.35" in row
    assert "CUDA error: an illegal memory access was encountered" in md  # failure list
    # pipes in values cannot break the table
    weird = make_cell("ggggggggggg7", "xf", {"xformers": "a|b"})
    md2 = render(build_report([], [weird]), "md")
    assert "a\\|b" in md2


def test_junit_one_case_per_cell_and_smoke(sample) -> None:
    cells, records = sample
    xml = render(build_report(records, cells), "junit")
    root = ET.fromstring(xml)
    cases = root.findall(".//testcase")
    assert len(cases) == 2 + 2 + 2 + 1
    assert root.get("tests") == "7" and root.get("failures") == "1"
    assert sum(int(s.get("skipped")) for s in root.iter("testsuite")) == 1
    failing = [c for c in cases if c.find("failure") is not None]
    assert len(failing) == 1
    f = failing[0]
    assert f.get("classname") == "xf.aaaaaaaaaaa1" and f.get("name") == "boundary"
    assert f.find("failure").get("type") == "illegal-memory-access"
    suite = next(s for s in root.iter("testsuite") if f in list(s))  # one suite per cell: its pins are properties
    assert suite.get("name") == "xf.aaaaaaaaaaa1" and suite.get("package") == "xf"
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["cell"].startswith("xf[") and props["pin.xformers"] == "0.0.35"
    skipped = [c for c in cases if c.find("skipped") is not None]
    assert skipped[0].find("skipped").get("message").startswith("xfail:")


def test_junit_is_valid_xunit2(sample) -> None:
    """junit.xml validates against the xunit2 schema (tests/data/junit-10.xsd, from pytest's sdist), with every
    status a case can have: pass, fail with a class, xfail, skip, missing, and reasons with markup in them."""
    import xmlschema

    cells, records = sample
    lonely = make_cell("eeeeeeeeeee5", "xf", {"xformers": "0.0.34"})
    records = records + [rec(cells[1], "host-probe", "skip", run="r3", reason="no <GPU> & \"quotes\""),
                         rec(cells[0], "host-probe", "degraded", run="r4", failure_class="slow-path")]
    xml = render(build_report(records, cells + [lonely]), "junit")
    schema = xmlschema.XMLSchema(Path(__file__).resolve().parents[2] / "data" / "junit-10.xsd")
    errors = list(schema.iter_errors(xml))
    assert errors == [], errors[0] if errors else None
    # the schema is strict enough to catch what the old layout did wrong
    bad = xml.replace("<testsuites ", '<testsuites skipped="1" ', 1)
    assert not schema.is_valid(bad)


def test_status_passes_when_required_smokes_pass_and_counts_skips(sample) -> None:
    """A cell whose required smokes all pass is "pass" although optional smokes skipped; the label says how
    many skipped. A required smoke that skips, or an optional one that fails, still shows."""
    cells, _ = sample
    cell = make_cell("iiiiiiiiiii9", "h2", {"gpu": "sm_90"}, smokes=("host-probe", "nvfp4-gemm", "nvfp4-vs-fp8"))
    recs = [rec(cell, "host-probe", "pass"), rec(cell, "nvfp4-gemm", "skip", reason="FP4 unsupported on sm_90"),
            rec(cell, "nvfp4-vs-fp8", "skip")]
    row = build_report(recs, [cell], required={cell.id: ["host-probe"]}).cells[0]
    assert row.status == "pass" and row.skipped == 2 and row.status_label == "pass (2 skipped)"
    assert build_report(recs, [cell]).cells[0].status == "skip"  # without a policy every smoke counts
    strict = build_report(recs, [cell], required={cell.id: ["host-probe", "nvfp4-gemm"]}).cells[0]
    assert strict.status == "skip"
    broken = recs + [rec(cell, "nvfp4-vs-fp8", "fail", run="r9", reason="boom")]
    assert build_report(broken, [cell], required={cell.id: ["host-probe"]}).cells[0].status == "fail"
    md = render(build_report(recs, [cell], required={cell.id: ["host-probe"]},
                             descriptions={"h2": "The H200 | host"}), "md")
    assert "🟢 pass (2 skipped)" in md and "The H200 \\| host" in md
    html = render(build_report(recs, [cell], required={cell.id: ["host-probe"]},
                               descriptions={"h2": "The <H200> host"}), "html")
    assert '<p class="description">The &lt;H200&gt; host</p>' in html and "pass (2 skipped)" in html


def test_json_round_trips_the_model(sample) -> None:
    cells, records = sample
    data = json.loads(render(build_report(records, cells), "json"))
    assert data["schema"] == "pinmatrix-report/1"
    assert data["counts"] == {"fail": 1, "pass": 2, "xfail": 1}
    xf = next(s for s in data["stacks"] if s["name"] == "xf")
    cell = next(c for c in xf["cells"] if c["id"] == "aaaaaaaaaaa1")
    assert cell["smoke_status"] == {"host-probe": "pass", "boundary": "fail"}
    assert cell["results"][0]["host"]["gpu_name"] == "NVIDIA H200"


def test_html_escapes_and_embeds_data(sample, tmp_path: Path) -> None:
    cells, records = sample
    log = tmp_path / "logs" / "r2" / "boundary.log"  # logs are read only from under ROOT/RUN_ID/
    log.parent.mkdir(parents=True)
    log.write_text("".join(f"line {i}\n" for i in range(100)) + "RuntimeError: <script>alert(1)</script>\n")
    records.append(rec(cells[1], "boundary", "degraded", run="r2", reason="slow </script><b>", log_path=str(log)))
    html = render(build_report(records, cells, log_roots=[tmp_path / "logs"]), "html")
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # log excerpt, escaped
    assert "line 99" in html and "line 10\n" not in html  # only the tail of the log
    data_block = html.split('id="pinmatrix-data">', 1)[1].split("</script>", 1)[0]
    data = json.loads(data_block)
    assert {c["id"] for s in data["stacks"] for c in s["cells"]} == {c.id for c in cells}


def test_write_reports_writes_all_formats_atomically(sample, tmp_path: Path) -> None:
    cells, records = sample
    paths = write_reports(build_report(records, cells), tmp_path / "out")
    assert sorted(p.name for p in paths.values()) == ["index.html", "junit.xml", "report.json", "summary.md"]
    assert not list((tmp_path / "out").glob(".*tmp"))


def test_report_command_reads_store_and_json(sample, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # no ./matrix.toml: cells are named by id
    cells, records = sample
    store = ResultsStore(tmp_path / "results.sqlite")
    for r in records[:-1]:
        store.record(r)
    extra = tmp_path / "k8s-results.json"
    extra.write_text(json.dumps([records[-1].to_dict()]))
    out = tmp_path / "report"
    rc = main(["report", "--results", str(store.path), "--from-json", str(extra), "--out", str(out),
               "--fail-on", "fail"])
    printed = capsys.readouterr().out
    assert rc == 1  # one cell failed
    assert "4 cells: 2 pass, 1 expected failure, 1 FAIL" in printed
    assert "aaaaaaaaaaa1 (fail)" in printed
    data = json.loads((out / "report.json").read_text())
    assert sum(len(s["cells"]) for s in data["stacks"]) == 4
    rc = main(["report", "--results", str(store.path), "--out", str(out), "--stack", "demo", "-f", "md"])
    assert rc == 0


def test_report_command_bad_input_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "rows.json"
    bad.write_text('{"not": "a list"}')
    rc = main(["report", "--results", str(tmp_path / "none.sqlite"), "--from-json", str(bad), "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "rows.json" in err[0]
    rc = main(["report", "--results", str(tmp_path / "none.sqlite"), "--pivot", "driver", "--out", str(tmp_path)])
    assert rc == 2
    assert not (tmp_path / "index.html").exists()


def test_report_on_the_shipped_matrix_lists_every_cell(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[3]
    rc = main(["report", str(root / "matrix.toml"), "--results", str(tmp_path / "r.sqlite"), "--out",
               str(tmp_path / "out"), "-f", "json"])
    assert rc == 0
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {s["name"] for s in data["stacks"]} >= {"demo", "h200"}
    assert all(c["status"] == "missing" for s in data["stacks"] for c in s["cells"])
