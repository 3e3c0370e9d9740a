"""The golden expansion of the shipped matrix.toml: every cell whole (id, name, pins, requirements, patches,
known issues, indexes, base, env), every pruned combination's name and reasons. `python
tests/support/golden_expansion.py` rewrites tests/data/expansion.golden.json after a deliberate change (a new pin, a new
rule); tests/guarantees/golden/test_golden_expansion.py fails on any other change."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "data" / "expansion.golden.json"


def current() -> dict[str, Any]:
    from pinmatrix.matrix.compat import CompatRules
    from pinmatrix.matrix.selection import expand_matrix
    from pinmatrix.project.matrix_toml import load_matrix

    # the shipped tables alone: a checkout's cached wheel metadata (.pinmatrix/cache) must not move the golden
    expansion = expand_matrix(load_matrix(REPO / "matrix.toml"), CompatRules.default())
    return {
        "cells": [c.to_dict() for c in expansion.cells],
        "pruned": [{"name": p.name, "pins": dict(p.pins), "reasons": list(p.reasons)} for p in expansion.pruned],
    }


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    GOLDEN.write_text(render(current()), encoding="utf-8")
    print(f"wrote {GOLDEN.relative_to(REPO)}", file=sys.stderr)
