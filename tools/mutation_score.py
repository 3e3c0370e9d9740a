"""Mutation score per module from mutmut's results (run from the directory that holds ``mutants/``).

Counts each module's mutants by mutmut's verdict (mutants not checked yet are left out of the score and
counted), takes out the mutants named as equivalent in
``tools/equivalent_mutants.txt`` (one mutant name per line, ``#`` comments: each one justified there), and
prints killed / (total - equivalent) per module and overall, then every surviving mutant. Exit status 1 when
any module or the whole is below ``--min`` (percent), or when mutants are left unchecked."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from mutmut.stats import status_by_exit_code

KILLED = {"killed", "timeout", "caught by type check"}  # a timeout means the mutant broke the code under test


def equivalents(path: Path) -> set[str]:
    if not path.is_file():
        return set()
    return {ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines()} - {""}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mutants", type=Path, default=Path("mutants"))
    ap.add_argument("--equivalent", type=Path, default=Path(__file__).with_name("equivalent_mutants.txt"))
    ap.add_argument("--min", type=float, default=90.0)
    args = ap.parse_args()
    same = equivalents(args.equivalent)
    rows, survivors = [], []
    totals: Counter[str] = Counter()
    for meta in sorted(args.mutants.rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        codes = data.get("exit_code_by_key", {})
        if not codes:
            continue
        module = str(meta.relative_to(args.mutants))[: -len(".meta")]
        count: Counter[str] = Counter()
        for name, code in codes.items():
            status = "equivalent" if name in same else status_by_exit_code[code]
            count[status] += 1
            if status not in KILLED and status not in ("equivalent", "not checked"):
                survivors.append(f"{name}: {status}")
        killed = sum(count[s] for s in KILLED)
        scored = sum(count.values()) - count["equivalent"] - count["not checked"]
        rows.append((module, killed, scored, count))
        totals.update(count)
    if not rows:
        print("no mutmut results: run `mutmut run` first")
        return 1
    for module, killed, scored, count in rows:
        other = ", ".join(f"{n} {s}" for s, n in sorted(count.items()) if s not in KILLED)
        print(f"{module:40} {killed:5}/{scored:<5} {100 * killed / max(scored, 1):5.1f}%  {other}")
    killed = sum(totals[s] for s in KILLED)
    scored = sum(totals.values()) - totals["equivalent"] - totals["not checked"]
    score = 100 * killed / max(scored, 1)
    print(f"{'all':40} {killed:5}/{scored:<5} {score:5.1f}%  ({totals['equivalent']} equivalent mutants excluded)")
    if totals["not checked"]:
        print(f"warning: {totals['not checked']} mutant(s) not checked yet: the score covers the checked ones only")
    print(f"\n{len(survivors)} surviving mutant(s) (`mutmut show NAME` shows one):")
    for line in survivors:
        print(f"  {line}")
    below = [module for module, killed, scored, _ in rows if scored and 100 * killed / scored < args.min]
    for module in below:
        print(f"error: {module} is below {args.min:g}% killed")
    return 0 if score >= args.min and not below and not totals["not checked"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
