"""Before any layer is written, the lock must be the cell's: made for the cell (header), for its Python and
platform, with every pinned axis at its pinned version and every line pinned with hashes."""

from __future__ import annotations

import re

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from pinmatrix.cell import Cell
from pinmatrix.errors import PinmatrixError
from pinmatrix.project.lockfile import LockFileError, ParsedLock, parse_lock

_TARGET = re.compile(r"^# python (\S+) on (\S+);", re.MULTILINE)


class LockMismatch(PinmatrixError):
    """The lock does not belong to the cell, or leaves a package unpinned or unhashed."""


def checked_lock(cell: Cell, lock_text: str, source: str) -> ParsedLock:
    """The parsed lock of ``cell``, or ``LockMismatch`` naming the first package (or header) that is wrong."""
    try:
        lock = parse_lock(lock_text, source=source)
    except LockFileError as err:
        raise LockMismatch(str(err)) from None
    where = f"cell {cell.id} ({cell.name}): {source}"
    if lock.cell_id is not None and lock.cell_id != cell.id:
        raise LockMismatch(f"{where}: the lock was made for cell {lock.cell_id}; relock with `pinmatrix lock -k {cell.id}`")
    target = _TARGET.search(lock_text)
    if target and (target.group(1), target.group(2)) != (cell.python, cell.platform):
        raise LockMismatch(f"{where}: the lock is for python {target.group(1)} on {target.group(2)}, the cell is "
                           f"python {cell.python} on {cell.platform}")
    if not lock.entries:
        raise LockMismatch(f"{where}: the lock lists no packages")
    by_name = lock.by_name()
    for line in cell.requirements:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        name = canonicalize_name(req.name)
        entry = by_name.get(name)
        if entry is None:
            raise LockMismatch(f"{where}: {req.name} is pinned by the cell ({line}) but missing from the lock")
        if req.specifier and not req.specifier.contains(entry.version, prereleases=True):
            raise LockMismatch(f"{where}: {req.name} is {entry.version} in the lock, the cell pins {line}")
    for entry in lock.entries:
        if not entry.pinned:
            raise LockMismatch(f"{where}: {entry.name} is not pinned to one version ({entry.text[:60]!r})")
        if not entry.hashes:
            raise LockMismatch(f"{where}: {entry.name}=={entry.version} has no --hash")
    return lock
