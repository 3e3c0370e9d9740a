"""The shipped matrix expands to exactly the recorded cells (ids, names) and pruned combinations (reasons).
After a deliberate change: `python tests/support/golden_expansion.py` and commit the new golden file."""

from __future__ import annotations

import difflib

from golden_expansion import GOLDEN, current, render


def test_shipped_matrix_expands_to_the_golden_cells_and_pruned_reasons() -> None:
    want = GOLDEN.read_text(encoding="utf-8")
    have = render(current())
    diff = "".join(difflib.unified_diff(want.splitlines(True), have.splitlines(True), "golden", "now", n=1))
    assert have == want, f"expansion changed (update: python tests/support/golden_expansion.py):\n{diff[:4000]}"
