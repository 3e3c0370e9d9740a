"""Unpack a pinmatrix bundle on a host that has nothing but Python >= 3.11 (run it as ``python3 -I unbundle.py``).

A bundle is a folder: ``manifest.json``, this script, the parts (``part-NNN-of-MMM.bin``) and, for wheels, the
cell's lock (``lock.txt``). The parts are the bundle's files concatenated in the manifest's order and cut at a
fixed size, so a big file may span parts.

    python3 -I unbundle.py BUNDLE_DIR --out DEST [--have LAYOUT] [--check] [--json]

Order of work, so that nothing reaches DEST unless all of it is right:
1. the manifest is read (bounded in size) and checked field by field (types, safe names, sizes, offsets);
2. every part's presence, size and sha256 is checked, and a file in BUNDLE_DIR that looks like a part but is not
   in the manifest is refused;
3. the files are reassembled into a staging folder next to DEST, each checked against its sha256 (a wheel against
   the lock's own hashes, read from the shipped ``lock.txt`` whose sha256 the manifest names; a blob against its
   digest); for an image, blobs the bundle leaves out must be in DEST or in ``--have`` and are checked too;
4. only then are the files renamed into DEST (wheels: a folder of wheels, as ``pinmatrix smoke --wheels`` takes it;
   image: an OCI layout whose ``index.json`` names the image).

Any refusal is one line on stderr naming the part, file or key, exit status 2, and DEST as it was. Progress goes
to stderr (not with --quiet): each part and file checked, and about once a second while the parts are hashed
(step 2) and the files reassembled (step 3), the bytes done of the whole, the rate and the time left.
Standard library only: this file is copied into every bundle and must run where pinmatrix is not installed.

What this script cannot do: check the bundle's signature (``manifest.dsse.json``, ed25519 in a DSSE envelope):
ed25519 is not in the standard library. Where pinmatrix is installed, ``pinmatrix unbundle BUNDLE --key PUB --out
DEST`` verifies it and then runs pinmatrix's own copy of this script, never the bundle's. Without pinmatrix, two
digests that ``pinmatrix bundle`` printed on the build machine are compared out of band: this script's own sha256
(``sha256sum unbundle.py``: a replaced unpacker differs) and the manifest's, given here as ``--manifest-sha256
HEX`` (the manifest names every part's, the lock's and every file's sha256, so a forged bundle that is
self-consistent still differs there).

Every file read here (the manifest, the lock, the parts, blobs already present, an index) is opened without
following a link and without blocking (a FIFO in its place is refused, not waited on), must be a regular file and
is bounded in size. A staging folder left by an unpack that was killed (its process is gone) is removed by the
next run.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

FORMAT = "pinmatrix-bundle"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SCRIPT = "unbundle.py"
LOCK = "lock.txt"
MAX_MANIFEST_BYTES = 4 << 20
MAX_LOCK_BYTES = 16 << 20
MAX_ITEMS = 20000
MAX_PARTS = 20000
MAX_SIZE = 1 << 42  # 4 TiB: any one file, part or the whole stream
MAX_TEXT = 4096
CHUNK = 1 << 20
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,254}$")
PART_NAME = re.compile(r"^part-[0-9]{3,6}-of-[0-9]{3,6}\.bin$")
LOOKS_LIKE_PART = re.compile(r"^part-.*")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
CELL_ID = re.compile(r"^[0-9a-f]{12}$")
VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+!_-]{0,127}$")
PYTHON = re.compile(r"^3\.[0-9]{1,3}$")
MEDIA_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+/_-]{0,254}$")
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json")
INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
REF_NAME = "org.opencontainers.image.ref.name"


class Refused(Exception):
    """One line naming what is wrong; the bundle is not unpacked."""


def refuse(message: str) -> NoReturn:
    raise Refused(message)


def open_regular(path: Path, limit: int, what: str) -> Any:
    """``path`` opened for reading: no link followed, never blocking (a FIFO is refused, not waited on), a regular
    file of at most ``limit`` bytes; else refused in one line."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as err:
        if err.errno == errno.ELOOP:
            refuse(f"{path}: a symbolic link: refused as {what}")
        refuse(f"{path}: cannot read {what}: {err.strerror}")
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        refuse(f"{path}: not a regular file (a FIFO, device or folder): refused as {what}")
    if info.st_size > limit:
        os.close(fd)
        refuse(f"{path}: {info.st_size} bytes, larger than {limit} bytes: more than {what} may have")
    return os.fdopen(fd, "rb")


