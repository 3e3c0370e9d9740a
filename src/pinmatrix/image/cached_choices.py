"""A lock's wheel choices as a build cache document: which of each lock line's hashes is the wheel for the cell's
target (its file name, URL, sha256 and size), so a fresh machine with a warm build cache asks the index nothing.

The document is one signed entry per (lock lines, Python, platform, indexes, CHOICES_FORMAT): one request for the
whole lock. It is signed with the project's key like a layer entry (image/build_cache.py), and each choice is still
checked against what the machine knows before it is used: the sha256 one of the lock line's own hashes, the file
name a wheel of that name and version with a tag the target supports, the URL http(s). A document that fails any
check is not used (one line in the build log) and the index is asked, as without a cache."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from pydantic import ValidationError

from pinmatrix.datamodel import Strict
from pinmatrix.hashing import sha256_bytes
from pinmatrix.index.wheel_index import Target, WheelFile
from pinmatrix.project.lockfile import LockEntry

CHOICES_FORMAT = 1
MAX_LINES = 10_000


class ChosenWheel(Strict):
    name: str
    version: str
    filename: str
    url: str
    sha256: str
    size: int | None = None


class ChoicesDocument(Strict):
    format: int
    choices: dict[str, ChosenWheel]


def choices_key(entries: Sequence[LockEntry], target: Target, index_urls: Sequence[str]) -> str:
    """The document's key: every lock line's text (its hashes among it), the target and the indexes asked."""
    parts = ["wheel-choices", CHOICES_FORMAT, sorted(e.text for e in entries), target.python, target.platform,
             list(index_urls)]
    return sha256_bytes(json.dumps(parts, separators=(",", ":")).encode())


def to_document(wheels: Mapping[str, WheelFile]) -> dict[str, Any]:
    return {"format": CHOICES_FORMAT, "choices": {name: asdict(w) for name, w in sorted(wheels.items())}}


def from_document(doc: Mapping[str, Any], entries: Sequence[LockEntry], target: Target) -> dict[str, WheelFile]:
    """Each lock line's wheel as ``doc`` says, every one checked; ValueError naming the first that is not one."""
    try:
        parsed = ChoicesDocument.model_validate(doc)
    except ValidationError as err:
        raise ValueError(f"not a wheel choices document: {err.errors()[0]['msg']}") from None
    if parsed.format != CHOICES_FORMAT or len(parsed.choices) > MAX_LINES:
        raise ValueError(f"format {parsed.format}, {len(parsed.choices)} choice(s)")
    tags = set(target.tags())
    out: dict[str, WheelFile] = {}
    for entry in entries:
        chosen = parsed.choices.get(entry.name)
        if chosen is None:
            raise ValueError(f"{entry.name}: no choice")
        out[entry.name] = _checked(entry, chosen, tags)
    return out


def _checked(entry: LockEntry, chosen: ChosenWheel, tags: set[Any]) -> WheelFile:
    if f"sha256:{chosen.sha256}" not in entry.hashes:
        raise ValueError(f"{entry.name}: sha256 {chosen.sha256[:12]} is none of the lock line's hashes")
    if "/" in chosen.filename or chosen.filename.startswith(".") or not chosen.filename.isascii():
        raise ValueError(f"{entry.name}: {chosen.filename[:80]!r} is not a wheel file name")
    try:
        name, version, _, file_tags = parse_wheel_filename(chosen.filename)
    except InvalidWheelFilename:
        raise ValueError(f"{entry.name}: {chosen.filename[:80]!r} is not a wheel file name") from None
    if canonicalize_name(name) != entry.name or chosen.name != entry.name or chosen.version != entry.version or \
            (str(version) != entry.version and version.public != entry.version):
        raise ValueError(f"{entry.name}: {chosen.filename[:80]!r} is not {entry.name} {entry.version}")
    if not file_tags & tags:
        raise ValueError(f"{entry.name}: {chosen.filename[:80]!r} has no tag for {entry.name}'s target")
    if not chosen.url.startswith(("https://", "http://")):
        raise ValueError(f"{entry.name}: its URL is not http(s)")
    return WheelFile(name=chosen.name, version=chosen.version, filename=chosen.filename, url=chosen.url,
                     sha256=chosen.sha256, size=chosen.size)
