"""data/runtime_needs.toml: what a cell's base must carry at run time because of what its lock holds, each rule
naming its source; one strict model. ``matrix/runtime_needs`` checks every locked cell against it."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field

from pinmatrix import names
from pinmatrix.datamodel import Strict
from pinmatrix.errors import PinmatrixError
from pinmatrix.names import FreeText, OneLine, PackageName
from pinmatrix.project.document import load_document

NEEDS_FILE = "runtime_needs.toml"
MAX_NEEDS_BYTES = 64 * 1024
_PYTHON_SLOT = "{python}"


class RuntimeNeedsError(PinmatrixError):
    """runtime_needs.toml is malformed: one line naming the file, the line and the key."""


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


def load_needs(text: str, name: str = NEEDS_FILE) -> NeedsDoc:
    """The rules' text -> NeedsDoc; RuntimeNeedsError, one line ``NAME:LINE: key: message``."""
    return load_document(Path(name), NeedsDoc, what="a runtime needs table", content=text, error=RuntimeNeedsError,
                         max_bytes=MAX_NEEDS_BYTES)


@cache
def default_needs() -> NeedsDoc:
    """The rules pinmatrix ships."""
    return load_needs(resources.files("pinmatrix").joinpath(f"data/{NEEDS_FILE}").read_text(encoding="utf-8"))
