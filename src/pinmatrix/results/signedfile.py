"""Host-signed results as files: the file ``results --export-signed`` writes (a JSON array of DSSE envelopes,
or one envelope per line) read back bounded, and the folder beside a results store where ``results
--import-signed`` keeps the envelopes it verified, so that ``promote`` can check them again against the
policy's ``trusted_hosts``. The bytes only: what an envelope says and who signed it is
``pinmatrix.release.hostsign``'s business."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

from pinmatrix.atomic import atomic_write_bytes
from pinmatrix.hashing import sha256_bytes
from pinmatrix.results.storefile import ResultsError

MAX_SIGNED_FILE = 64 << 20  # a file of signed results: thousands of envelopes of a few KiB each
MAX_ENVELOPE = 4 << 20  # one envelope: a cell's records on one host and image
MAX_ENVELOPES = 4096  # envelopes in one file, or kept beside one store


def read_signed_file(path: Path, limit: int = MAX_SIGNED_FILE) -> bytes:
    """The bytes of ``path``, opened without following a link and without blocking: a regular file of at
    most ``limit`` bytes, else ResultsError naming the file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        why = "a symbolic link" if err.errno == errno.ELOOP else err.strerror
        raise ResultsError(f"{path}: cannot read the signed results: {why}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # before fdopen: it refuses a folder with a traceback's error
            raise ResultsError(f"{path}: not a regular file (a FIFO, device or folder is not read)")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ResultsError(f"{path}: more than the {limit} bytes a signed results file may have")
    return data


def split_envelopes(data: bytes, source: str) -> list[bytes]:
    """The envelopes of a signed results file: a JSON array of envelopes, or one envelope per line. Each comes
    back as its own canonical JSON bytes; the file's form is checked, the envelopes are not."""
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        raise ResultsError(f"{source}: no signed results in it")
    try:
        items = json.loads(text) if text.startswith("[") else [json.loads(line) for line in text.splitlines()
                                                               if line.strip()]
    except ValueError as err:
        raise ResultsError(f"{source}: neither a JSON array of envelopes nor one envelope per line: {err}") from None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ResultsError(f"{source}: every entry must be a DSSE envelope (a JSON object)")
    if len(items) > MAX_ENVELOPES:
        raise ResultsError(f"{source}: {len(items)} envelopes, more than the {MAX_ENVELOPES} one file may hold")
    out = [json.dumps(i, sort_keys=True, separators=(",", ":")).encode() for i in items]
    for number, envelope in enumerate(out, 1):
        if len(envelope) > MAX_ENVELOPE:
            raise ResultsError(f"{source}: envelope {number} is {len(envelope)} bytes, more than {MAX_ENVELOPE}")
    return out


def signed_dir(store: Path) -> Path:
    """Where the envelopes imported into ``store`` are kept: ``results-signed/`` beside ``results.sqlite``."""
    return store.parent / f"{store.stem}-signed"


def keep_envelope(store: Path, envelope: bytes) -> Path:
    """Keep ``envelope`` beside ``store``, named by its sha256 (the same envelope imported twice is one file)."""
    folder = signed_dir(store)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{sha256_bytes(envelope)}.json"
    if not path.exists():
        atomic_write_bytes(path, envelope, perms=0o644)
    return path


def kept_envelopes(store: Path) -> list[bytes]:
    """The envelopes kept beside ``store`` (none when nothing was imported), in name order, each bounded."""
    folder = signed_dir(store)
    if not folder.is_dir():
        return []
    names = sorted(p for p in folder.iterdir() if p.suffix == ".json")
    if len(names) > MAX_ENVELOPES:
        raise ResultsError(f"{folder}: {len(names)} envelopes, more than the {MAX_ENVELOPES} read for one store")
    return [read_signed_file(p, MAX_ENVELOPE) for p in names]
