"""pinmatrix.report.junit rule by rule, on report models made here: an infrastructure error is an <error> (counted
in ``errors``, never in ``failures``), a cell's failure or degradation a <failure> typed by its class, a skip, an
expected failure or a smoke with no result a <skipped> (an xfail is no failure), a pass or an unexpected pass
passes with its hosts' lines in <system-out>; the counts and times of each suite and of the whole, the suite's
properties, and text with markup in it, which the XML carries escaped and reads back as it was."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from pinmatrix.report.junit import render_junit
from pinmatrix.report.model import CellRow, Report, SmokeResult, StackReport

STAMP = "2026-12-01T14:00:00Z"


def _result(smoke: str, status: str, *, host: str = "h1", run: str = "r1", failure_class: str | None = None,
            reason: str = "", seconds: float = 1.0, known_issue: str | None = None,
            digest: str | None = None) -> SmokeResult:
    return SmokeResult(smoke=smoke, status=status, failure_class=failure_class, reason=reason, host_id=host,
                       host_label=host, host={}, run_id=run, finished_at=STAMP, duration_s=seconds, metrics={},
                       known_issue=known_issue, image_digest=digest, log_path=None, log_excerpt=None)


def _cell(cid: str, smokes: list[str], results: list[SmokeResult], pins: dict[str, str] | None = None,
          required: list[str] | None = None) -> CellRow:
    return CellRow(id=cid, stack="st", name=f"st[{cid}]", pins=pins or {}, in_matrix=True, smokes=smokes,
                   results=results, required=required)


def _render(*cells: CellRow, title: str = "the title") -> ET.Element:
    stack = StackReport(name="st", axes=[], fixed={}, smokes=[], cells=list(cells), pivot=None)
    return ET.fromstring(render_junit(Report(title=title, generated_at=STAMP, stacks=[stack])))


def _case(root: ET.Element, name: str) -> ET.Element:
    found = [c for c in root.iter("testcase") if c.get("name") == name]
    assert len(found) == 1, name
    return found[0]


def _children(case: ET.Element) -> list[str]:
    return [child.tag for child in case]


def test_a_failure_is_a_failure_element_typed_by_its_class_with_every_hosts_line() -> None:
    root = _render(_cell("c1", ["s"], [
        _result("s", "fail", host="h1", failure_class="wrong-result", reason="first bad"),
        _result("s", "fail", host="h2", run="r2", failure_class="oom", reason="second bad"),
        _result("s", "pass", host="h3", run="r3")]))
    case = _case(root, "s")
    assert _children(case) == ["failure"]  # the failure carries the lines: no system-out beside it
    failure = case.find("failure")
    assert failure is not None
    assert (failure.get("type"), failure.get("message")) == ("wrong-result", "fail: first bad")  # the first worst
    assert failure.text == ("h1: fail [wrong-result] first bad (run r1)\nh2: fail [oom] second bad (run r2)\n"
                            "h3: pass (run r3)")
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("1", "0", "0")


def test_a_degraded_smoke_without_a_class_is_a_failure_typed_degraded() -> None:
    root = _render(_cell("c1", ["s"], [_result("s", "pass", host="h0"),
                                       _result("s", "degraded", host="h1", reason="slow path")]))
    assert _children(_case(root, "s")) == ["failure"]  # the failure carries the lines: no system-out beside it
    failure = _case(root, "s").find("failure")
    assert failure is not None
    assert (failure.get("type"), failure.get("message")) == ("degraded", "degraded: slow path")
    assert root.get("failures") == "1" and root.get("errors") == "0"


def test_an_infrastructure_error_is_an_error_element_not_a_failure() -> None:
    root = _render(_cell("c1", ["a", "b"], [
        _result("a", "error", failure_class="infra", reason="podman could not start"),
        _result("b", "error", host="h2", reason="no class")]))
    a, b = _case(root, "a"), _case(root, "b")
    assert _children(a) == ["error"] and _children(b) == ["error"]  # no <failure>, no system-out
    error_a, error_b = a.find("error"), b.find("error")
    assert error_a is not None and error_b is not None
    assert (error_a.get("type"), error_a.get("message")) == ("infra", "infrastructure error: podman could not start")
    assert error_a.text == "h1: error [infra] podman could not start (run r1)"
    assert (error_b.get("type"), error_b.get("message")) == ("infra", "infrastructure error: no class")
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("errors"), suite.get("failures"), root.get("errors"), root.get("failures")) == ("2", "0", "2", "0")


def test_an_error_on_one_host_and_a_failure_on_another_is_the_cells_failure() -> None:
    root = _render(_cell("c1", ["s"], [_result("s", "error", failure_class="infra", reason="engine"),
                                       _result("s", "fail", host="h2", failure_class="crash", reason="boom")]))
    case = _case(root, "s")
    assert _children(case) == ["failure"]
    assert case.find("failure").get("message") == "fail: boom"  # type: ignore[union-attr]
    assert (root.get("failures"), root.get("errors")) == ("1", "0")


def test_an_expected_failure_is_skipped_with_its_known_issue_and_is_no_failure() -> None:
    root = _render(_cell("c1", ["x", "y"], [
        _result("x", "xfail", failure_class="import-error", reason="libcudart.so.12", known_issue="KI-7"),
        _result("y", "skip", reason="no GPU")]))
    x, y = _case(root, "x"), _case(root, "y")
    assert _children(x) == ["skipped", "system-out"] and _children(y) == ["skipped", "system-out"]
    assert x.find("skipped").get("message") == "xfail: known issue KI-7: libcudart.so.12"  # type: ignore[union-attr]
    assert x.find("system-out").text == "h1: xfail [import-error] libcudart.so.12 (run r1)"  # type: ignore[union-attr]
    assert y.find("skipped").get("message") == "skip: no GPU"  # type: ignore[union-attr]
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("skipped"), suite.get("failures"), suite.get("errors")) == ("2", "0", "0")
    assert (root.get("failures"), root.get("errors"), root.get("tests")) == ("0", "0", "2")


def test_a_smoke_with_no_result_is_skipped_as_no_result_without_output() -> None:
    root = _render(_cell("c1", ["ran", "never"], [_result("ran", "pass")]))
    never = _case(root, "never")
    assert _children(never) == ["skipped"]
    assert never.find("skipped").get("message") == "no result recorded on any host"  # type: ignore[union-attr]
    assert never.get("time") == "0.000"
    assert root.find("testsuite").get("skipped") == "1"  # type: ignore[union-attr]


def test_a_pass_and_an_unexpected_pass_pass_with_their_lines_in_system_out() -> None:
    root = _render(_cell("c1", ["p", "xp"], [_result("p", "pass", reason="fine"),
                                             _result("xp", "xpass", host="h2", run="r9", known_issue="KI-1")]))
    p, xp = _case(root, "p"), _case(root, "xp")
    assert _children(p) == ["system-out"] and _children(xp) == ["system-out"]
    assert p.find("system-out").text == "h1: pass fine (run r1)"  # type: ignore[union-attr]
    assert xp.find("system-out").text == "h2: xpass (run r9)"  # type: ignore[union-attr]
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("0", "0", "0")


def test_counts_and_times_of_each_suite_and_of_the_whole() -> None:
    one = _cell("c1", ["a", "b", "c"], [_result("a", "pass", seconds=1.25), _result("a", "pass", host="h2", seconds=2.0),
                                        _result("b", "fail", seconds=0.5), _result("c", "skip", seconds=0.0004)])
    two = _cell("c2", ["a", "b"], [_result("a", "error", seconds=3.0)])
    root = _render(one, two)
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert list(suites) == ["st.c1", "st.c2"]
    first, second = suites["st.c1"], suites["st.c2"]
    assert {k: first.get(k) for k in ("tests", "failures", "errors", "skipped", "time")} == {
        "tests": "3", "failures": "1", "errors": "0", "skipped": "1", "time": "3.750"}
    assert {k: second.get(k) for k in ("tests", "failures", "errors", "skipped", "time")} == {
        "tests": "2", "failures": "0", "errors": "1", "skipped": "1", "time": "3.000"}
    times = [(c.get("classname"), c.get("name"), c.get("time")) for c in root.iter("testcase")]
    assert times == [("st.c1", "a", "3.250"), ("st.c1", "b", "0.500"), ("st.c1", "c", "0.000"),
                     ("st.c2", "a", "3.000"), ("st.c2", "b", "0.000")]
    assert {k: root.get(k) for k in ("name", "tests", "failures", "errors", "time")} == {
        "name": "the title", "tests": "5", "failures": "1", "errors": "1", "time": "6.750"}
    assert root.get("skipped") is None  # the xunit2 schema has no skipped on <testsuites>


def test_a_suite_per_cell_with_the_cell_its_status_pins_and_images_as_properties() -> None:
    digests = ["sha256:" + "a" * 64, "sha256:" + "b" * 64]
    root = _render(_cell("c1", ["s", "t"], [_result("s", "pass", digest=digests[1]),
                                            _result("t", "skip", host="h2", digest=digests[0])],
                         pins={"torch": "2.9", "cuda": "13.0"}, required=["s"]))
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("name"), suite.get("package"), suite.get("timestamp")) == ("st.c1", "st", STAMP)
    props = [(p.get("name"), p.get("value")) for p in suite.iter("property")]
    assert props == [("cell", "st[c1]"), ("status", "pass (1 skipped)"), ("pin.torch", "2.9"), ("pin.cuda", "13.0"),
                     ("image", digests[0]), ("image", digests[1])]
    assert [child.tag for child in suite][0] == "properties"


def test_messages_are_cut_at_500_characters_and_the_detail_is_whole() -> None:
    long = "r" * 600
    root = _render(_cell("c1", ["f", "e", "k"], [_result("f", "fail", reason=long), _result("e", "error", reason=long),
                                                 _result("k", "skip", reason=long, known_issue="KI-2")]))
    failure = _case(root, "f").find("failure")
    assert failure is not None
    assert failure.get("message") == ("fail: " + long)[:500] and len(failure.get("message") or "") == 500
    assert failure.text == f"h1: fail {long} (run r1)"
    assert _case(root, "e").find("error").get("message") == ("infrastructure error: " + long)[:500]  # type: ignore[union-attr]
    assert _case(root, "k").find("skipped").get("message") == ("skip: known issue KI-2: " + long)[:500]  # type: ignore[union-attr]


def test_markup_in_any_text_is_escaped_and_reads_back_as_it_was() -> None:
    hostile = "<b>&amp; \"quoted\" 'single' ]]> </testcase>"
    root = _render(_cell("c1", ["s<&>", "t"], [_result("s<&>", "fail", failure_class="c\"<", reason=hostile),
                                               _result("t", "skip", host="h<2>", reason=hostile)],
                         pins={"a&b": "<v>"}), title="t<i>tle & \"co\"")
    assert root.get("name") == "t<i>tle & \"co\""
    failure = _case(root, "s<&>").find("failure")
    assert failure is not None
    assert (failure.get("type"), failure.get("message")) == ("c\"<", f"fail: {hostile}")
    assert failure.text == f"h1: fail [c\"<] {hostile} (run r1)"
    assert _case(root, "t").find("system-out").text == f"h<2>: skip {hostile} (run r1)"  # type: ignore[union-attr]
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["pin.a&b"] == "<v>"


def test_the_document_is_declared_utf8_indented_and_ends_in_a_newline() -> None:
    stack = StackReport(name="st", axes=[], fixed={}, smokes=[], cells=[_cell("c1", ["s"], [_result("s", "pass")])],
                        pivot=None)
    text = render_junit(Report(title="t", generated_at=STAMP, stacks=[stack]))
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites ')
    assert text.endswith("</testsuites>\n") and "\n  <testsuite " in text and "\n    <properties>" in text


def test_an_empty_report_is_an_empty_testsuites_with_zero_counts() -> None:
    root = ET.fromstring(render_junit(Report(title="empty", generated_at=STAMP, stacks=[])))
    assert list(root) == []
    assert {k: root.get(k) for k in ("tests", "failures", "errors", "time")} == {
        "tests": "0", "failures": "0", "errors": "0", "time": "0.000"}


def test_control_characters_in_recorded_text_leave_the_file_well_formed_and_inert() -> None:
    """XML 1.0 cannot carry NUL, BEL or ESC at all (not even as a character reference): one in a reason imported
    from a results file made junit.xml unreadable by every CI that parses it, and the colour codes reached its log."""
    bad = "a\x1b[31mred\x1b[0m\x00\x07\ud800\ufffe\u202e"
    root = _render(_cell("c\x07", ["s\x00", "e", "k"], [
        _result("s\x00", "fail", host="h\x1b[1m1", run="r\x07", failure_class="cls\x00", reason=bad + "\nline two"),
        _result("e", "error", failure_class="inf\x07", reason=bad),
        _result("k", "xfail", reason=bad, known_issue="KI\x00", digest="sha256:\x07")],
        pins={"ax\x00": "v\x1b[2J"}), title="t\x07")
    assert root.get("name") == "t\\x07"
    suite = root.find("testsuite")
    assert suite is not None and suite.get("name") == "st.c\\x07"
    shown = "ared\\x00\\x07\\ud800\\ufffe\\u202e"
    failure = _case(root, "s\\x00").find("failure")
    assert failure is not None and _case(root, "s\\x00").get("classname") == "st.c\\x07"
    assert (failure.get("type"), failure.get("message")) == ("cls\\x00", f"fail: {shown}\\x0aline two")
    assert failure.text == f"h1: fail [cls\\x00] {shown}\nline two (run r\\x07)"  # the detail keeps its lines
    error = _case(root, "e").find("error")
    assert error is not None
    assert (error.get("type"), error.get("message")) == ("inf\\x07", f"infrastructure error: {shown}")
    assert _case(root, "k").find("skipped").get("message") == f"xfail: known issue KI\\x00: {shown}"  # type: ignore[union-attr]
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["pin.ax\\x00"] == "v" and props["cell"] == "st[c\\x07]" and props["image"] == "sha256:\\x07"


def test_every_failure_and_every_skip_of_a_cell_is_counted() -> None:
    root = _render(_cell("c1", ["f1", "f2", "d", "s", "x", "m1", "m2"], [
        _result("f1", "fail"), _result("f2", "fail"), _result("d", "degraded"),
        _result("s", "skip"), _result("x", "xfail")]))
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("failures"), suite.get("skipped"), suite.get("tests")) == ("3", "4", "7")
    assert root.get("failures") == "3"


def test_only_the_cells_that_ran_are_suites_not_a_no_result_skip_per_cell_of_the_matrix() -> None:
    ran = _cell("c1", ["a", "b"], [_result("a", "pass")])
    idle = [_cell(f"i{n}", ["a", "b"], []) for n in range(50)]
    root = _render(idle[0], ran, *idle[1:])
    assert [s.get("name") for s in root.iter("testsuite")] == ["st.c1"]
    assert root.get("tests") == "2"  # a and b of the cell that ran; b is its one "no result"
    assert sum(int(s.get("skipped", "0")) for s in root.iter("testsuite")) == 1
