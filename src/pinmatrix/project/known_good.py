"""known-good.toml: the promotion record. One ``[[promoted]]`` table per promotion, oldest first, each checked
against one model when read (``pull``, ``promote``, the embedded registry), appended by ``promote``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomlkit
from pydantic import Field

from pinmatrix.atomic import atomic_write_text
from pinmatrix.datamodel import Strict
from pinmatrix.project.document import load_document

MAX_KNOWN_GOOD_BYTES = 64 << 20  # a promotion with its evidence is about a kilobyte
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
    provenance: str | None = None  # the SLSA provenance artifact, name@digest
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


class KnownGoodDoc(Strict):
    """known-good.toml: its ``[[promoted]]`` tables, oldest first (none: nothing is promoted yet)."""

    promoted: list[KnownGoodEntry] = []


def read_known_good(path: Path) -> list[dict[str, Any]]:
    """The promotions recorded in ``path``, oldest first, each as the keys its table gives; none when there is no
    file. A malformed one is one located line (``FILE:LINE: promoted.0.digest: message``)."""
    if not path.exists():
        return []
    doc = load_document(path, KnownGoodDoc, what="a promotion record", max_bytes=MAX_KNOWN_GOOD_BYTES)
    return [entry.model_dump(exclude_unset=True) for entry in doc.promoted]


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
