"""What a cell's base must carry at run time because of what its lock holds (``data/runtime_needs.toml``, each
rule naming its source): the typed model, its loader, and the check ``validate`` runs on every locked cell.

Triton compiles its launchers from C at first use, so a base without a compiler and ``Python.h`` builds an image
whose first Triton kernel fails; the rule says so before anything is built."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from packaging.utils import canonicalize_name
from pydantic import AfterValidator, Field, ValidationError

from pinmatrix import names
from pinmatrix.cell import Cell
from pinmatrix.datamodel import Strict, friendly_message, key_path
from pinmatrix.errors import PinmatrixError
from pinmatrix.names import FreeText, OneLine, PackageName
from pinmatrix.project.lockfile import LockFileError, parse_lock
from pinmatrix.project.matrix_toml import Matrix

NEEDS_FILE = "runtime_needs.toml"
MAX_NEEDS_BYTES = 64 * 1024
MAX_LOCK_BYTES = 4 * 1024 * 1024  # a lock of 200 pins with hashes is ~100 kB
_PYTHON_SLOT = "{python}"


class RuntimeNeedsError(PinmatrixError):
    """runtime_needs.toml is malformed: one line naming the file and the key."""


def _check_deb_template(value: str) -> str:
    """A Debian package name, where ``{python}`` may stand for the cell's Python."""
    names.check_debian_name(value.replace(_PYTHON_SLOT, "3.13"), "Debian package")
    return value


DebTemplate = Annotated[str, AfterValidator(_check_deb_template)]


class NeedRule(Strict):
    """Where ``distribution`` is in a cell's lock, its base must hold one package of each list in ``debian``."""

    distribution: PackageName
    what: OneLine  # the need in words: "a C compiler and the Python headers"
    reason: FreeText
    source: OneLine
    debian: list[Annotated[list[DebTemplate], Field(min_length=1)]] = Field(min_length=1)

    def missing(self, packages: Iterable[str], python: str) -> list[list[str]]:
        """The needs none of whose alternatives is among ``packages`` (each need as its alternatives)."""
        have = set(packages)
        out = []
        for alternatives in self.debian:
            concrete = [a.replace(_PYTHON_SLOT, python) for a in alternatives]
            if not have.intersection(concrete):
                out.append(concrete)
        return out


class NeedsDoc(Strict):
    needs: list[NeedRule] = Field(min_length=1)


def parse_needs(data: Mapping[str, Any], name: str = NEEDS_FILE) -> NeedsDoc:
    try:
        return NeedsDoc.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise RuntimeNeedsError(f"{name}: {key_path(tuple(err['loc']))}: {friendly_message(err, NeedsDoc)}") from None


def load_needs(text: str, name: str = NEEDS_FILE) -> NeedsDoc:
    if len(text.encode("utf-8")) > MAX_NEEDS_BYTES:
        raise RuntimeNeedsError(f"{name}: more than {MAX_NEEDS_BYTES} bytes")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RuntimeNeedsError(f"{name}: syntax error: {exc}") from None
    return parse_needs(data, name)


@cache
def default_needs() -> NeedsDoc:
    text = resources.files("pinmatrix").joinpath(f"data/{NEEDS_FILE}").read_text(encoding="utf-8")
    return load_needs(text)


@dataclass(frozen=True)
class Shortfall:
    cell: Cell
    rule: NeedRule
    missing: tuple[tuple[str, ...], ...]

    def words(self) -> str:
        wanted = "; ".join(" or ".join(alts) for alts in self.missing)
        return (f"cell {self.cell.id} ({self.cell.name}) locks {self.rule.distribution}, so its base needs "
                f"{self.rule.what}: add {wanted} ({self.rule.reason}; source: {self.rule.source})")


def locked_distributions(lock_file: Path) -> set[str] | None:
    """The canonical names in a cell's lock; None when the cell has no lock yet (it is checked once locked)."""
    try:
        size = lock_file.stat().st_size
    except FileNotFoundError:
        return None
    if size > MAX_LOCK_BYTES:
        raise LockFileError(f"{lock_file}: {size} bytes is more than a lock may have ({MAX_LOCK_BYTES})")
    return set(parse_lock(lock_file.read_text(encoding="utf-8"), str(lock_file)).by_name())


def shortfalls(cell: Cell, locked: set[str], rules: NeedsDoc) -> list[Shortfall]:
    """The rules whose distribution ``cell`` locks and whose needs its mmdebstrap base does not meet (a pinned
    image's packages cannot be read from the matrix)."""
    if cell.base.kind != "mmdebstrap":
        return []
    out: list[Shortfall] = []
    for rule in rules.needs:
        if canonicalize_name(rule.distribution) in locked:
            missing = rule.missing(cell.base.packages, cell.python)
            if missing:
                out.append(Shortfall(cell, rule, tuple(tuple(m) for m in missing)))
    return out


_LOCK_NAME = re.compile(r"^[0-9a-f]{12}$")


def check_runtime_needs(matrix: Matrix, cells: Iterable[Cell], rules: NeedsDoc | None = None) -> list[str]:
    """One located line per cell whose lock (``locks/<id>.txt`` beside the matrix) holds a distribution whose
    runtime needs its base lacks; the line points at the base the cell takes (the stack's own, else matrix.base)."""
    rules = rules or default_needs()
    problems: list[str] = []
    for cell in cells:
        if not _LOCK_NAME.match(cell.id):
            continue
        locked = locked_distributions(matrix.root / "locks" / f"{cell.id}.txt")
        if locked is None:
            continue
        stack = matrix.stacks.get(cell.stack)
        path: tuple[str | int, ...] = (("stacks", cell.stack, "base", "packages") if stack is not None and stack.base
                                       else ("matrix", "base", "packages"))
        problems.extend(matrix.where(path, s.words()) for s in shortfalls(cell, locked, rules))
    return problems
