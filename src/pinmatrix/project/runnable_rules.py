"""data/runnable.toml: what the static load check (``image/assembly/loadcheck``) takes as given, each table naming
its source: the loader's system directories per architecture, the libraries the host provides at run time (the
GPU driver's), and the files an image may hold that need what it lacks; one strict model."""

from __future__ import annotations

import fnmatch
from functools import cache
from importlib import resources
from pathlib import Path

from pydantic import Field

from pinmatrix.datamodel import Strict
from pinmatrix.errors import PinmatrixError
from pinmatrix.names import OneLine
from pinmatrix.project.document import load_document

RULES_FILE = "runnable.toml"


class RunnableRulesError(PinmatrixError):
    """runnable.toml is malformed: one line naming the file, the line and the key."""


class HostLibrary(Strict):
    name: OneLine
    reason: OneLine


class LoaderTable(Strict):
    source: OneLine
    system_dirs: dict[str, list[OneLine]] = Field(min_length=1)


class HostProvidedTable(Strict):
    source: OneLine
    libraries: list[HostLibrary]


class OptionalFile(Strict):
    glob: OneLine  # the file's path in the image, no leading '/' (fnmatch)
    reason: OneLine


class OptionalTable(Strict):
    source: OneLine
    files: list[OptionalFile] = Field(default_factory=list)


class RunnableRules(Strict):
    """data/runnable.toml."""

    loader: LoaderTable
    host_provided: HostProvidedTable
    optional: OptionalTable

    def host_library(self, name: str) -> HostLibrary | None:
        return next((lib for lib in self.host_provided.libraries if lib.name == name), None)

    def optional_file(self, path: str) -> OptionalFile | None:
        return next((f for f in self.optional.files if fnmatch.fnmatchcase(path, f.glob)), None)


def parse_rules(text: str, name: str = RULES_FILE) -> RunnableRules:
    """The rules' text -> RunnableRules; RunnableRulesError, one line ``NAME:LINE: key: message``."""
    return load_document(Path(name), RunnableRules, what="a load-check rule table", content=text,
                         error=RunnableRulesError)


@cache
def default_rules() -> RunnableRules:
    """The rules pinmatrix ships."""
    return parse_rules(resources.files("pinmatrix").joinpath(f"data/{RULES_FILE}").read_text(encoding="utf-8"))
