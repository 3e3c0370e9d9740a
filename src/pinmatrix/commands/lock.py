"""``pinmatrix lock``: resolve each selected cell with uv into locks/<cell-id>.txt with hashes."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from pinmatrix.cell import Cell
from pinmatrix.commands._common import add_matrix_argument, add_selection_arguments, examples, selected
from pinmatrix.lock.resolve import (
    LockResult,
    lock_cells,
    owners_path,
    record_owner,
    stale_locks,
    uv_version,
)
from pinmatrix.lock.settings import LockSettings
from pinmatrix.matrix.beyond_index import group_needs
from pinmatrix.matrix.selection import load
from pinmatrix.project.lockfile import lock_path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "lock", help="lock each cell with uv into locks/<cell-id>.txt (pins + sha256 hashes)",
        description="Resolve each selected cell with `uv pip compile --generate-hashes` for the cell's Python and "
                    "target platform, against the matrix's indexes as they stood at matrix.exclude_newer. A cell "
                    "that cannot be resolved is reported with uv's reason; the others still lock. Exit 1 if any "
                    "cell failed. A lock whose wheels do not meet the cell's platform (a manylinux floor too low) is refused, "
                    "naming the distributions and their wheels' tags. Cells without pip requirements are skipped, and so are cells that need more than a lock "
                    "from the default index (the PyTorch index, a source build: `pinmatrix validate` lists them), "
                    "each need said once, unless --with-needs. A full lock (no --stack/-k) removes "
                    "the locks this matrix made for cells it no longer has; locks/owners.json records which matrix "
                    "made which lock, so locks of another matrix in the same folder are never touched. --check "
                    "resolves again, writes nothing and exits 1 when a lock is missing or stale (for CI).",
        **examples("pinmatrix lock --stack demo             # locks/<cell-id>.txt for the demo cells",
                   "pinmatrix lock -k 'h200 and int64' --json",
                   "pinmatrix lock --check                  # CI: exit 1 when any lock is missing or stale"),
    )
    add_matrix_argument(p)
    add_selection_arguments(p)
    p.add_argument("--jobs", "-j", type=int, default=4, help="cells resolved at once (default 4)")
    p.add_argument("--json", action="store_true",
                   help="print one {cell, name, status, path, uv, reason} per cell as JSON on stdout")
    p.add_argument("--check", action="store_true",
                   help="resolve every selected cell again and compare with its lock (the uv version line aside); "
                   "write nothing; exit 1 when a lock is missing or would change, or a lock this matrix made has no "
                   "cell any more")
    p.add_argument("--with-needs", action="store_true",
                   help="also lock cells that need another index or a source build (where that index is reachable)")
    p.set_defaults(func=run)


def unreachable_index(res: LockResult) -> str | None:
    """The cell's index that uv could not reach at all (connect or DNS failure), if that is why it failed."""
    if not any(word in res.reason for word in ("dns error", "Connect", "connection refused", "timed out")):
        return None
    for index in res.cell.indexes:
        if index.url.rstrip("/") in res.reason:
            return index.url
    return None


def run(args: argparse.Namespace) -> int:
    matrix, expansion = load(args.matrix)
    cells = [c for c in selected(matrix, expansion, args) if c.requirements]
    console = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)
    if not args.with_needs:
        for need in group_needs(cells):
            console.print(f"not locked: {need.line()} (`pinmatrix cells --json` names them; --with-needs tries them)")
        cells = [c for c in cells if not c.needs]
    progress = _Progress(console, len(cells), args.check)
    results = lock_cells(cells, LockSettings.of(matrix, jobs=args.jobs, write=not args.check), on_done=progress.report)
    root, owner = Path(matrix.root), matrix.path.name
    full = args.stack is None and args.keyword is None and not args.cell
    if args.check:
        return _check_outcome(args, results, root, owner, full, {c.id for c in expansion.cells}, console,
                              progress.state_of)
    if owner != "<stdin>":  # a matrix read from stdin has no name to own locks by
        _own_locks(root, owner, full, cells, {c.id for c in expansion.cells}, console)
    for index, ids in progress.unreachable.items():
        console.print(f"index {index} is unreachable from here: {len(ids)} cell(s) cannot lock: {', '.join(ids)}")
    failed = [r for r in results if not r.ok]
    if args.json:
        _print_json(results)
    print(f"{len(results) - len(failed)} locked, {len(failed)} failed", file=sys.stderr)
    return 1 if failed else 0


