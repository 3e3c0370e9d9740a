"""known-good.toml: the promotion record. One ``[[promoted]]`` table per promotion, oldest first, each checked
against one model when read (``pull``, ``promote``, the embedded registry), appended by ``promote``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import tomlkit
from pydantic import Field, ValidationError

from pinmatrix.atomic import atomic_write_text
from pinmatrix.datamodel import Strict, friendly_message, key_path
from pinmatrix.errors import PinmatrixError

REQUIRED_KEYS = ("stack", "cell_id", "digest", "reference", "promoted_at")
DIGEST = r"^sha256:[0-9a-f]{64}$"


class KnownGoodEvidence(Strict):
    """One smoke result the promotion rested on."""

    smoke: str
    gpu: str | None = None
    host_id: str | None = None
    host: str | None = None
    status: str | None = None
    run_id: str | None = None
    finished_at: str | None = None
    image_digest: str | None = Field(default=None, pattern=DIGEST)


class KnownGoodEntry(Strict):
    """One ``[[promoted]]`` table, as ``release.promote.execute`` writes it."""

    stack: str
    cell_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # a 12-hex id from promote; no path
    digest: str = Field(pattern=DIGEST)
    reference: str
    promoted_at: str
    cell_name: str | None = None
    tag: str | None = None
    source: str | None = None
    attestation: str | None = None
    sbom: str | None = None
    signed_by: str | None = None
    gpu_required: bool = True
    min_driver: str | None = None
    compute_capability: str | None = None
    arch_flags: list[str] = []
    pins: dict[str, str] = {}
    policy: dict[str, Any] = {}
    evidence: list[KnownGoodEvidence] = []


HEADER = (
    "Written by `pinmatrix promote`: one [[promoted]] entry per promotion, oldest first.\n"
    "`pinmatrix pull` picks the newest entry whose requirements the host meets and pulls it by digest."
)


def _clean(value: Any) -> Any:
    """TOML has no null: drop None values (recursively)."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_clean(v) for v in value if v is not None]
    return value


def read_known_good(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    try:
        doc = tomlkit.parse(path.read_text())
    except Exception as err:  # tomlkit raises several parse error types
        raise PinmatrixError(f"{path}: not valid TOML: {err}") from None
    entries = doc.get("promoted", [])
    if not isinstance(entries, list):
        raise PinmatrixError(f"{path}: promoted: expected an array of tables")
    out = []
    for i, entry in enumerate(entries):
        data = json.loads(json.dumps(entry))  # tomlkit items -> plain values
        if not isinstance(data, dict):
            raise PinmatrixError(f"{path}: promoted[{i}]: expected a table")
        for key in REQUIRED_KEYS:
            if key not in data:
                raise PinmatrixError(f"{path}: promoted[{i}] lacks {key!r}")
        try:
            KnownGoodEntry.model_validate(data)
        except ValidationError as err:
            first = err.errors()[0]
            where = key_path(("promoted", i, *first["loc"]))
            raise PinmatrixError(f"{path}: {where}: {friendly_message(first, KnownGoodEntry)}") from None
        out.append(data)
    return out


def record_promotion(path: Path, entry: dict[str, Any]) -> None:
    if path.exists():
        doc = tomlkit.parse(path.read_text())
    else:
        doc = tomlkit.document()
        for line in HEADER.splitlines():
            doc.add(tomlkit.comment(line))
    if "promoted" not in doc:
        doc.add("promoted", tomlkit.aot())
    table = tomlkit.table()
    for key, value in _clean(entry).items():
        if key == "evidence":
            continue
        table.add(key, value)
    evidence = tomlkit.aot()
    for ev in _clean(entry.get("evidence", [])):
        t = tomlkit.table()
        for k, v in ev.items():
            t.add(k, v)
        evidence.append(t)
    table.add("evidence", evidence)
    doc["promoted"].append(table)
    atomic_write_text(path, tomlkit.dumps(doc))
