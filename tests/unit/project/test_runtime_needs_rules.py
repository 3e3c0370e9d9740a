"""data/runtime_needs.toml (project/runtime_needs_rules.py): the shipped rules load through the model; a malformed
file is one located line."""

from __future__ import annotations

import pytest

from pinmatrix.project.runtime_needs_rules import MAX_NEEDS_BYTES, RuntimeNeedsError, default_needs, load_needs

RULE = '[[needs]]\ndistribution = "triton"\nwhat = "x"\nreason = "y"\nsource = "z"\n'


def test_the_shipped_rules_name_their_source() -> None:
    (rule,) = [r for r in default_needs().needs if r.distribution == "triton"]
    assert "build.py" in rule.source
    assert rule.missing(["gcc", "python3.12-dev", "libc6-dev"], "3.12") == []
    assert rule.missing(["gcc", "python3.12-dev", "libc6-dev"], "3.13") == [["python3-dev", "python3.13-dev"]]
    assert rule.missing(["python3.13-dev", "clang"], "3.13") == [["libc6-dev"]]


@pytest.mark.parametrize(("text", "expected"), [
    ("needs = []", "runtime_needs.toml:1: needs: List should have at least 1 item"),
    (RULE + 'debian = [["Gcc"]]', "runtime_needs.toml:6: needs.0.debian.0.0: "),
    (RULE + 'debian = [["gcc"]]\nextra = 1', "runtime_needs.toml:7: needs.0.extra: unknown key"),
    (RULE + "debian = []", "runtime_needs.toml:6: needs.0.debian: List should have at least 1 item"),
    (RULE, "runtime_needs.toml:1: needs.0.debian: required key is missing"),
    ("needs = [", "runtime_needs.toml:1: syntax error: "),
])
def test_a_malformed_rules_file_is_one_located_line(text: str, expected: str) -> None:
    with pytest.raises(RuntimeNeedsError) as err:
        load_needs(text)
    assert str(err.value).startswith(expected) and "\n" not in str(err.value)


def test_a_rules_file_is_bounded() -> None:
    text = RULE + 'debian = [["gcc"]]\n'
    assert load_needs(text + "#" * (MAX_NEEDS_BYTES - len(text) - 1) + "\n").needs[0].debian == [["gcc"]]
    with pytest.raises(RuntimeNeedsError) as err:
        load_needs(text + "#" * (MAX_NEEDS_BYTES - len(text)) + "\n", name="big.toml")
    assert str(err.value) == f"big.toml: {MAX_NEEDS_BYTES + 1} bytes is more than a runtime needs table may have " \
                             f"({MAX_NEEDS_BYTES} bytes)"
