"""data/signatures.toml (project/signatures.py): the shipped table loads through the model; a malformed one is one
line naming the file, the row and the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from data_files import edited, line_of, one_line, without_line

from pinmatrix.project.signatures import SIGNATURES_PATH, Signature, SignatureError, load_signatures

SIGNATURES_TEXT = SIGNATURES_PATH.read_text(encoding="utf-8")


def test_the_shipped_signatures_load_through_the_model() -> None:
    table = load_signatures()
    assert table and all(isinstance(s, Signature) for s in table)
    tactics = next(s for s in table if s.failure_class == "unsupported-tactics")
    assert (tactics.status, tactics.metric, tactics.case) == ("degraded", "autotuner_skipped_tactics", True)
    assert not tactics.pattern.flags & re.IGNORECASE  # case = true: case-sensitive
    illegal = next(s for s in table if s.failure_class == "illegal-memory-access")
    assert illegal.pattern.search("AN ILLEGAL MEMORY ACCESS WAS ENCOUNTERED")  # default: case-insensitive


@pytest.mark.parametrize(("old", "new", "where"), [
    ('metric = "autotuner_skipped_tactics"', 'metrik = "autotuner_skipped_tactics"',
     "signature #8: 'metrik': unknown key (did you mean 'metric'?)"),
    ("[[signature]]\nclass = \"crash\"", "[[signatures]]\nclass = \"crash\"",
     "signatures: unknown key (did you mean 'signature'?)"),
    ('case = true\nsource = "faulthandler', 'case = "yes"\nsource = "faulthandler',
     "signature #10: 'case': Input should be a valid boolean"),
    ('class = "crash"', "class = 3", "signature #10: 'class': Input should be a valid string"),
    ('status = "degraded"', 'status = "degrade"', "signature #8: 'status': Input should be 'degraded'"),
    ('class = "nccl-error"\n', "", "signature #5: 'class': required key is missing"),
    ('pattern = "CUDA out of memory|', 'patern = "CUDA out of memory|',
     "signature #6: 'patern': unknown key (did you mean 'pattern'?)"),
    ('[[signature]]\nclass = "crash"', '[[signature]]\n[signature.x]\n[[signature]]\nclass = "crash"',
     "signature #10: 'x': unknown key (expected one of: case, class, metric, pattern, source, status)"),
    ('pattern = "cuTensorMapEncodeTiled"', 'pattern = "(cuTensorMapEncodeTiled"',
     "signature #1: missing ), unterminated subpattern at position 0 in pattern '(cuTensorMapEncodeTiled'"),
    ('pattern = "cuTensorMapEncodeTiled"', 'pattern = "cuTensorMap[EncodeTiled"',
     "signature #1: unterminated character set at position 11 in pattern 'cuTensorMap[EncodeTiled'"),
])
def test_a_malformed_signature_file_is_one_line_naming_the_row_and_key(
        tmp_path: Path, old: str, new: str, where: str) -> None:
    path = tmp_path / "signatures.toml"
    path.write_text(edited(SIGNATURES_TEXT, old, new), encoding="utf-8")
    with pytest.raises(SignatureError) as err:
        load_signatures(path)
    assert without_line(one_line(err), str(path)) == f"{path}: {where}"


def test_a_signature_problem_names_the_line_of_its_key(tmp_path: Path) -> None:
    path = tmp_path / "signatures.toml"
    text = edited(SIGNATURES_TEXT, 'status = "degraded"', 'status = "degrade"')
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SignatureError) as err:
        load_signatures(path)
    line = line_of(text, 'status = "degrade"')
    assert one_line(err) == f"{path}:{line}: signature #8: 'status': Input should be 'degraded'"


def test_a_signature_file_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "signatures.toml"
    path.write_text("#" * (1 << 20) + "\n", encoding="utf-8")
    with pytest.raises(SignatureError) as err:
        load_signatures(path)
    assert one_line(err) == f"{path}: {(1 << 20) + 1} bytes is more than a signature table may have (1048576 bytes)"


def test_a_signature_row_that_is_not_a_table_is_named_by_its_number(tmp_path: Path) -> None:
    path = tmp_path / "signatures.toml"
    path.write_text('signature = [{class = "crash", pattern = "Segfault"}, "not a table"]\n', encoding="utf-8")
    with pytest.raises(SignatureError) as err:
        load_signatures(path)
    assert one_line(err).startswith(f"{path}:1: signature #2: Input should be a valid dictionary")
