"""``propose --write`` edits only the stack's own section: every other byte of matrix.toml stays (tomlkit would
regroup a split ``[[known_issues]]`` array if it wrote the whole document), and an edit whose text would mean
more than the added include entries is refused with nothing written."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from upgrade_matrix import head

from pinmatrix.project.matrix_toml import Matrix, load_matrix
from pinmatrix.upgrade.candidates import UpgradeCandidate
from pinmatrix.upgrade.matrix_edit import ProposalRefused, edited_text, write_proposals
from pinmatrix.upgrade.propose import Proposal

MATRIX = """# head comment
""" + head("x86_64-manylinux_2_28") + """
[[known_issues]]
id = "first"
when = { torch = "2.11.0" }
smokes = ["host-probe"]
expect = "fail"
note = "before the stacks"

# the stack
[stacks.x]
description = DESCRIPTION
smokes = ["host-probe"]  # kept
[stacks.x.axes]
cuda = ["13.0"]
torch = ["2.11.0"]
triton = ["3.6.0"]

[[known_issues]]
id = "second"
when = { torch = "2.11.0" }
smokes = ["host-probe"]
expect = "fail"
note = "after the stacks: a careless whole-document dump moves this table up"
"""


def _matrix(tmp_path: Path, description: str = '"one line"') -> Matrix:
    (tmp_path / "matrix.toml").write_text(MATRIX.replace("DESCRIPTION", description), encoding="utf-8")
    return load_matrix(tmp_path / "matrix.toml")


def _proposal() -> Proposal:
    return Proposal(UpgradeCandidate("x", "torch 2.12.0", {"torch": "2.12.0", "triton": "3.6.0", "cuda": "13.0"}),
                    "locked")


def test_only_the_include_line_is_added_and_a_split_known_issues_array_stays_where_it_was(tmp_path: Path) -> None:
    matrix = _matrix(tmp_path)
    text = edited_text(matrix, [_proposal()])
    diff = [op for op in difflib.SequenceMatcher(a=matrix.text.splitlines(), b=text.splitlines()).get_opcodes()
            if op[0] != "equal"]
    assert [op[0] for op in diff] == ["insert"]
    assert text.splitlines()[diff[0][3]:diff[0][4]] == [
        'include = [{torch = "2.12.0", triton = "3.6.0", cuda = "13.0"}]']
    assert text.index('id = "second"') > text.index("[stacks.x.axes]")


def test_a_second_proposal_extends_the_include_array_it_wrote(tmp_path: Path) -> None:
    matrix = _matrix(tmp_path)
    other = Proposal(UpgradeCandidate("x", "torch 2.13.0", {"torch": "2.13.0", "triton": "3.6.0"}), "locked")
    text = edited_text(matrix, [_proposal(), other])
    assert text.count("include = [") == 1 and '{torch = "2.13.0", triton = "3.6.0"}' in text


def test_a_section_the_header_guess_cuts_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    matrix = _matrix(tmp_path, description='"""two\n[lines]\n"""')
    before = (tmp_path / "matrix.toml").read_text(encoding="utf-8")
    with pytest.raises(ProposalRefused, match=r"\[stacks.x\] could not be edited in place"):
        write_proposals(matrix, [_proposal()])
    assert (tmp_path / "matrix.toml").read_text(encoding="utf-8") == before


def test_an_edit_that_would_mean_more_than_the_entries_is_refused(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import pinmatrix.upgrade.matrix_edit as edit

    matrix = _matrix(tmp_path)
    real = edit._with_entries
    monkeypatch.setattr(edit, "_with_entries", lambda section, stack, entries: real(section, stack, entries).replace(
        '["host-probe"]  # kept', '["python-imports"]  # kept'))
    with pytest.raises(ProposalRefused, match="would change more than the stacks' include entries"):
        edited_text(matrix, [_proposal()])


def test_a_stack_written_without_its_own_table_is_refused(tmp_path: Path) -> None:
    head = MATRIX.split("[[known_issues]]")[0]
    (tmp_path / "matrix.toml").write_text(head + '[stacks]\nx.smokes = ["host-probe"]\nx.axes.cuda = ["13.0"]\n'
                                          'x.axes.torch = ["2.11.0"]\nx.axes.triton = ["3.6.0"]\n', encoding="utf-8")
    with pytest.raises(ProposalRefused, match=r"stack 'x' has no \[stacks.x\] table"):
        edited_text(load_matrix(tmp_path / "matrix.toml"), [_proposal()])