# -- the manifest, checked by hand (no third-party validator on the host) ------------------------------------------

def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            refuse(f"{MANIFEST}: key {key!r} appears twice")
        out[key] = value
    return out


def _no_constant(name: str) -> NoReturn:
    refuse(f"{MANIFEST}: {name} is not a JSON number pinmatrix writes")


def _int(value: Any, where: str, high: int = MAX_SIZE) -> int:
    if type(value) is not int or not 0 <= value <= high:
        refuse(f"{MANIFEST}: {where}: expected an integer from 0 to {high}, got {_shown(value)}")
    return value


def _text(value: Any, where: str, pattern: re.Pattern[str] | None = None) -> str:
    if type(value) is not str or len(value) > MAX_TEXT:
        refuse(f"{MANIFEST}: {where}: expected a string, got {_shown(value)}")
    if pattern is not None and not pattern.match(value):
        refuse(f"{MANIFEST}: {where}: {_shown(value)} is not allowed here (expected {pattern.pattern})")
    return value


def _name(value: Any, where: str, pattern: re.Pattern[str] = SAFE_NAME) -> str:
    """A file name that stays inside its folder: a safe pattern, no separator, no '..'."""
    text = _text(value, where)
    if "/" in text or "\\" in text or "\0" in text or ".." in text or not pattern.match(text):
        refuse(f"{MANIFEST}: {where}: {_shown(text)} is not a safe file name")
    return text


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _object(value: Any, where: str, required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    """``value`` is an object with exactly the ``required`` keys and some of ``optional``; each checked by its
    function (value, where) -> checked value."""
    optional = optional or {}
    if type(value) is not dict:
        refuse(f"{MANIFEST}: {where}: expected an object, got {_shown(value)}")
    unknown = sorted(set(value) - set(required) - set(optional))
    if unknown:
        refuse(f"{MANIFEST}: {where}.{unknown[0]}: unknown key")
    out: dict[str, Any] = {}
    for key, check in required.items():
        if key not in value:
            refuse(f"{MANIFEST}: {where}.{key}: required key is missing")
        out[key] = check(value[key], f"{where}.{key}")
    for key, check in optional.items():
        out[key] = check(value[key], f"{where}.{key}") if key in value and value[key] is not None else None
    return out


def _list(value: Any, where: str, item: Any, high: int) -> list[Any]:
    if type(value) is not list or len(value) > high:
        refuse(f"{MANIFEST}: {where}: expected a list of at most {high} entries")
    return [item(v, f"{where}[{i}]") for i, v in enumerate(value)]


def _of(pattern: re.Pattern[str]) -> Any:
    return lambda v, w: _text(v, w, pattern)


def _one_of(*choices: str) -> Any:
    def check(value: Any, where: str) -> str:
        if value not in choices:
            refuse(f"{MANIFEST}: {where}: expected one of {', '.join(choices)}, got {_shown(value)}")
        return str(value)
    return check


def _part(value: Any, where: str) -> dict[str, Any]:
    return _object(value, where, {"name": lambda v, w: _name(v, w, PART_NAME), "size": _int, "sha256": _of(HEX64)})


def _wheel(value: Any, where: str) -> dict[str, Any]:
    item = _object(value, where, {"name": _of(SAFE_NAME), "version": _of(VERSION), "filename": _name,
                                  "size": _int, "sha256": _of(HEX64), "offset": _int})
    if not item["filename"].endswith(".whl"):
        refuse(f"{MANIFEST}: {where}.filename: {_shown(item['filename'])} is not a wheel file name")
    parts = item["filename"][:-4].split("-")
    if len(parts) not in (5, 6) or _canonical(parts[0]) != _canonical(item["name"]) or parts[1] != item["version"]:
        refuse(f"{MANIFEST}: {where}.filename: {_shown(item['filename'])} is not a wheel of "
               f"{item['name']} {item['version']}")
    return item


def _blob(value: Any, where: str) -> dict[str, Any]:
    return _object(value, where, {"digest": _of(DIGEST), "media_type": _of(MEDIA_TYPE), "size": _int},
                   {"offset": _int})


def _image(value: Any, where: str) -> dict[str, Any]:
    return _object(value, where, {"digest": _of(DIGEST), "media_type": _of(MEDIA_TYPE), "size": _int},
                   {"ref": lambda v, w: _text(v, w, re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,254}$"))})


def _left_out(value: Any, where: str) -> dict[str, Any]:
    return _object(value, where, {"name": _of(SAFE_NAME), "version": _of(VERSION), "why": _text})


def check_manifest(data: Any) -> dict[str, Any]:
    """The manifest as checked data; the first problem refuses it. The same fields as pinmatrix.bundle.model."""
    common = {"format": _one_of(FORMAT), "format_version": lambda v, w: _int(v, w, 1000),
              "kind": _one_of("wheels", "image"), "pinmatrix_version": _of(VERSION),
              "parts": lambda v, w: _list(v, w, _part, MAX_PARTS), "part_size": _int, "total_size": _int}
    optional = {"cell_id": _of(CELL_ID), "lock_sha256": _of(HEX64), "python": _of(PYTHON),
                "cell_python": _of(PYTHON), "platform": _of(re.compile(r"^(x86_64|aarch64)-manylinux_2_[0-9]{1,3}$")),
                "note": _text, "wheels": lambda v, w: _list(v, w, _wheel, MAX_ITEMS),
                "left_out": lambda v, w: _list(v, w, _left_out, MAX_ITEMS),
                "image": _image, "blobs": lambda v, w: _list(v, w, _blob, MAX_ITEMS)}
    m = _object(data, "(top)", common, optional)
    if m["format_version"] != FORMAT_VERSION:
        refuse(f"{MANIFEST}: format_version {m['format_version']} is not {FORMAT_VERSION} (use the unbundle.py that "
               "came with the bundle)")
    if m["kind"] == "wheels":
        if m["wheels"] is None or m["lock_sha256"] is None or m["image"] is not None or m["blobs"] is not None:
            refuse(f"{MANIFEST}: a wheels bundle has wheels and lock_sha256, and no image or blobs")
        items = m["wheels"]
        keys = [w["filename"] for w in items]
    else:
        if m["image"] is None or m["blobs"] is None or m["wheels"] is not None:
            refuse(f"{MANIFEST}: an image bundle has image and blobs, and no wheels")
        items = [b for b in m["blobs"] if b["offset"] is not None]
        keys = [b["digest"] for b in m["blobs"]]
    duplicate = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
    if duplicate is not None:
        refuse(f"{MANIFEST}: {duplicate} is listed twice")
    offset = 0
    for item in items:  # the stream: the shipped files back to back, in the manifest's order
        if item["offset"] != offset:
            refuse(f"{MANIFEST}: {item.get('filename') or item['digest']}: offset {item['offset']}, expected {offset}")
        offset += item["size"]
    if offset != m["total_size"] or sum(p["size"] for p in m["parts"]) != offset:
        refuse(f"{MANIFEST}: total_size {m['total_size']}, the files add up to {offset} and the parts to "
               f"{sum(p['size'] for p in m['parts'])}")
    names = [p["name"] for p in m["parts"]]
    count = len(names)
    for i, (part, name) in enumerate(zip(m["parts"], names)):
        expected = f"part-{i + 1:03d}-of-{count:03d}.bin"
        if name != expected:
            refuse(f"{MANIFEST}: parts[{i}].name: {_shown(name)}, expected {expected}")
        if part["size"] > m["part_size"] or (i < count - 1 and part["size"] != m["part_size"]) or part["size"] == 0:
            refuse(f"{MANIFEST}: parts[{i}] ({name}): size {part['size']} does not fit part_size {m['part_size']}")
    return m


def read_manifest(bundle: Path, expected_sha256: str | None = None) -> dict[str, Any]:
    """The checked manifest; with ``expected_sha256`` (what ``pinmatrix bundle`` printed) its bytes must hash to it."""
    path = bundle / MANIFEST
    try:
        with open_regular(path, MAX_MANIFEST_BYTES, "a manifest") as handle:
            raw = handle.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        refuse(f"{path}: missing (is {bundle} a pinmatrix bundle?)")
    if len(raw) > MAX_MANIFEST_BYTES:
        refuse(f"{path}: larger than {MAX_MANIFEST_BYTES} bytes: not a manifest pinmatrix writes")
    found = hashlib.sha256(raw).hexdigest()
    if expected_sha256 is not None and found != expected_sha256:
        refuse(f"{path}: sha256 {found} is not the {expected_sha256} the bundle was made with: another manifest")
    try:
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as err:
        refuse(f"{path}: not JSON: {err}")
    return {**check_manifest(data), "sha256": found}


# -- parts ---------------------------------------------------------------------------------------------------------

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def _bytes(count: float) -> str:
    value, unit = float(count), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{int(value)} B" if unit == 0 else f"{value:.1f} {_UNITS[unit]}"


def _seconds(seconds: float) -> str:
    hours, rest = divmod(int(round(seconds)), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Bytes done of ``total``, said as ``WHAT: 12.0 MiB of 48.0 MiB (25%), 4.0 MiB/s, 0:09 left`` at most once a
    second: the lines pinmatrix's own TransferMeter writes (pinmatrix.transfer; this file cannot import it, and a
    test holds the two to the same text). ``clock`` is time.monotonic, or a test's."""

    def __init__(self, what: str, total: int, say: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self.what, self.total, self.say, self.clock, self.done = what, total, say, clock, 0
        self.started = self.last = clock()

    def advance(self, count: int) -> None:
        self.done += count
        now = self.clock()
        if now - self.last >= 1.0:
            self.last = now
            self.say(f"{self.what}: {self.line()}")

    def line(self) -> str:
        words = _bytes(self.done)
        if self.total:
            words += f" of {_bytes(self.total)} ({min(100, self.done * 100 // self.total)}%)"
        elapsed = self.clock() - self.started
        if elapsed > 0 and self.done > 0:
            rate = self.done / elapsed
            words += f", {_bytes(rate)}/s"
            if self.total is not None:
                words += f", {_seconds(max(0, self.total - self.done) / rate)} left"
        return words


def _sha256_file(path: Path, what: str = "a part", progress: Progress | None = None) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with open_regular(path, MAX_SIZE, what) as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
            size += len(chunk)
            if progress is not None:
                progress.advance(len(chunk))
    return digest.hexdigest(), size


def check_parts(bundle: Path, manifest: dict[str, Any], say: Any, clock: Callable[[], float] = time.monotonic) -> None:
    """Every part there, of its size and sha256; no part the manifest does not name."""
    listed = {p["name"] for p in manifest["parts"]}
    progress = Progress("checking the parts", sum(p["size"] for p in manifest["parts"]), say, clock)
    for entry in sorted(os.listdir(bundle)):
        if LOOKS_LIKE_PART.match(entry) and entry not in listed:
            refuse(f"{bundle / entry}: extra part: the manifest does not list it")
    for i, part in enumerate(manifest["parts"]):
        path = bundle / part["name"]
        if path.is_symlink() or (path.exists() and not path.is_file()):
            refuse(f"{path}: not a regular file: refused as a part")
        if not path.is_file():
            refuse(f"{path}: missing part ({i + 1} of {len(listed)}, {part['size']} bytes)")
        size = path.stat().st_size
        if size != part["size"]:
            refuse(f"{path}: tampered or truncated part: {size} bytes, the manifest says {part['size']}")
        sha, _ = _sha256_file(path, progress=progress)
        if sha != part["sha256"]:
            refuse(f"{path}: tampered part: sha256 {sha}, the manifest says {part['sha256']}")
        say(f"part {i + 1}/{len(listed)} {part['name']}: {size} bytes, sha256 ok")


class Stream:
    """The parts read as one byte stream, in order."""

    def __init__(self, bundle: Path, parts: list[dict[str, Any]]) -> None:
        self.paths = [bundle / p["name"] for p in parts]
        self.handle: Any = None

    def read(self, n: int) -> bytes:
        while True:
            if self.handle is None:
                if not self.paths:
                    return b""
                self.handle = open_regular(self.paths.pop(0), MAX_SIZE, "a part")
            data = self.handle.read(n)
            if data:
                return bytes(data)
            self.handle.close()
            self.handle = None

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def _copy_checked(stream: Stream, size: int, sha256: str, target: Path | None, what: str,
                  progress: Progress | None = None) -> None:
    """``size`` bytes of the stream into ``target`` (or nowhere, when only checking), refused unless they hash to
    ``sha256``."""
    digest, left = hashlib.sha256(), size
    out = open(target, "xb") if target is not None else None
    try:
        while left:
            chunk = stream.read(min(CHUNK, left))
            if not chunk:
                refuse(f"{what}: the parts end {left} bytes early")
            digest.update(chunk)
            if out is not None:
                out.write(chunk)
            left -= len(chunk)
            if progress is not None:
                progress.advance(len(chunk))
        if out is not None:
            out.flush()
            os.fsync(out.fileno())
    finally:
        if out is not None:
            out.close()
    if digest.hexdigest() != sha256:
        refuse(f"{what}: sha256 {digest.hexdigest()} is not {sha256}: refused, nothing installed")


# -- the lock, for wheels ------------------------------------------------------------------------------------------

def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_hashes(text: str) -> dict[str, tuple[str, set[str]]]:
    """canonical name -> (version, sha256 hashes) of a ``uv pip compile --generate-hashes`` lock."""
    out: dict[str, tuple[str, set[str]]] = {}
    joined = re.sub(r"\\\r?\n", " ", text)
    for line in joined.splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*===?\s*([^\s;\\]+)", line)
        if m:
            out[_canonical(m.group(1))] = (m.group(2), set(re.findall(r"--hash=sha256:([0-9a-f]{64})", line)))
    return out


def check_lock(bundle: Path, manifest: dict[str, Any]) -> None:
    """The shipped lock is the one the manifest names, and every wheel is one of its hashes at its version."""
    path = bundle / LOCK
    try:
        with open_regular(path, MAX_LOCK_BYTES, "the lock") as handle:
            raw = handle.read(MAX_LOCK_BYTES + 1)
    except FileNotFoundError:
        refuse(f"{path}: missing: the wheels cannot be checked against the cell's lock")
    if len(raw) > MAX_LOCK_BYTES or hashlib.sha256(raw).hexdigest() != manifest["lock_sha256"]:
        refuse(f"{path}: sha256 {hashlib.sha256(raw).hexdigest()} is not the manifest's lock_sha256 "
               f"{manifest['lock_sha256']}")
    locked = lock_hashes(raw.decode("utf-8", errors="replace"))
    for wheel in manifest["wheels"]:
        version, hashes = locked.get(_canonical(wheel["name"]), ("", set()))
        if version != wheel["version"] or wheel["sha256"] not in hashes:
            refuse(f"{MANIFEST}: {wheel['filename']}: not in {LOCK} at {wheel['version']} with sha256 "
                   f"{wheel['sha256']}")


# -- image layouts -------------------------------------------------------------------------------------------------

def _blob_path(layout: Path, digest: str) -> Path:
    return layout / "blobs" / "sha256" / digest.split(":", 1)[1]


def _find_present(digest: str, size: int, places: list[Path]) -> Path | None:
    """A blob of ``digest`` in one of ``places`` (OCI layouts), checked against its digest and size."""
    for layout in places:
        path = _blob_path(layout, digest)
        if path.is_file() and not path.is_symlink():
            sha, found = _sha256_file(path, "a blob")
            if found == size and f"sha256:{sha}" == digest:
                return path
            refuse(f"{path}: present but does not match {digest} ({found} bytes): refused")
    return None


def _descriptors(doc: Any, what: str) -> list[tuple[str, int]]:
    """(digest, size) of what an image manifest or index refers to."""
    if type(doc) is not dict:
        refuse(f"{what}: not a JSON object")
    found: list[Any] = []
    if isinstance(doc.get("config"), dict):
        found.append(doc["config"])
    for key in ("layers", "manifests"):
        if isinstance(doc.get(key), list):
            found.extend(doc[key])
    out = []
    for d in found:
        if type(d) is not dict or type(d.get("digest")) is not str or not DIGEST.match(d["digest"]) \
                or type(d.get("size")) is not int:
            refuse(f"{what}: a descriptor without a sha256 digest and size")
        out.append((d["digest"], d["size"]))
    return out


def check_image_closure(manifest: dict[str, Any], read_blob: Any) -> None:
    """Every blob the image's manifest (and index) refers to is one the bundle names, with the same size."""
    blobs = {b["digest"]: b for b in manifest["blobs"]}
    image = manifest["image"]
    if image["digest"] not in blobs or blobs[image["digest"]]["size"] != image["size"]:
        refuse(f"{MANIFEST}: image {image['digest']} is not among the blobs")
    todo, seen = [image["digest"]], set()
    while todo:
        digest = todo.pop()
        if digest in seen:
            continue
        seen.add(digest)
        if blobs[digest]["media_type"] not in MANIFEST_TYPES + INDEX_TYPES:
            continue
        try:
            doc = json.loads(read_blob(digest))
        except ValueError:
            refuse(f"blob {digest}: a {blobs[digest]['media_type']} that is not JSON")
        for child, size in _descriptors(doc, f"blob {digest}"):
            if child not in blobs or blobs[child]["size"] != size:
                refuse(f"blob {digest}: refers to {child} ({size} bytes), which the bundle does not list")
            todo.append(child)
    extra = sorted(set(blobs) - seen)
    if extra:
        refuse(f"{MANIFEST}: blob {extra[0]} is not part of image {image['digest']}")


def _read_index(layout: Path) -> dict[str, Any]:
    path = layout / "index.json"
    if not path.exists():
        return {"schemaVersion": 2, "mediaType": INDEX_TYPES[0], "manifests": []}
    try:
        with open_regular(path, MAX_MANIFEST_BYTES, "an OCI index") as handle:
            raw = handle.read(MAX_MANIFEST_BYTES + 1)
        data = json.loads(raw)
    except (OSError, ValueError) as err:
        refuse(f"{path}: not a readable OCI index: {err}")
    if len(raw) > MAX_MANIFEST_BYTES or type(data) is not dict or type(data.get("manifests")) is not list:
        refuse(f"{path}: not an OCI image index")
    return data


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "xb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _index_with(index: dict[str, Any], image: dict[str, Any]) -> dict[str, Any]:
    descriptor: dict[str, Any] = {"mediaType": image["media_type"], "digest": image["digest"], "size": image["size"]}
    if image["ref"]:
        descriptor["annotations"] = {REF_NAME: image["ref"]}
    kept = [m for m in index["manifests"] if not (type(m) is dict and (
        m.get("digest") == image["digest"]
        or (image["ref"] and type(m.get("annotations")) is dict and m["annotations"].get(REF_NAME) == image["ref"])))]
    return {**index, "manifests": [*kept, descriptor]}


# -- unpacking -----------------------------------------------------------------------------------------------------

def remove_stale_staging(dest: Path, say: Any) -> None:
    """Remove the staging folders of earlier unpacks into ``dest`` whose process is gone (killed with -9, say)."""
    pattern = re.compile(rf"^\.{re.escape(dest.name)}\.unbundle-([0-9]{{1,10}})$")
    try:
        entries = os.listdir(dest.parent)
    except OSError:
        return
    for entry in entries:
        m = pattern.match(entry)
        if not m or int(m.group(1)) == os.getpid() or _alive(int(m.group(1))):
            continue
        path = dest.parent / entry
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            say(f"removed {path}: the staging folder of an unpack whose process {m.group(1)} is gone")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OverflowError:
        return False
    return True


def unpack(bundle: Path, dest: Path | None, have: Path | None, say: Any,
           manifest_sha256: str | None = None, clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """Check the bundle and (with ``dest``) unpack it; returns a summary. Raises Refused."""
    manifest = read_manifest(bundle, manifest_sha256)
    if manifest["kind"] == "wheels" and have is not None:
        refuse("--have is for image bundles: a wheels bundle ships every wheel it lists")
    check_parts(bundle, manifest, say, clock)
    if manifest["kind"] == "wheels":
        check_lock(bundle, manifest)
        shipped = [(w["filename"], w["size"], w["sha256"]) for w in manifest["wheels"]]
    else:
        shipped = [(b["digest"].split(":", 1)[1], b["size"], b["digest"].split(":", 1)[1])
                   for b in manifest["blobs"] if b["offset"] is not None]
    present: dict[str, Path] = {}
    if manifest["kind"] == "image":
        places = [p for p in (dest, have) if p is not None]
        for blob in manifest["blobs"]:
            if blob["offset"] is None:
                found = _find_present(blob["digest"], blob["size"], places)
                if found is None:
                    hint = "" if have is not None else " (pass --have LAYOUT: a layout that holds it)"
                    refuse(f"blob {blob['digest']} ({blob['size']} bytes): not in the bundle and not in "
                           f"{' or '.join(map(str, places)) or 'DEST'}{hint}")
                present[blob["digest"]] = found
    if manifest["kind"] == "wheels" and dest is not None and dest.is_dir():
        ours = {w["filename"] for w in manifest["wheels"]}
        foreign = sorted(p.name for p in dest.iterdir() if p.name.endswith(".whl") and p.name not in ours)
        if foreign:
            refuse(f"{dest}: holds {len(foreign)} wheel(s) this bundle does not ({foreign[0]}): `smoke --wheels` "
                   "would install those too; unpack into an empty folder")
    index: dict[str, Any] | None = None
    if manifest["kind"] == "image" and dest is not None:
        index = _read_index(dest)  # a DEST whose index cannot be updated is refused before anything moves
    staging: Path | None = None
    if dest is not None:
        dest = dest.absolute()
        staging = dest.parent / f".{dest.name}.unbundle-{os.getpid()}"
        if dest.exists() and not dest.is_dir():
            refuse(f"{dest}: exists and is not a folder")
        dest.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(dest, say)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
    try:
        stream = Stream(bundle, manifest["parts"])
        progress = Progress("unpacking" if staging else "checking the files", sum(f[1] for f in shipped), say, clock)
        try:
            for i, (name, size, sha) in enumerate(shipped):
                what = name if manifest["kind"] == "wheels" else f"blob sha256:{name}"
                _copy_checked(stream, size, sha, staging / name if staging else None, what, progress)
                say(f"file {i + 1}/{len(shipped)} {what}: {size} bytes, sha256 ok")
        finally:
            stream.close()
        if manifest["kind"] == "image":
            def read_blob(digest: str) -> bytes:
                hexd = digest.split(":", 1)[1]
                path = present.get(digest) or (staging / hexd if staging is not None else None)
                if path is not None:
                    with open_regular(path, MAX_MANIFEST_BYTES, "an image manifest") as handle:
                        return bytes(handle.read())
                return _blob_from_stream(bundle, manifest, digest)
            check_image_closure(manifest, read_blob)
        if dest is not None and staging is not None:
            _commit(manifest, staging, dest, present, index)
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    summary: dict[str, Any] = {"kind": manifest["kind"], "dest": str(dest) if dest else None,
                               "files": len(shipped), "bytes": manifest["total_size"], "cell_id": manifest["cell_id"],
                               "manifest_sha256": manifest["sha256"]}
    if manifest["kind"] == "image":
        summary["image"] = manifest["image"]["digest"]
        summary["reused"] = len(present)
    return summary


def _blob_from_stream(bundle: Path, manifest: dict[str, Any], digest: str) -> bytes:
    """A shipped blob's bytes read out of the parts (only to check an image's closure without a DEST)."""
    blob = next(b for b in manifest["blobs"] if b["digest"] == digest)
    if blob["size"] > MAX_MANIFEST_BYTES:
        refuse(f"blob {digest}: an image manifest larger than {MAX_MANIFEST_BYTES} bytes")
    stream = Stream(bundle, manifest["parts"])
    try:
        left = blob["offset"]
        while left:
            left -= len(stream.read(min(CHUNK, left)))
        return stream.read(blob["size"]) if blob["size"] else b""
    finally:
        stream.close()


def _commit(manifest: dict[str, Any], staging: Path, dest: Path, present: dict[str, Path],
            index: dict[str, Any] | None) -> None:
    """Everything is checked: move it into DEST, each file by a rename, the layout's index last."""
    if manifest["kind"] == "wheels":
        if not dest.exists():
            os.rename(staging, dest)  # the whole folder appears at once
            staging.mkdir()  # for the caller's cleanup
            return
        for wheel in manifest["wheels"]:
            os.replace(staging / wheel["filename"], dest / wheel["filename"])
        return
    blobs = dest / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    for blob in manifest["blobs"]:
        hexd = blob["digest"].split(":", 1)[1]
        target = blobs / hexd
        if blob["offset"] is not None:
            os.replace(staging / hexd, target)
        elif present[blob["digest"]].resolve() != target.resolve():
            tmp = staging / hexd
            try:
                os.link(present[blob["digest"]], tmp)
            except OSError:
                shutil.copyfile(present[blob["digest"]], tmp)
            os.replace(tmp, target)
    if not (dest / "oci-layout").exists():
        _write_atomic(dest / "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
    updated = _index_with(index if index is not None else _read_index(dest), manifest["image"])
    _write_atomic(dest / "index.json", json.dumps(updated, sort_keys=True, separators=(",", ":")).encode())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="unbundle.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Check and unpack a pinmatrix bundle (wheels or an OCI image) with the standard library only.",
        epilog="Examples:\n"
               "  python3 -I unbundle.py bundle/ --out wheels/            # then: pinmatrix smoke --wheels wheels/\n"
               "  python3 -I unbundle.py bundle/ --check                  # verify every part and file, write nothing\n"
               "  python3 -I unbundle.py int64/ --out oci/ --have oci/    # an image whose shared blobs oci/ has\n")
    parser.add_argument("bundle", type=Path, help="the folder holding manifest.json and the parts")
    parser.add_argument("--out", type=Path, help="where the wheels (a folder) or the image (an OCI layout) go")
    parser.add_argument("--have", type=Path, help="image bundles: an OCI layout holding the blobs the bundle left out")
    parser.add_argument("--check", action="store_true", help="verify everything, write nothing")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    parser.add_argument("--manifest-sha256", metavar="HEX",
                        help="refuse unless manifest.json hashes to HEX (the sha256 `pinmatrix bundle` printed)")
    args = parser.parse_args(argv)
    if args.manifest_sha256 is not None and not HEX64.match(args.manifest_sha256):
        parser.error("--manifest-sha256: expected 64 lowercase hex digits")
    if (args.out is None) == (not args.check):
        parser.error("give --out DEST, or --check")

    def say(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    try:
        summary = unpack(args.bundle, None if args.check else args.out, args.have, say, args.manifest_sha256)
    except Refused as err:
        print(f"unbundle: refused: {err}".replace("\n", " "), file=sys.stderr)
        return 2
    except OSError as err:
        print(f"unbundle: error: {err.filename or ''}: {err.strerror or err}".replace("\n", " "), file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        where = "checked" if args.check else f"unpacked into {summary['dest']}"
        print(f"{summary['kind']} bundle {where}: {summary['files']} file(s), {summary['bytes']} bytes"
              + (f", {summary['reused']} blob(s) already present" if summary.get("reused") else "")
              + f"; manifest sha256 {summary['manifest_sha256']}"
              + ("" if args.manifest_sha256 else " (not compared: pass --manifest-sha256, or use `pinmatrix unbundle "
                 "--key`)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
