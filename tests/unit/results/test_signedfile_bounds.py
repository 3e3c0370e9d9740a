"""The bounds and exact lines of the signed results files (results/signedfile.py): a file at its byte bound and
one over, envelopes at their count and size bounds and one over, the canonical form each envelope is kept in,
and the folder of kept envelopes (only ``.json`` files, in name order, written once, readable by others)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from pinmatrix.results.signedfile import (
    MAX_ENVELOPE,
    MAX_ENVELOPES,
    keep_envelope,
    kept_envelopes,
    read_signed_file,
    signed_dir,
    split_envelopes,
)
from pinmatrix.results.storefile import ResultsError


def _refusal(call: object, *args: object) -> str:
    with pytest.raises(ResultsError) as err:
        call(*args)  # type: ignore[operator]
    return str(err.value)


def test_a_file_at_its_bound_is_read_and_one_byte_more_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "signed.json"
    path.write_bytes(b"x" * 100)
    assert read_signed_file(path, 100) == b"x" * 100
    path.write_bytes(b"x" * 101)
    assert _refusal(read_signed_file, path, 100) == f"{path}: more than the 100 bytes a signed results file may have"
    assert _refusal(read_signed_file, tmp_path / "none.json") == (
        f"{tmp_path / 'none.json'}: cannot read the signed results: No such file or directory")


def test_a_folder_or_a_fifo_given_as_the_signed_file_is_one_line_and_no_descriptor_is_left(tmp_path: Path) -> None:
    """A folder once came out as a traceback (IsADirectoryError from opening it as a file object)."""
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    before = len(os.listdir("/proc/self/fd"))
    for path in (tmp_path, fifo):
        assert _refusal(read_signed_file, path) == f"{path}: not a regular file (a FIFO, device or folder is not read)"
    assert len(os.listdir("/proc/self/fd")) == before


def test_bytes_that_are_not_utf8_are_replaced_not_a_traceback() -> None:
    assert split_envelopes(b'{"a": "\xff"}', "f") == [b'{"a":"\\ufffd"}']


def test_envelopes_come_back_in_canonical_form_in_their_order() -> None:
    text = '\n  {"b": 1, "a": [1, 2]}\n\n{"z": "\\u00e9"}  \n'
    assert split_envelopes(text.encode(), "f") == [b'{"a":[1,2],"b":1}', b'{"z":"\\u00e9"}']
    assert split_envelopes(b'[{"b": 1, "a": 2}, {}]', "f") == [b'{"a":2,"b":1}', b"{}"]


@pytest.mark.parametrize(("data", "line"), [
    (b"  \n ", "f.json: no signed results in it"),
    (b'{"a": 1}\n[2]', "f.json: every entry must be a DSSE envelope (a JSON object)"),
    (b"{}\n{nope}", "f.json: neither a JSON array of envelopes nor one envelope per line: "
                     "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
])
def test_a_file_of_no_envelopes_is_one_line_naming_it(data: bytes, line: str) -> None:
    assert _refusal(split_envelopes, data, "f.json") == line


def test_at_most_4096_envelopes_of_at_most_4_mib_each() -> None:
    assert len(split_envelopes(b"[" + b",".join([b"{}"] * MAX_ENVELOPES) + b"]", "f")) == MAX_ENVELOPES
    assert _refusal(split_envelopes, b"[" + b",".join([b"{}"] * (MAX_ENVELOPES + 1)) + b"]", "f") == (
        f"f: {MAX_ENVELOPES + 1} envelopes, more than the {MAX_ENVELOPES} one file may hold")
    filler = MAX_ENVELOPE - len(b'{"p":""}')
    full = json.dumps({"p": "x" * filler}).encode()
    assert split_envelopes(b"{}\n" + full, "f")[1] == full.replace(b" ", b"")
    over = json.dumps({"p": "x" * (filler + 1)}).encode()
    assert _refusal(split_envelopes, b"{}\n" + over, "f") == (
        f"f: envelope 2 is {MAX_ENVELOPE + 1} bytes, more than {MAX_ENVELOPE}")


def test_kept_envelopes_are_json_files_in_name_order_written_once(tmp_path: Path) -> None:
    store = tmp_path / "deep" / "lab.sqlite"
    umask = os.umask(0)  # 0644 whatever the umask: read by others, written by its owner only
    try:
        first = keep_envelope(store, b'{"n":1}')
    finally:
        os.umask(umask)
    assert first.parent == signed_dir(store) == tmp_path / "deep" / "lab-signed"
    assert stat.S_IMODE(os.stat(first).st_mode) == 0o644
    first.write_bytes(b'{"n":"kept as it was"}')
    assert keep_envelope(store, b'{"n":1}') == first and first.read_bytes() == b'{"n":"kept as it was"}'
    second = keep_envelope(store, b'{"n":2}')
    (signed_dir(store) / "notes.txt").write_text("not an envelope")
    assert kept_envelopes(store) == [p.read_bytes() for p in sorted([first, second])]
    (signed_dir(store) / "big.json").write_bytes(b" " * (MAX_ENVELOPE + 1))
    assert _refusal(kept_envelopes, store) == (
        f"{signed_dir(store) / 'big.json'}: more than the {MAX_ENVELOPE} bytes a signed results file may have")


def test_at_most_4096_kept_envelopes_are_read_for_one_store(tmp_path: Path) -> None:
    store = tmp_path / "results.sqlite"
    folder = signed_dir(store)
    folder.mkdir()
    for n in range(MAX_ENVELOPES):
        (folder / f"{n:05}.json").write_bytes(b"{}")
    assert len(kept_envelopes(store)) == MAX_ENVELOPES
    (folder / "extra.json").write_bytes(b"{}")
    assert _refusal(kept_envelopes, store) == (
        f"{folder}: {MAX_ENVELOPES + 1} envelopes, more than the {MAX_ENVELOPES} read for one store")
    (signed_dir(tmp_path / "other.sqlite")).write_text("a file, not a folder")
    assert kept_envelopes(tmp_path / "other.sqlite") == []
