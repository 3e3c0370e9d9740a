"""``pinmatrix cells``: list the expanded cells (and, with --pruned, the combinations rules removed)."""

from __future__ import annotations

import argparse
import json

from pinmatrix.commands._common import add_matrix_argument, add_selection_arguments, examples, selected
from pinmatrix.matrix.beyond_index import group_needs
from pinmatrix.matrix.selection import load
from pinmatrix.report.tables import TableData, add_format_argument, output_format, print_table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cells", help="list the matrix's cells with ids, pins, arch flags, patches and known issues",
        description="Expand the matrix into cells. Each cell has a stable id: a short hash of everything that "
                    "defines it (pins, patches with their sha256, arch flags, env, base, indexes).",
        **examples("pinmatrix cells --stack gb10-nvfp4 --pruned        # and what the rules pruned, with why",
                   "pinmatrix cells -k 'h200 and int64' --json",
                   "pinmatrix cells --stack demo --ids                 # one id per line, for scripts",
                   "pinmatrix cells --stack demo --set six=1.15.0      # a one-off cell, matrix.toml unchanged",
                   "for id in $(pinmatrix cells --ids -k demo); do pinmatrix lock -k $id; done"),
    )
    add_matrix_argument(p)
    add_selection_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON: {cells: [...], pruned: [...]}")
    add_format_argument(p)
    p.add_argument("--pruned", action="store_true", help="also list pruned combinations with the rule that pruned them")
    p.add_argument("--ids", action="store_true", help="print only the selected cells' ids, one per line")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    matrix, expansion = load(args.matrix)
    cells = selected(matrix, expansion, args)
    if args.ids:
        for c in cells:
            print(c.id)
        return 0
    fmt = output_format(args)
    pruned = [p for p in expansion.pruned if args.stack in (None, p.stack)] if args.pruned or fmt == "json" else []
    if fmt == "json":
        print(json.dumps({"cells": [c.to_dict() for c in cells], "pruned": [p.to_dict() for p in pruned]},
                         indent=2, sort_keys=True))
        return 0
    table = TableData(f"{len(cells)} cells", ("id", "name", "arch", "patches", "known issues"))
    for c in cells:
        patches = ", ".join(f"{p.id} ({p.status})" for p in c.patches) or "-"
        issues = ", ".join(k.id for k in c.known_issues) or "-"
        table.add(c.id, c.name, " ".join(c.arch_flags) or "-", patches, issues)
    print_table(table, fmt)
    lines: list[str] = []
    needs = group_needs(cells)
    if needs:
        lines += [f"\n{sum(1 for c in cells if c.needs)} cells need more than a lock from the default index:"]
        lines += [f"  {need.line()}" for need in needs]
    if args.pruned:
        lines.append(f"\n{len(pruned)} pruned combinations:")
        for p in pruned:
            lines += [f"  {p.name}", *(f"      - {reason}" for reason in p.reasons)]
    for line in lines:
        print(line)
    return 0
