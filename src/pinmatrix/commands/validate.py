"""``pinmatrix validate``: check matrix.toml; exit 0, or 2 with one located line per problem."""

from __future__ import annotations

import argparse
import json

from pinmatrix.commands._common import add_matrix_argument, examples
from pinmatrix.errors import MatrixError
from pinmatrix.matrix.beyond_index import group_needs
from pinmatrix.matrix.compat import hand_rule_disagreements, rules_for
from pinmatrix.matrix.selection import validate_matrix


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate", help="check matrix.toml and report every problem with its line",
        description="Check the matrix: schema (unknown keys with a did-you-mean, bad versions and specifiers), "
                    "patch ids, patch files and their sha256, versions the compatibility tables know, zip/include/"
                    "exclude rules, stacks whose every cell is pruned, duplicate cell ids. Exit 0 when clean, "
                    "else 2 with one 'FILE:LINE: key: message' line per problem. Cells that need more than a lock "
                    "from the default index (the PyTorch index, a source build) are valid: one 'needs' line each "
                    "need says how many.",
        **examples("pinmatrix validate                 # FILE:LINE: key: message per problem, exit 2",
                   "pinmatrix validate --json",
                   "cat matrix.toml | pinmatrix validate -"),
    )
    add_matrix_argument(p)
    p.add_argument("--json", action="store_true",
                   help="print {matrix, ok, stacks, cells, pruned, problems} as JSON on stdout (exit codes unchanged)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.json:
        return _check(args)
    try:
        _check(args, as_json=True)
        return 0
    except MatrixError as err:
        print(json.dumps({"matrix": str(args.matrix), "ok": False, "problems": err.lines()}, indent=2))
        raise


def _check(args: argparse.Namespace, *, as_json: bool = False) -> int:
    matrix, expansion = validate_matrix(args.matrix)
    if as_json:
        needs = [{"stack": n.stack, "need": n.text, "cells": list(n.cell_ids)} for n in group_needs(expansion.cells)]
        print(json.dumps({"matrix": str(args.matrix), "ok": True, "stacks": sorted(matrix.stacks),
                          "cells": len(expansion.cells), "pruned": len(expansion.pruned), "needs": needs,
                          "problems": []}, indent=2))
        return 0
    print(f"{args.matrix}: ok: {len(matrix.stacks)} stacks, {len(expansion.cells)} cells, "
          f"{len(expansion.pruned)} pruned combinations")
    for need in group_needs(expansion.cells):
        print(f"needs: {need.line()}")
    for line in hand_rule_disagreements(rules_for(matrix.root, matrix.settings.python)):
        print(f"disagrees: {line}")  # the wheel's own pin wins in expansion; the hand rule is to be corrected
    return 0
