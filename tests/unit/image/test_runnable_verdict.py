"""image/runnable_verdict.py: the verdict's key changes with each of its inputs (the layers, their order, the
architecture, the environment, the checker, the format), and only a verdict document of this format is read."""

from __future__ import annotations

import pytest

from pinmatrix.image import runnable_verdict
from pinmatrix.image.runnable_verdict import from_document, to_document, verdict_key

A, B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def test_the_key_changes_with_each_input(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/opt/lib"}
    keys = {verdict_key([A, B], "amd64", env), verdict_key([B, A], "amd64", env), verdict_key([A], "amd64", env),
            verdict_key([A, B], "arm64", env), verdict_key([A, B], "amd64", {**env, "LD_LIBRARY_PATH": "/x"})}
    monkeypatch.setattr(runnable_verdict, "VERDICT_FORMAT", 2)
    keys.add(verdict_key([A, B], "amd64", env))
    monkeypatch.setattr(runnable_verdict, "checker_identity", lambda: "another checker")
    keys.add(verdict_key([A, B], "amd64", env))
    assert len(keys) == 7
    assert verdict_key([A, B], "amd64", env) == verdict_key([A, B], "amd64", dict(reversed(env.items())))


def test_the_checker_identity_is_its_code_and_rules() -> None:
    assert len(runnable_verdict.checker_identity()) == 64


def test_only_a_verdict_of_this_format_is_read() -> None:
    assert from_document(to_document(["runnable: /x: optional, why"])) == ("runnable: /x: optional, why",)
    for bad in ({"format": 2, "notes": []}, {"format": 1, "notes": "x"}, {"format": 1}, {"format": 1, "notes": [],
                                                                                         "more": 1}):
        with pytest.raises(ValueError, match="not a runnable verdict"):
            from_document(bad)
