"""Signed results files read bounded: a JSON array or JSON lines; a FIFO, a link or an oversized file is one
line; the envelopes kept beside a store are named by their sha256."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pinmatrix.results.signedfile import (
    keep_envelope,
    kept_envelopes,
    read_signed_file,
    signed_dir,
    split_envelopes,
)
from pinmatrix.results.storefile import ResultsError


def test_an_array_and_json_lines_give_the_same_envelopes() -> None:
    envelopes = [{"payload": "eA==", "payloadType": "t", "signatures": []}, {"payload": "eQ==", "payloadType": "t",
                                                                             "signatures": []}]
    as_array = split_envelopes(json.dumps(envelopes, indent=1).encode(), "a")
    as_lines = split_envelopes("\n".join(json.dumps(e) for e in envelopes).encode(), "l")
    assert as_array == as_lines and len(as_array) == 2
    for bad, match in ((b"", "no signed results"), (b"[1, 2]", "every entry must be"), (b"{", "neither a JSON")):
        with pytest.raises(ResultsError, match=match):
            split_envelopes(bad, "f")


def test_a_fifo_a_link_and_an_oversized_file_are_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ResultsError, match="fifo: not a regular file"):
        read_signed_file(fifo)
    real = tmp_path / "real.json"
    real.write_text("[]")
    (tmp_path / "link.json").symlink_to(real)
    with pytest.raises(ResultsError, match="link.json: cannot read the signed results: a symbolic link"):
        read_signed_file(tmp_path / "link.json")
    real.write_bytes(b" " * 101)
    with pytest.raises(ResultsError, match="more than the 100 bytes"):
        read_signed_file(real, 100)


def test_kept_envelopes_live_beside_the_store_once_each(tmp_path: Path) -> None:
    store = tmp_path / "results.sqlite"
    assert kept_envelopes(store) == []
    keep_envelope(store, b"{}")
    keep_envelope(store, b"{}")
    keep_envelope(store, b"[]")
    assert signed_dir(store) == tmp_path / "results-signed"
    assert sorted(kept_envelopes(store)) == [b"[]", b"{}"]
