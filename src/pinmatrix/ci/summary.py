"""What an emitter left out, said in one line: ``ci k8s`` and ``ci slurm`` skip each cell x pool that cannot run
(no image by digest, no fitting pool, ...), which for a large matrix is dozens of lines in a CI log. The line
counts them by reason and names the first few cells; ``--verbose`` still lists every one."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

SHOWN = 3  # cells named in the summary


def _reason(line: str) -> str:
    """``ID NAME[ x pool P]: reason`` -> its reason, with the pool's own name and values left in (they differ)."""
    return line.split(": ", 1)[1] if ": " in line else line


def skipped_summary(command: str, lines: Sequence[str]) -> str | None:
    """``ci k8s: skipped 61 cell x pool(s): 40 no image by digest ..., 21 ...; e.g. ID, ID, ID (--verbose lists
    them)``, or None when nothing was skipped."""
    if not lines:
        return None
    by_reason = Counter(_reason(line) for line in lines)
    reasons = ", ".join(f"{n} {why}" for why, n in by_reason.most_common())
    cells = list(dict.fromkeys(line.split(" ", 1)[0] for line in lines))
    named = ", ".join(cells[:SHOWN]) + (f" and {len(cells) - SHOWN} more" if len(cells) > SHOWN else "")
    return f"{command}: skipped {len(lines)} cell x pool(s): {reasons}; cells {named} (--verbose lists each)"
