"""A wheel's own word on what it needs: its METADATA (Requires-Dist, Requires-Python), read without the whole
wheel: the PEP 658 ``.metadata`` file where the index serves one (its sha256 checked against the page's), else
byte ranges of the wheel (the zip's directory at its end, then the METADATA member; the member's CRC checked by
``zipfile``). Bounded: the bytes fetched per wheel and METADATA's size. Cached per (name, version), one entry
per wheel read (an x86_64 and an aarch64 wheel may need different things); ``MetadataCache`` reads the cache
alone, so expansion stays offline."""

from __future__ import annotations

import hashlib
import io
import re
import zipfile
from datetime import UTC, datetime
from email.parser import BytesParser
from email.policy import compat32
from pathlib import Path
from typing import Literal

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pinmatrix.atomic import atomic_write_text
from pinmatrix.index.answers import BoundedHttp, IndexAnswerError
from pinmatrix.index.releases import ReleaseFile

MAX_METADATA = 4 << 20  # METADATA of the largest wheels is a few hundred kB (most of it the description)
MAX_RANGE_BYTES = 32 << 20  # all the bytes one wheel's range reads may fetch (torch's zip directory: ~2 MiB)
_TAIL = 1 << 16
_METADATA_MEMBER = re.compile(r"[^/]+\.dist-info/METADATA")


class WheelMetadata(BaseModel):
    """What one wheel's METADATA says it needs, and where and when it was read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    filename: str
    via: Literal["pep658", "range"]
    fetched_at: datetime
    requires_dist: list[str] = Field(default_factory=list, max_length=2000)
    requires_python: str | None = None

    @property
    def arches(self) -> set[str]:
        """The CPU architectures its platform tags name ("any": a pure wheel)."""
        return {_arch_of(t.platform) for t in parse_wheel_filename(self.filename)[3]}


def _arch_of(platform: str) -> str:
    """A wheel tag's platform -> "x86_64", "aarch64", "any" (a pure wheel) or the tag itself (another OS)."""
    if platform == "any":
        return "any"
    return next((arch for arch in ("x86_64", "aarch64") if platform.endswith(f"_{arch}") and "linux" in platform),
                platform)


class VersionMetadata(BaseModel):
    """The cache's entry for one (name, version): each wheel read, by file name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    version: str
    wheels: dict[str, WheelMetadata] = Field(default_factory=dict)


def parse_metadata(body: bytes, filename: str, via: Literal["pep658", "range"], fetched_at: datetime) -> WheelMetadata:
    """METADATA's bytes -> its Requires-Dist and Requires-Python (a line that is no requirement is refused)."""
    message = BytesParser(policy=compat32).parsebytes(body, headersonly=True)
    requires = [str(r).strip() for r in message.get_all("Requires-Dist") or []]
    for text in requires:
        try:
            Requirement(text)
        except InvalidRequirement:
            raise IndexAnswerError(f"{filename}: METADATA's Requires-Dist {text[:120]!r} is not a requirement") from None
    python = message.get("Requires-Python")
    return WheelMetadata(filename=filename, via=via, fetched_at=fetched_at, requires_dist=requires,
                         requires_python=str(python).strip() if python else None)


def fetch_metadata(http: BoundedHttp, file: ReleaseFile, now: datetime | None = None) -> WheelMetadata:
    """The METADATA of the wheel ``file``: PEP 658 where the page declares it (a body whose sha256 is not the
    declared one is refused), else ranges of the wheel."""
    when = now or datetime.now(UTC)
    declared = file.metadata_hashes
    if declared is not None:
        body = http.get(file.url + ".metadata", limit=MAX_METADATA).body
        want = declared.get("sha256")
        if want is not None and hashlib.sha256(body).hexdigest() != want:
            raise IndexAnswerError(f"{file.filename}.metadata: sha256 {hashlib.sha256(body).hexdigest()} is not the "
                                   f"{want} its index page declares")
        return parse_metadata(body, file.filename, "pep658", when)
    return parse_metadata(_ranged_metadata(http, file), file.filename, "range", when)


class _RangeFile(io.RawIOBase):
    """The wheel at ``url`` as a seekable file whose reads are HTTP byte ranges (``zipfile`` reads its end, its
    directory, then one member); at most MAX_RANGE_BYTES fetched in all."""

    def __init__(self, http: BoundedHttp, url: str) -> None:
        self._http, self._url, self._pos, self._fetched = http, url, 0, 0
        tail = self._get(f"-{_TAIL}")
        self._size = _total_size(tail.content_range, url)
        self._blocks: dict[int, bytes] = {self._size - len(tail.body): tail.body}

    def _get(self, byte_range: str) -> "_Ranged":
        answer = self._http.get(self._url, limit=min(MAX_RANGE_BYTES, MAX_RANGE_BYTES - self._fetched),
                                byte_range=byte_range)
        if answer.status != 206:
            raise IndexAnswerError(f"{self._url[:160]}: the server does not answer byte ranges (HTTP {answer.status})")
        self._fetched += len(answer.body)
        return _Ranged(answer.body, answer.content_range)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        want = min(len(view), self._size - self._pos)
        if want <= 0:
            return 0
        data = self._held(self._pos, want)
        if data is None:
            data = self._get(f"{self._pos}-{self._pos + max(want, _TAIL) - 1}").body[:want]
            self._blocks[self._pos] = data
        view[:len(data)] = data
        self._pos += len(data)
        return len(data)

    def _held(self, start: int, want: int) -> bytes | None:
        for begin, block in self._blocks.items():
            if begin <= start and start + want <= begin + len(block):
                return block[start - begin: start - begin + want]
        return None


