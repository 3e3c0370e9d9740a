"""The runnable check's verdict on one set of layers, kept in the build cache as a signed document: a fresh machine
assembling the same layers (by digest) for the same architecture and environment takes the verdict (and its notes
on optional files) instead of walking the image's tree again.

The key holds every input of the verdict: the layers' digests in order, the architecture, the environment the
check resolves paths with, ``VERDICT_FORMAT`` and the checker itself (the bytes of loadcheck.py, elf.py,
runnable_rules.py and the shipped data/runnable.toml), so a changed checker or rule checks again. Only a passing
verdict is stored (a failing image has no manifest to share); it is signed like a layer entry."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from pinmatrix.datamodel import Strict
from pinmatrix.hashing import sha256_bytes
from pinmatrix.image.assembly import elf, loadcheck
from pinmatrix.project import runnable_rules

VERDICT_FORMAT = 1


class Verdict(Strict):
    format: int
    notes: tuple[str, ...] = Field(max_length=10_000)  # the optional files' lines, as the check said them


@cache
def checker_identity() -> str:
    """sha256 over the checker's code and its shipped rules."""
    parts = [Path(m.__file__ or "").read_bytes() for m in (loadcheck, elf, runnable_rules)]
    parts.append(resources.files("pinmatrix").joinpath(f"data/{runnable_rules.RULES_FILE}").read_bytes())
    return sha256_bytes(b"\0".join(sha256_bytes(p).encode() for p in parts))


def verdict_key(digests: Sequence[str], arch: str, env: Mapping[str, str]) -> str:
    parts = ["runnable", VERDICT_FORMAT, list(digests), arch, sorted(env.items()), checker_identity()]
    return sha256_bytes(json.dumps(parts, separators=(",", ":")).encode())


def to_document(notes: Sequence[str]) -> dict[str, Any]:
    return {"format": VERDICT_FORMAT, "notes": list(notes)}


def from_document(doc: Mapping[str, Any]) -> tuple[str, ...]:
    """The passing verdict's notes; ValueError when ``doc`` is not a verdict of this format."""
    try:
        verdict = Verdict.model_validate(doc)
    except ValidationError as err:
        raise ValueError(f"not a runnable verdict: {err.errors()[0]['msg']}") from None
    if verdict.format != VERDICT_FORMAT or any(len(n) > 2000 for n in verdict.notes):
        raise ValueError(f"not a runnable verdict of format {VERDICT_FORMAT}")
    return verdict.notes
