"""The typed models at pinmatrix's file boundaries (matrix.toml, compat.toml, signatures.toml, layers.toml,
promotion policies): the strict base every model derives from, and how one validation error becomes the one
line a user reads (``key.path: message``)."""

from __future__ import annotations

import difflib
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from pinmatrix import names
from pinmatrix.names import shown


class Strict(BaseModel):
    """Unknown keys are errors; loaded documents are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def key_path(path: tuple[str | int, ...]) -> str:
    """``stacks.demo.packages.six``; a key holding an unsafe or non-ASCII character is shown escaped."""
    parts = []
    for p in path:
        text = str(p)
        parts.append(text if text.isascii() and names.text_problem(text) is None else shown(text))
    return ".".join(parts) or "(top)"


def _model_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The pydantic model whose fields are the keys valid at ``loc``."""
    current: Any = model
    for part in loc:
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                alias = {f.alias: f for f in current.model_fields.values() if f.alias}
                field = alias.get(str(part))
            if field is None:
                return None
            current = field.annotation
        else:
            current = _element_type(current)
            if current is None:
                return None
        current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, __import__("types").UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp  # a union of two types: no single model to walk into
            tp = args[0]  # Optional[X] is X
        else:
            return tp


def _element_type(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (list, tuple) and args:
        return _unwrap(args[0])
    if origin is dict and len(args) == 2:
        return _unwrap(args[1])
    return None


def friendly_message(err: Mapping[str, Any], model: type[BaseModel]) -> str:
    """One pydantic error as the line a user reads: an unknown key with the closest valid one (or the valid
    ones), a missing key, or the validator's own words."""
    loc = tuple(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = _model_at(model, loc[:-1])
        msg = "unknown key"
        if parent is not None:
            names = [f.alias or n for n, f in parent.model_fields.items()]
            close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
            if close:
                msg += f" (did you mean {close[0]!r}?)"
            else:
                msg += f" (expected one of: {', '.join(sorted(names))})"
        return msg
    if kind == "missing":
        return "required key is missing"
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    return msg
