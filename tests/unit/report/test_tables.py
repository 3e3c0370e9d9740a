"""report/tables: a table without a terminal is one plain line per row, never wrapped however long its values;
--format table|plain|json chooses (json the same as --json); NO_COLOR drops colour from the boxes; `cells` and
build's summary print through it."""

from __future__ import annotations

import argparse
import io
import json

import pytest
from report_data import make_cell, rec

from conftest import REPO
from pinmatrix.cli import main
from pinmatrix.report.tables import TableData, add_format_argument, output_format, print_table, table_format
from pinmatrix.results.store import ResultsStore


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _args(*argv: str, json_flag: bool = False) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_format_argument(parser)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args([*argv, *(["--json"] if json_flag else [])])


def test_a_long_row_without_a_terminal_stays_one_line_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    table = TableData("2 cells", ("id", "name", "known issues"))
    table.add("a" * 12, "stack[" + ",".join(f"axis{n}={n}.0.0" for n in range(12)) + "]", "KI-1, KI-2")
    table.add("b" * 12, "short", "-")
    out = io.StringIO()
    print_table(table, table_format(_args(), out), out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "2 cells"
    assert len(lines) == 4  # title, header, a line per row: nothing wrapped
    assert lines[2].startswith("a" * 12 + "  stack[axis0=0.0.0,") and lines[2].endswith("KI-1, KI-2")
    assert lines[1].index("name") == lines[2].index("stack[") == lines[3].index("short")  # aligned columns
    assert "│" not in out.getvalue() and "\x1b[" not in out.getvalue()


def test_the_format_follows_the_flag_then_the_terminal() -> None:
    assert output_format(_args(), io.StringIO()) == "plain"
    assert output_format(_args(), _Tty()) == "table"
    assert output_format(_args("--format", "plain"), _Tty()) == "plain"
    assert output_format(_args("--format", "table"), io.StringIO()) == "table"
    assert output_format(_args("--format", "json"), _Tty()) == "json"
    assert output_format(_args(json_flag=True), _Tty()) == "json"  # --json kept
    assert table_format(_args("--format", "json"), _Tty()) == "table"  # a table beside JSON on stdout


def test_no_color_drops_the_colour_of_the_boxes(monkeypatch: pytest.MonkeyPatch) -> None:
    table = TableData("t", ("cell", "status"))
    table.add("c1", "failed", style="red")
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    coloured = _Tty()
    print_table(table, "table", coloured)
    assert "\x1b[31m" in coloured.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    plain = _Tty()
    print_table(table, "table", plain)
    assert "\x1b[31m" not in plain.getvalue() and "failed" in plain.getvalue()


def test_cells_without_a_terminal_prints_a_line_per_cell(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cells", str(REPO / "matrix.toml"), "--stack", "demo", "--ids"]) == 0
    ids = capsys.readouterr().out.split()
    assert main(["cells", str(REPO / "matrix.toml"), "--stack", "demo"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{len(ids)} cells" and lines[1].split() == ["id", "name", "arch", "patches", "known", "issues"]
    assert [line.split()[0] for line in lines[2:2 + len(ids)]] == ids  # one line per cell
    assert not any(ch in "".join(lines) for ch in "│┃━")


def test_cells_format_json_is_the_json_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cells", str(REPO / "matrix.toml"), "--stack", "demo", "--format", "json"]) == 0
    by_format = json.loads(capsys.readouterr().out)
    assert main(["cells", str(REPO / "matrix.toml"), "--stack", "demo", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == by_format and len(by_format["cells"]) == 4


def test_results_prints_a_plain_line_per_record_and_json_by_format(tmp_path, capsys) -> None:  # noqa: ANN001
    cell = make_cell("c1", "st", {"torch": "2.9"})
    store = tmp_path / "r.sqlite"
    ResultsStore(store).record_many([rec(cell, "boundary", "fail", reason="x" * 90, failure_class="oom"),
                                     rec(cell, "host-probe", "pass")])
    assert main(["results", "--results", str(store), "--format", "plain"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "2 record(s)" and len(lines) == 4
    assert lines[1].split() == ["status", "smoke", "cell", "host", "class", "secs", "reason"]
    assert main(["results", "--results", str(store), "--format", "json"]) == 0
    assert sorted(r["smoke"] for r in json.loads(capsys.readouterr().out)) == ["boundary", "host-probe"]
