"""signatures.toml: the log lines that name a smoke's failure (or degrade a pass), one strict model, read in file
order. The table pinmatrix ships is ``SIGNATURES_PATH``; ``smoke/classify`` matches logs against it."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, StrictBool, ValidationInfo, field_validator
from pydantic_core import ErrorDetails, PydanticCustomError

from pinmatrix.datamodel import Strict
from pinmatrix.errors import PinmatrixError
from pinmatrix.names import Name, OneLine, shown
from pinmatrix.project.document import load_document

SIGNATURES_PATH = Path(__file__).parent.parent / "data" / "signatures.toml"  # the table pinmatrix ships
_BAD_REGEX = "bad_regex"  # the error type of a pattern that is no regular expression


class SignatureError(PinmatrixError):
    """signatures.toml is malformed: one line that names the file, the row and the key."""


class Signature(Strict):
    """One ``[[signature]]`` row: a regular expression searched in a smoke's log, and the class it names."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    failure_class: Name = Field(alias="class")
    case: StrictBool = False  # true: the pattern is case-sensitive (read before ``pattern``, which it compiles)
    pattern: re.Pattern[str]
    status: Literal["degraded"] | None = None  # "degraded": a smoke that passed is degraded when this matches
    metric: Name | None = None  # a metric that takes the pattern's first group as an integer
    source: OneLine = ""

    @field_validator("pattern", mode="before")
    @classmethod
    def _compile(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, str):
            return value  # a compiled pattern (built in memory), or a wrong type the field's own check names
        try:
            return re.compile(value, 0 if info.data.get("case") else re.IGNORECASE)
        except re.error as err:
            raise PydanticCustomError(_BAD_REGEX, "{error} in pattern {pattern}",
                                      {"error": str(err), "pattern": shown(value)}) from None


class SignatureTable(Strict):
    """signatures.toml: its ``[[signature]]`` rows, in file order (none: no log is classified by its text)."""

    signature: list[Signature] = Field(default_factory=list)


def load_signatures(path: Path = SIGNATURES_PATH) -> tuple[Signature, ...]:
    """The signature table of ``path``; SignatureError, one line naming the file, line, row and key, if malformed."""
    return tuple(load_document(path, SignatureTable, what="a signature table", error=SignatureError,
                               key=_signature_key).signature)


def _signature_key(err: ErrorDetails) -> str:
    """``signature #2: 'pattern'``; a bad regex names its row only (its words quote the pattern)."""
    loc = tuple(err["loc"])
    if len(loc) >= 2 and isinstance(loc[1], int):
        where, keys = [f"signature #{loc[1] + 1}"], loc[2:]
    else:
        where, keys = [str(p) for p in loc[:1]], loc[1:]
    if keys and err["type"] != _BAD_REGEX:
        where.append(repr(".".join(str(k) for k in keys)))
    return ": ".join(where)


@lru_cache(maxsize=1)
def default_signatures() -> tuple[Signature, ...]:
    return load_signatures()