class _Progress:
    """``[3/12] locked    <id> <name>`` per cell as each lock ends; an unreachable index is named once."""

    def __init__(self, console: Console, total: int, check: bool) -> None:
        self.console, self.total, self.check, self.done = console, total, check, 0
        self.unreachable: dict[str, list[str]] = {}  # index URL -> cells that failed because it cannot be reached

    def state_of(self, res: LockResult) -> str:
        if not res.ok:
            return "FAILED"
        if self.check:
            return ("STALE" if res.path.is_file() else "MISSING") if res.changed else "fresh"
        return "locked" if res.changed else "unchanged"

    def report(self, res: LockResult) -> None:
        self.done += 1
        index = None if res.ok else unreachable_index(res)
        suffix = f": index {index} unreachable (reported once below)" if index else ""
        self.console.print(f"[{self.done}/{self.total}] {self.state_of(res):9} {res.cell.id} {res.cell.name}{suffix}")
        if index:
            self.unreachable.setdefault(index, []).append(res.cell.id)
        elif not res.ok:
            self.console.print(f"          {res.reason}")


def _own_locks(root: Path, owner: str, full: bool, cells: list[Cell], all_ids: set[str], console: Console) -> None:
    """After a full lock, remove the locks this matrix made for cells it no longer has (keeping other matrices'
    locks), then record which locks this matrix owns."""
    if full:
        remove, keep = stale_locks(root, owner, all_ids)
        for stale in remove:
            stale.unlink()
            console.print(f"removed   {stale.name}: {owner} made it and has no cell with this id any more")
        if keep:
            console.print(f"kept      {len(keep)} lock(s) that no cell of {owner} has but that {owner} did not make "
                          f"(another matrix's, see {owners_path(root)}): {', '.join(p.stem for p in keep)}")
    record_owner(root, owner, [c.id for c in cells if lock_path(c, root).is_file()], replace=full)


def _print_json(results: list[LockResult]) -> None:

    version = uv_version() if results else None
    print(json.dumps([{"cell": r.cell.id, "name": r.cell.name, "path": str(r.path), "uv": version,
                       "status": ("locked" if r.changed else "unchanged") if r.ok else "failed",
                       "reason": r.reason or None} for r in results], indent=2))


def _check_outcome(args: argparse.Namespace, results: list[LockResult], root: Path, owner: str, full: bool,
                   current: set[str], console: Console, state_of: Callable[[LockResult], str]) -> int:
    """``lock --check``: nothing written; exit 1 when any lock is missing, stale or could not be resolved, or
    (on a full check) a lock this matrix made has no cell any more."""
    orphans = stale_locks(root, owner, current)[0] if full and owner != "<stdin>" else []
    for path in orphans:
        console.print(f"orphan    {path.name}: {owner} made it and has no cell with this id any more")
    bad = [r for r in results if state_of(r) != "fresh"]
    if args.json:
        print(json.dumps([{"cell": r.cell.id, "name": r.cell.name, "path": str(r.path), "status": state_of(r).lower(),
                           "reason": r.reason or None} for r in results]
                         + [{"cell": p.stem, "name": None, "path": str(p), "status": "orphan", "reason": None}
                            for p in orphans], indent=2))
    print(f"{len(results) - len(bad)} fresh, {len(bad)} missing, stale or failed, {len(orphans)} orphaned"
          + ("" if bad or orphans else ": every lock is up to date")
          + ("; run `pinmatrix lock` to update" if bad or orphans else ""), file=sys.stderr)
    return 1 if bad or orphans else 0
