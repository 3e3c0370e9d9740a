"""JUnit XML: one suite per cell that ran (a cell with a result on some host), one test case per smoke of it
(worst latest status across hosts). A cell the results hold nothing of is no suite: a run that smoked 4 cells of
a matrix of 500 is 4 suites, not hundreds of "no result" skips; a smoke of a cell that ran that has no result is
the one "no result" skip left (the cell ran, that smoke did not).

Mapping: pass and xpass -> passed (xpass carries a system-out note), fail and degraded -> <failure> with
the failure class as its type, an infrastructure error -> <error> (the harness, not the cell: counted in
``errors``, never in ``failures``), xfail and skip -> <skipped>, no result -> <skipped message="no result">.
Every text from a record or the matrix is written as ``terminal_text`` shows it (escape sequences removed, any
other control or invisible character written out as ``\\x07``): XML 1.0 cannot carry most control characters,
so one in a recorded reason would make the whole file unreadable.

The output follows the xunit2 schema (Jenkins xunit-plugin's junit-10.xsd, which pytest validates its own
junit_family=xunit2 files against; tests/data/junit-10.xsd): a suite per cell, so that the cell's name and
pins are the suite's <properties> (a <testcase> may not hold <properties>); ``skipped`` is counted on each
<testsuite> only (<testsuites> has no such attribute).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from pinmatrix.report.model import Report, worst
from pinmatrix.sanitize import terminal_text
from pinmatrix.statuses import INFRA_STATUSES


def render_junit(report: Report) -> str:
    root = ET.Element("testsuites", name=terminal_text(report.title))
    totals: dict[str, float] = {"tests": 0, "failures": 0, "errors": 0, "time": 0.0}
    for stack in report.stacks:
        for cell in (c for c in stack.cells if c.results):
            suite_name = terminal_text(f"{stack.name}.{cell.id}")
            suite = ET.SubElement(root, "testsuite", name=suite_name, package=terminal_text(stack.name),
                                  timestamp=report.generated_at)
            counts: dict[str, float] = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
            props = ET.SubElement(suite, "properties")
            ET.SubElement(props, "property", name="cell", value=terminal_text(cell.name))
            ET.SubElement(props, "property", name="status", value=cell.status_label)
            for axis, value in cell.pins.items():
                ET.SubElement(props, "property", name=terminal_text(f"pin.{axis}"), value=terminal_text(value))
            for digest in cell.image_digests:
                ET.SubElement(props, "property", name="image", value=terminal_text(digest))
            for smoke in cell.smokes:
                results = [r for r in cell.results if r.smoke == smoke]
                status = worst(r.status for r in results)
                seconds = sum(r.duration_s for r in results)
                case = ET.SubElement(suite, "testcase", classname=suite_name, name=terminal_text(smoke),
                                     time=f"{seconds:.3f}")
                counts["tests"] += 1
                counts["time"] += seconds
                detail = terminal_text("\n".join(
                    f"{r.host_label}: {r.status}" + (f" [{r.failure_class}]" if r.failure_class else "")
                    + (f" {r.reason}" if r.reason else "") + f" (run {r.run_id})"
                    for r in results
                ), newlines=True)
                bad = [r for r in results if r.status == status]
                if status in ("fail", "degraded"):
                    counts["failures"] += 1
                    first = bad[0]
                    el = ET.SubElement(case, "failure", type=terminal_text(first.failure_class or status),
                                       message=terminal_text(f"{status}: {first.reason}")[:500])
                    el.text = detail
                elif status in INFRA_STATUSES:
                    counts["errors"] += 1
                    first = bad[0]
                    el = ET.SubElement(case, "error", type=terminal_text(first.failure_class or "infra"),
                                       message=terminal_text(f"infrastructure error: {first.reason}")[:500])
                    el.text = detail
                elif status in ("skip", "xfail"):
                    counts["skipped"] += 1
                    first = bad[0]
                    note = f"known issue {first.known_issue}: " if first.known_issue else ""
                    ET.SubElement(case, "skipped", message=terminal_text(f"{status}: {note}{first.reason}")[:500])
                elif status == "missing":
                    counts["skipped"] += 1
                    ET.SubElement(case, "skipped", message="no result recorded on any host")
                if detail and status not in ("fail", "degraded", *INFRA_STATUSES):  # a failure already carries it
                    out = ET.SubElement(case, "system-out")
                    out.text = detail
            for key, count in counts.items():
                suite.set(key, f"{count:.3f}" if key == "time" else str(int(count)))
                if key in totals:
                    totals[key] += count
    for key, total in totals.items():
        root.set(key, f"{total:.3f}" if key == "time" else str(int(total)))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
