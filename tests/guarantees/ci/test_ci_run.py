"""CI runs the README's two commands in order, in one checkout (issue 45): `./dev`, then `./dev tests`, so a test
that reads what ./dev leaves behind fails in CI, not first on a user's machine."""

from __future__ import annotations

import re

from conftest import REPO


def _commands(script: str) -> list[str]:
    lines = [line.split("#", 1)[0].strip() for line in script.splitlines()]
    return [re.sub(r"^exec ", "", line) for line in lines if line.startswith(("./dev", "exec ./dev"))]


def test_the_readme_commands_run_in_order() -> None:
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Two commands", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    assert _commands(block) == ["./dev", "./dev tests"]
    ci = _commands((REPO / ".ci" / "run").read_text())
    assert [c for c in ci if c in ("./dev", './dev tests "$@"')] == ["./dev", './dev tests "$@"'], ci