class _Ranged:
    def __init__(self, body: bytes, content_range: str | None) -> None:
        self.body, self.content_range = body, content_range


def _total_size(content_range: str | None, url: str) -> int:
    m = re.fullmatch(r"bytes \d+-\d+/(\d+)", (content_range or "").strip())
    if m is None:
        raise IndexAnswerError(f"{url[:160]}: a byte-range answer without a Content-Range total")
    return int(m.group(1))


def _ranged_metadata(http: BoundedHttp, file: ReleaseFile) -> bytes:
    try:
        with zipfile.ZipFile(io.BufferedReader(_RangeFile(http, file.url), buffer_size=_TAIL)) as zf:
            members = [i for i in zf.infolist() if _METADATA_MEMBER.fullmatch(i.filename)]
            if len(members) != 1:
                raise IndexAnswerError(f"{file.filename}: {len(members)} *.dist-info/METADATA members, not one")
            if members[0].file_size > MAX_METADATA:
                raise IndexAnswerError(f"{file.filename}: METADATA is {members[0].file_size} bytes, more than "
                                       f"{MAX_METADATA}")
            return zf.read(members[0])
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, NotImplementedError) as err:
        raise IndexAnswerError(f"{file.filename}: cannot read its METADATA through byte ranges: {err}") from None


def read_wheel_members(http: BoundedHttp, file: ReleaseFile, names: list[str], limit: int) -> dict[str, bytes]:
    """The members ``names`` of the remote wheel ``file``, read through byte ranges as its METADATA is (the zip's
    directory, then each member; its CRC checked); a name the wheel lacks is left out, a member larger than
    ``limit`` bytes refused."""
    try:
        with zipfile.ZipFile(io.BufferedReader(_RangeFile(http, file.url), buffer_size=_TAIL)) as zf:
            found = {i.filename: i for i in zf.infolist() if i.filename in names}
            for info in found.values():
                if info.file_size > limit:
                    raise IndexAnswerError(f"{file.filename}: {info.filename[:120]} is {info.file_size} bytes, "
                                           f"more than {limit}")
            return {name: zf.read(info) for name, info in found.items()}
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, NotImplementedError) as err:
        raise IndexAnswerError(f"{file.filename}: cannot read its members through byte ranges: {err}") from None


class MetadataCache:
    """The cache of wheel metadata under ``root`` (``NAME/VERSION.json``): read by expansion, written by the
    steps that ask the index."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _file(self, name: str, version: str) -> Path:
        return self.root / str(canonicalize_name(name)) / f"{Version(version)}.json"

    def entry(self, name: str, version: str) -> VersionMetadata | None:
        try:
            return VersionMetadata.model_validate_json(self._file(name, version).read_bytes()[: 4 * MAX_METADATA])
        except (OSError, ValidationError, ValueError):
            return None

    def versions(self, name: str) -> list[str]:
        """The versions of ``name`` with cached metadata."""
        folder = self.root / str(canonicalize_name(name))
        return sorted((p.stem for p in folder.glob("*.json")), key=Version) if folder.is_dir() else []

    def wheel_for(self, name: str, version: str, arch: str) -> WheelMetadata | None:
        """The cached metadata of a wheel of (name, version) for ``arch`` (x86_64, aarch64), else a pure one."""
        entry = self.entry(name, version)
        if entry is None:
            return None
        ranked = sorted(entry.wheels.values(), key=lambda w: (arch not in w.arches, w.filename))
        best = next((w for w in ranked if arch in w.arches or "any" in w.arches), None)
        return best

    def put(self, name: str, version: str, meta: WheelMetadata) -> None:
        entry = self.entry(name, version) or VersionMetadata(name=str(canonicalize_name(name)), version=version)
        wheels = {**entry.wheels, meta.filename: meta}
        path = self._file(name, version)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, entry.model_copy(update={"wheels": wheels}).model_dump_json(indent=1) + "\n")


def requirement_pins(meta: WheelMetadata, python: str, arch: str) -> dict[str, str]:
    """Requires-Dist that apply on Linux ``arch`` with CPython ``python`` and no extra: canonical name ->
    specifier text (several lines for one name joined)."""
    env = {**default_environment(), "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
           "platform_machine": arch, "python_version": python, "python_full_version": f"{python}.0",
           "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
    out: dict[str, list[str]] = {}
    for text in meta.requires_dist:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate(env):  # type: ignore[arg-type]
            continue
        out.setdefault(str(canonicalize_name(req.name)), []).append(str(req.specifier))
    return {name: ",".join(s for s in specs if s) for name, specs in out.items()}


def choose_wheel(files: list[ReleaseFile], arch: str, python: str = "3.13") -> ReleaseFile | None:
    """A wheel among ``files`` for Linux ``arch`` (CPython ``python``'s own tag first), else a pure one."""
    own = f"cp{python.replace('.', '')}"

    def rank(f: ReleaseFile) -> tuple[int, int, str]:
        tags = parse_wheel_filename(f.filename)[3]
        arches = {_arch_of(t.platform) for t in tags}
        return (0 if arch in arches else 1 if "any" in arches else 2), 0 if any(t.interpreter == own for t in tags) else 1, \
            f.filename
    wheels = sorted((f for f in files if f.filename.endswith(".whl")), key=rank)
    return wheels[0] if wheels and rank(wheels[0])[0] < 2 else None
