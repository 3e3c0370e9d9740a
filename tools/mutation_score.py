"""Mutation score per module from mutmut's results (run from the directory that holds ``mutants/``).

Counts each module's mutants by mutmut's verdict (mutants not checked yet are left out of the score and
counted), takes out the mutants named as equivalent in
``tools/equivalent_mutants.txt`` (one mutant name per line, ``#`` comments: each one justified there), and
prints killed / (total - equivalent) per module and overall, then every surviving mutant, then every stale name of
the equivalent list: one that belongs to a module in the results (the part of the name before its function) but
names none of its mutants, one of a module that no longer exists under ``mutants/`` (renamed or moved: mutmut
copies the whole source tree there), or one whose mutant the tests now kill (mutmut numbers a function's mutants
anew when the function changes, so the name now means another mutation). Names of other modules are not checked (a run of some modules only). Exit
status 1 when any module or the whole is below ``--min`` (percent), when mutants are left unchecked, or when a
name is stale."""

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


def module_of(name: str) -> str:
    """``pinmatrix.image.assembly.assemble`` of ``pinmatrix.image.assembly.assemble.xǁAssemblerǁplan__mutmut_5``."""
    return name.rsplit("__mutmut_", 1)[0].rpartition(".")[0]


def source_modules(mutants: Path) -> set[str]:
    """Every dotted module name a ``.py`` file under ``mutants/`` may go by (``src/a/b.py``: ``src.a.b``, ``a.b``)."""
    names: set[str] = set()
    for path in mutants.rglob("*.py"):
        parts = list(path.relative_to(mutants).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.update(".".join(parts[i:]) for i in range(len(parts)))
    return names


def stale_names(same: set[str], mutants_by_module: dict[str, set[str]], killed: set[str], mutants: Path) -> list[str]:
    """The equivalent names that name no mutant of a module in the results, name a module that is gone, or name a
    mutant the tests kill."""
    present = source_modules(mutants)
    out = []
    for name in sorted(same):
        module = module_of(name)
        if name in killed:
            out.append(f"{name}: the tests kill it, so it is not equivalent")
        elif module in mutants_by_module:
            if name not in mutants_by_module[module]:
                out.append(f"{name}: names no mutant of {module}")
        elif present and module not in present:
            out.append(f"{name}: no module {module} under {mutants}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mutants", type=Path, default=Path("mutants"))
    ap.add_argument("--equivalent", type=Path, default=Path(__file__).with_name("equivalent_mutants.txt"))
    ap.add_argument("--min", type=float, default=90.0)
    args = ap.parse_args()
    same = equivalents(args.equivalent)
    rows, survivors = [], []
    totals: Counter[str] = Counter()
    mutants_by_module: dict[str, set[str]] = {}
    killed_names: set[str] = set()
    for meta in sorted(args.mutants.rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        codes = data.get("exit_code_by_key", {})
        if not codes:
            continue
        module = str(meta.relative_to(args.mutants))[: -len(".meta")]
        count: Counter[str] = Counter()
        for name, code in codes.items():
            mutants_by_module.setdefault(module_of(name), set()).add(name)
            if status_by_exit_code[code] in KILLED:
                killed_names.add(name)
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
    stale = stale_names(same, mutants_by_module, killed_names, args.mutants)
    if stale:
        print(f"\n{len(stale)} stale name(s) in {args.equivalent} (rename them to the mutant now meant, after "
              "`mutmut show NAME`, or drop them):")
        for line in stale:
            print(f"  {line}")
    below = [module for module, killed, scored, _ in rows if scored and 100 * killed / scored < args.min]
    for module in below:
        print(f"error: {module} is below {args.min:g}% killed")
    return 0 if score >= args.min and not below and not totals["not checked"] and not stale else 1


if __name__ == "__main__":
    raise SystemExit(main())
