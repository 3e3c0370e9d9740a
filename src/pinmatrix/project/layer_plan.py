"""images/layers.toml: the image layers a Containerfile build installs a cell's lock into, in plan order, and the
distributions each one roots; one strict model. ``image/containerfile/layerplan`` assigns a lock's entries to them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from pydantic import field_validator, model_validator
from pydantic_core import ErrorDetails

from pinmatrix.datamodel import Strict
from pinmatrix.errors import PinmatrixError
from pinmatrix.names import check_package_name, shown
from pinmatrix.project.document import load_document

_LAYER_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


class LayerPlanError(PinmatrixError):
    """images/layers.toml or a lock file cannot be turned into layers."""


class LayerSpec(Strict):
    """One ``[[layer]]`` table: the layer's name and the distributions it roots."""

    name: str
    roots: tuple[str, ...]  # canonical names; ("*",) = everything not claimed before

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _LAYER_NAME.fullmatch(value):
            raise ValueError(f"{shown(value)} must be a lowercase name (a-z, 0-9 and '-', not starting with '-')")
        return value

    @field_validator("roots", mode="before")
    @classmethod
    def _a_list(cls, value: Any) -> Any:
        if not isinstance(value, (list, tuple)) or not value:
            raise ValueError('must be a non-empty list of distribution names, or ["*"]')
        return value

    @field_validator("roots")
    @classmethod
    def _canonical(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple("*" if r == "*" else canonicalize_name(check_package_name(r)) for r in value)


class LayerPlanDoc(Strict):
    """images/layers.toml: the ``[[layer]]`` tables in plan order, names unique, one catch-all (``["*"]``)."""

    layer: list[LayerSpec]

    @field_validator("layer")
    @classmethod
    def _some(cls, value: list[LayerSpec]) -> list[LayerSpec]:
        if not value:
            raise ValueError("needs at least one [[layer]] table")
        return value

    @model_validator(mode="after")
    def _whole(self) -> LayerPlanDoc:
        first: dict[str, int] = {}
        for i, spec in enumerate(self.layer):
            if spec.name in first:
                raise ValueError(f"layer[{i}].name: {spec.name!r} is already the name of layer[{first[spec.name]}]")
            first[spec.name] = i
        if not any("*" in spec.roots for spec in self.layer):
            raise ValueError('one layer must have roots = ["*"] to take what no other layer claims')
        return self


def load_layer_specs(path: Path) -> list[LayerSpec]:
    """The layer plan of ``path``; LayerPlanError, one line naming the file, line and key, if malformed."""
    return load_document(path, LayerPlanDoc, what="a layer plan", error=LayerPlanError,
                         key=_layer_key).layer


def _layer_key(err: ErrorDetails) -> str:
    """``layer[4].roots[0]``: indices in brackets; a problem of the whole plan names no key."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".")
