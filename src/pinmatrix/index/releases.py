"""A project's releases on an index, from its JSON simple API page (PEP 691; PEP 700's ``versions`` and
``upload-time``): typed, bounded (the page's bytes, its files, each field), and cached with the date it was read,
so that an offline run answers from the cache and says how old the answer is."""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pinmatrix.atomic import atomic_write_text
from pinmatrix.index.answers import BoundedHttp, IndexAnswerError

SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
MAX_PAGE = 64 << 20  # one project's JSON page (the largest on the default index is a few MiB)
MAX_FILES = 200_000
_TEXT = 2048  # a file name, a URL, a hash: no longer than this


class ReleaseFile(BaseModel):
    """One file of a project page, as PEP 691/700/714 describe it; keys the model does not know are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    filename: str = Field(max_length=_TEXT)
    url: str = Field(max_length=_TEXT)
    hashes: dict[str, str] = Field(default_factory=dict, max_length=16)
    size: int | None = Field(default=None, ge=0)
    upload_time: datetime | None = Field(default=None, alias="upload-time")
    yanked: bool | str = False
    core_metadata: bool | dict[str, str] = Field(default=False, alias="core-metadata")
    dist_info_metadata: bool | dict[str, str] = Field(default=False, alias="data-dist-info-metadata")

    @property
    def version(self) -> Version | None:
        try:
            if self.filename.endswith(".whl"):
                return parse_wheel_filename(self.filename)[1]
            return parse_sdist_filename(self.filename)[1]
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            return None

    @property
    def metadata_hashes(self) -> dict[str, str] | None:
        """The hashes of the PEP 658 ``.metadata`` file ({} where it exists with none), None where it does not."""
        declared = self.core_metadata or self.dist_info_metadata  # PEP 714 renamed the key
        if declared is False:
            return None
        return declared if isinstance(declared, dict) else {}


class ProjectReleases(BaseModel):
    """A project page as read on ``fetched_at`` (what the cache keeps)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: str
    name: str
    fetched_at: datetime
    versions: list[str] = Field(default_factory=list, max_length=MAX_FILES)
    files: list[ReleaseFile] = Field(default_factory=list, max_length=MAX_FILES)

    def uploaded(self, version: Version) -> datetime | None:
        """When ``version``'s first file reached the index (None where the index gives no dates)."""
        times = [f.upload_time for f in self.files if f.version == version and f.upload_time is not None]
        return min(times) if times else None

    def release_versions(self) -> list[Version]:
        """Every release with a file that is not yanked, oldest first (PEP 700 ``versions``, else the files')."""
        live = {f.version for f in self.files if f.yanked is False and f.version is not None}
        listed = {_version(v) for v in self.versions} - {None} or live
        return sorted(v for v in listed if v in live)

    def files_of(self, version: Version) -> list[ReleaseFile]:
        return [f for f in self.files if f.version == version and f.yanked is False]


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def parse_page(index: str, name: str, body: bytes, fetched_at: datetime) -> ProjectReleases:
    """A PEP 691 page's bytes -> ProjectReleases (file URLs made absolute); IndexAnswerError naming the
    project where the page is not one."""
    page_url = f"{index.rstrip('/')}/{name}/"
    try:
        data = json.loads(body)
        if not isinstance(data, dict) or not isinstance(data.get("files", []), list):
            raise ValueError("not a project page")
        files = [{**f, "url": urllib.parse.urljoin(page_url, str(f.get("url", "")))}
                 for f in data.get("files", []) if isinstance(f, dict)]
        return ProjectReleases.model_validate({
            "index": index, "name": name, "fetched_at": fetched_at, "files": files,
            "versions": [str(v) for v in data.get("versions", []) if isinstance(v, str)]})
    except (ValueError, RecursionError, UnicodeDecodeError, ValidationError) as err:
        first = err.errors()[0]["msg"] if isinstance(err, ValidationError) else str(err)[:200]
        raise IndexAnswerError(f"index {index}: the page of {name} is not a PEP 691 project page: {first}") from None


@dataclass(frozen=True)
class ReleaseSource:
    """Project pages from the indexes (``offline``: from the cache only), cached under ``cache_dir``."""

    cache_dir: Path
    http: BoundedHttp
    offline: bool = False
    max_page: int = MAX_PAGE

    def cache_file(self, index: str, name: str) -> Path:
        key = hashlib.sha256(index.rstrip("/").encode()).hexdigest()[:16]
        return self.cache_dir / "pages" / key / f"{canonicalize_name(name)}.json"

    def cached(self, index: str, name: str) -> ProjectReleases | None:
        path = self.cache_file(index, name)
        try:
            return ProjectReleases.model_validate_json(path.read_bytes()[: self.max_page + 1])
        except (OSError, ValidationError):
            return None  # absent or damaged: asked again (or, offline, said to be missing)

    def releases(self, index: str, name: str, now: datetime | None = None) -> ProjectReleases:
        """The page of ``name`` on ``index``: read now and cached, or (offline) the cached one."""
        name = str(canonicalize_name(name))
        if self.offline:
            found = self.cached(index, name)
            if found is None:
                raise IndexAnswerError(f"offline: no cached page of {name} from {index} (run once online)")
            return found
        answer = self.http.get(f"{index.rstrip('/')}/{name}/", limit=self.max_page, accept=SIMPLE_JSON,
                               missing_ok=True)
        page = parse_page(index, name, answer.body if answer.status != 404 else b'{"files": []}',
                          now or datetime.now(UTC))
        path = self.cache_file(index, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, page.model_dump_json(by_alias=True))
        return page
