"""data/runnable.toml (project/runnable_rules.py): the shipped rules load through the model; a malformed file is
one located line."""

from __future__ import annotations

import pytest

from pinmatrix.project.runnable_rules import RunnableRulesError, default_rules, parse_rules

VALID = ("[loader]\nsource = 's'\n[loader.system_dirs]\namd64 = ['/lib']\n[host_provided]\nsource = 'x'\n"
         "libraries = [{ name = 'libcuda.so.1', reason = 'the driver' }]\n[optional]\nsource = 'y'\n"
         "[[optional.files]]\nglob = 'usr/lib/*/libibverbs/*'\nreason = 'rdma'\n")


def test_the_shipped_rules_load_and_answer() -> None:
    rules = default_rules()
    assert rules.host_library("libcuda.so.1") is not None and rules.host_library("libc.so.6") is None
    assert "amd64" in rules.loader.system_dirs and rules.loader.source
    mine = parse_rules(VALID)
    driver, rdma = mine.host_library("libcuda.so.1"), mine.optional_file("usr/lib/x86_64-linux-gnu/libibverbs/x.so")
    assert driver is not None and driver.reason == "the driver" and rdma is not None and rdma.reason == "rdma"
    assert mine.optional_file("usr/lib/libmlx5.so") is None


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("[loader]\nsource = 's'\n[loader.system_dirs]\namd64 = ['/lib']\n", "",
     "runnable.toml:1: loader: required key is missing"),
    ("amd64 = ['/lib']", "amd64 = '/lib'", "runnable.toml:4: loader.system_dirs.amd64: Input should be a valid list"),
    ("reason = 'rdma'", "reasons = 'rdma'", "runnable.toml:12: optional.files.0.reasons: unknown key (did you mean "
                                            "'reason'?)"),
    ("[optional]\n", "[optional\n", "runnable.toml:8: syntax error: "),
])
def test_a_malformed_rules_file_is_one_located_line(old: str, new: str, expected: str) -> None:
    with pytest.raises(RunnableRulesError) as err:
        parse_rules(VALID.replace(old, new))
    assert str(err.value).startswith(expected) and "\n" not in str(err.value)
