"""``pinmatrix upstream``: for each source patch and known issue the matrix carries, its upstream pull request or
issue as the forge states it (``forge.py``: merged, closed, open, or unknown with the cached answer's date), and
whether the newest release already carries the change: the files a patch touches are read out of that release's
wheel (byte ranges, ``index.wheel_metadata.read_wheel_members``) and the patch dry-run against them as the image
build would apply it (a ``PatchReader``). A patch whose change the release carries proposes dropping the patch; a
known issue whose fix shipped proposes flipping its expectation; the rest are kept, or to be checked by hand."""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any, Literal, Protocol

from packaging.utils import canonicalize_name
from packaging.version import Version
from pydantic import BaseModel, ConfigDict, ValidationError

from pinmatrix.atomic import atomic_write_text
from pinmatrix.errors import PatchError, PinmatrixError
from pinmatrix.hashing import sha256_file
from pinmatrix.index.wheel_metadata import choose_wheel, read_wheel_members
from pinmatrix.matrix.compat import platform_arch
from pinmatrix.matrix.expand import PACKAGE_AXES
from pinmatrix.paths import CACHE_DIR
from pinmatrix.project.matrix_toml import KnownIssueSpec, Matrix, Patch
from pinmatrix.upgrade.forge import ForgeCache, ForgeClient, ForgeState, UpstreamRef, forge_state, parse_ref
from pinmatrix.upgrade.outdated import pinned_versions
from pinmatrix.upgrade.sources import UpgradeSources, age_words, distribution_of

MAX_MEMBER = 4 << 20  # a patched source file; tiled_matmul_kernels.py is ~14 kB
CHECKS_DIR = CACHE_DIR / "upstream-checks"  # each verdict of a patch (by sha256) against a wheel, with its date
Proposal = Literal["drop-patch", "flip-expectation", "check", "keep", "unknown"]


class PatchReader(Protocol):
    """The image build's patch code, as the report needs it (``image/patch_probe.PatchFiles``)."""

    def targets(self, patch_file: Path) -> list[str]: ...

    def outcome(self, patch_file: Path, root: Path) -> Literal["would-apply", "already-applied"]: ...


@dataclass(frozen=True)
class ReleaseCheck:
    """The newest release's files against a patch: "contains" (they carry its change), "lacks" (the patch still
    applies), "changed" (neither), "not-read" (``detail`` says why)."""

    package: str
    version: str
    wheel: str
    verdict: Literal["contains", "lacks", "changed", "not-read"]
    detail: str
    checked_at: datetime | None = None  # when the wheel was read (a verdict from the cache keeps its date)
    from_cache: bool = False


class CachedCheck(BaseModel):
    """A verdict as ``CHECKS_DIR`` keeps it, for --offline."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    patch_sha256: str
    package: str
    version: str
    wheel: str
    verdict: Literal["contains", "lacks", "changed"]
    detail: str
    checked_at: datetime


def _check_file(run: UpstreamRun, sha: str, wheel: str) -> Path:
    return Path(run.matrix.root) / CHECKS_DIR / f"{hashlib.sha256(f'{sha} {wheel}'.encode()).hexdigest()[:32]}.json"


def cached_check(run: UpstreamRun, sha: str, wheel: str) -> ReleaseCheck | None:
    try:
        with _check_file(run, sha, wheel).open("rb") as f:
            c = CachedCheck.model_validate_json(f.read(1 << 16))
    except (OSError, ValidationError, ValueError):
        return None
    if (c.patch_sha256, c.wheel) != (sha, wheel):
        return None
    return ReleaseCheck(c.package, c.version, c.wheel, c.verdict, c.detail, c.checked_at, from_cache=True)


def keep_check(run: UpstreamRun, sha: str, check: ReleaseCheck) -> None:
    if check.verdict == "not-read" or check.checked_at is None:
        return
    path = _check_file(run, sha, check.wheel)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, CachedCheck(patch_sha256=sha, package=check.package, version=check.version,
                                        wheel=check.wheel, verdict=check.verdict, detail=check.detail,
                                        checked_at=check.checked_at).model_dump_json(indent=1) + "\n")


@dataclass(frozen=True)
class UpstreamItem:
    kind: Literal["patch", "known-issue"]
    id: str
    upstream: str  # as the matrix names it ("" where it names none)
    ref: UpstreamRef | None
    forge: ForgeState | None
    release: ReleaseCheck | None
    proposal: Proposal
    reason: str

    @property
    def unknown(self) -> bool:
        """It names an upstream whose state no answer (fresh or cached) gives: not a forge URL, or no answer."""
        return bool(self.upstream) and (self.forge is None or self.forge.answer is None)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id, "upstream": self.upstream, "ref": str(self.ref) if self.ref else None,
                "forge": self.forge.to_dict() if self.forge else None,
                "release": {**asdict(self.release), "checked_at": self.release.checked_at.isoformat()
                            if self.release.checked_at else None} if self.release else None,
                "proposal": self.proposal, "reason": self.reason}


@dataclass
class UpstreamRun:
    """What one report reads: the matrix, the index (``sources``), the forge and its cache, the patch code."""

    matrix: Matrix
    sources: UpgradeSources
    client: ForgeClient
    cache: ForgeCache
    reader: PatchReader
    offline: bool = False

    def forge(self, ref: UpstreamRef | None) -> ForgeState | None:
        return None if ref is None else forge_state(self.client, self.cache, ref, self.sources.now, offline=self.offline)


def upstream_report(run: UpstreamRun, only: set[str] | None = None) -> list[UpstreamItem]:
    """Every patch, then every known issue (or those whose id is in ``only``), each with its proposal."""
    patches = [patch_item(run, pid, spec) for pid, spec in run.matrix.patches.items() if only is None or pid in only]
    by_id = {p.id: p for p in patches}
    issues = [issue_item(run, spec, by_id) for spec in run.matrix.known_issues if only is None or spec.id in only]
    return patches + issues


def patch_item(run: UpstreamRun, pid: str, spec: Patch) -> UpstreamItem:
    ref = parse_ref(spec.upstream)
    state = run.forge(ref)
    check = release_check(run, spec)
    proposal, reason = patch_proposal(run.matrix, spec, state, check)
    return UpstreamItem("patch", pid, spec.upstream, ref, state, check, proposal, reason)


def patch_proposal(matrix: Matrix, spec: Patch, state: ForgeState | None,
                   check: ReleaseCheck | None) -> tuple[Proposal, str]:
    """The release's files first (the evidence), then the matrix's own contained_in, then the forge's word."""
    merged = state is not None and state.answer is not None and state.answer.merged is True
    if check is not None and check.verdict == "contains":
        return "drop-patch", f"{check.package} {check.version}'s files already carry its change ({check.wheel})"
    if spec.contained_in is not None:
        older = [v for v in package_pins(matrix, spec.package) if Version(v) < Version(spec.contained_in)]
        if not older:
            return "drop-patch", (f"the matrix marks it contained in {spec.package} {spec.contained_in}, and every "
                                  "pinned version is that or newer")
        return "keep", f"contained in {spec.contained_in}, but the matrix still pins {', '.join(older)}"
    if check is not None and check.verdict == "lacks":
        return "keep", f"{check.package} {check.version} (newest) lacks its change: the patch still applies to " \
                       f"its files{' though upstream merged it' if merged else ''}"
    if check is not None and check.verdict == "changed":
        return "check", f"{check.package} {check.version}'s files changed: {check.detail}"
    if merged:
        return "check", "merged upstream; no release's files were read"
    if state is None or state.answer is None:
        return "unknown", "no forge answer and no release's files read"
    return "keep", "not merged upstream"


def package_pins(matrix: Matrix, package: str) -> list[str]:
    """Every version any stack pins of the distribution ``package``."""
    name = str(canonicalize_name(package))
    out: list[str] = []
    for stack in matrix.stacks.values():
        for axis in [a for a in PACKAGE_AXES if getattr(stack.axes, a, None)] + list(stack.packages):
            if distribution_of(axis) == name:
                out += [v for v in pinned_versions(stack, axis) if v not in out]
    return out


def release_check(run: UpstreamRun, spec: Patch) -> ReleaseCheck | None:
    """The newest release of the patch's package read against the patch (an installed-tree patch with a file
    under the project only); a failure of the index is a "not-read" check with its line, never a traceback."""
    if spec.kind != "installed-tree" or spec.source is None or "://" in spec.source or spec.sha256 is None:
        return None
    try:
        page = run.sources.project(spec.package)
    except PinmatrixError as err:
        return ReleaseCheck(spec.package, "?", "", "not-read", str(err))
    versions = [v for v in page.release_versions() if not v.is_prerelease]
    if not versions:
        return ReleaseCheck(spec.package, "?", "", "not-read", "the index lists no release")
    version = str(versions[-1])
    arch = platform_arch(run.matrix.settings.platform) or "x86_64"
    wheel = choose_wheel(page.files_of(versions[-1]), arch, run.matrix.settings.python)
    if wheel is None:
        return ReleaseCheck(spec.package, version, "", "not-read", f"the index serves no wheel of it for {arch}")
    if run.offline:
        return cached_check(run, spec.sha256, wheel.filename) or ReleaseCheck(
            spec.package, version, wheel.filename, "not-read", "offline: its wheel is not read, no verdict is cached")
    patch_file = Path(run.matrix.root) / spec.source
    if not patch_file.is_file() or sha256_file(patch_file) != spec.sha256:
        return ReleaseCheck(spec.package, version, wheel.filename, "not-read",
                            f"{spec.source}: missing, or its sha256 is not the matrix's")
    try:
        verdict, detail = _read_against(run, patch_file, wheel)
    except PinmatrixError as err:
        return ReleaseCheck(spec.package, version, wheel.filename, "not-read", str(err))
    check = ReleaseCheck(spec.package, version, wheel.filename, verdict, detail, run.sources.now)
    keep_check(run, spec.sha256, check)
    return check


def _read_against(run: UpstreamRun, patch_file: Path, wheel: Any) -> tuple[Literal["contains", "lacks", "changed"], str]:
    """The patch's target files out of ``wheel``, into a scratch folder, dry-run there."""
    targets = run.reader.targets(patch_file)
    if any(PurePosixPath(t).is_absolute() or ".." in PurePosixPath(t).parts for t in targets):
        raise PatchError(f"{patch_file.name}: a target path leaves site-packages")
    members = read_wheel_members(run.sources.releases.http, wheel, targets, MAX_MEMBER)
    with tempfile.TemporaryDirectory(prefix="pinmatrix-upstream-") as tmp:
        for name, body in members.items():
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / name).write_bytes(body)
        try:
            outcome = run.reader.outcome(patch_file, Path(tmp))
        except PatchError as err:
            return "changed", str(err).replace(tmp, wheel.filename)
    read = ", ".join(sorted(members)) or "no file"
    if outcome == "already-applied":
        return "contains", f"{read}: every hunk is already there"
    return "lacks", f"{read}: the patch still applies"


def issue_item(run: UpstreamRun, spec: KnownIssueSpec, patches: dict[str, UpstreamItem]) -> UpstreamItem:
    """The files first: the issue's fix is a patch of the matrix (``without_patches``) whose change the newest
    release carries (flip) or lacks (keep); else the forge's word and the releases since its fix."""
    ref = parse_ref(spec.upstream) if spec.upstream else None
    state = run.forge(ref)
    read = [(p, patches[p].release) for p in spec.without_patches if p in patches]
    for verdict in ("contains", "lacks"):
        for pid, r in read:
            if r is None or r.verdict != verdict:
                continue
            if verdict == "contains":
                return UpstreamItem("known-issue", spec.id, spec.upstream, ref, state, r, "flip-expectation",
                                    f"{r.package} {r.version} carries its fix (patch {pid}'s change is in its "
                                    "files): expect it to pass there and narrow `when`")
            return UpstreamItem("known-issue", spec.id, spec.upstream, ref, state, r, "keep",
                                f"{r.package} {r.version} (newest) still lacks its fix (patch {pid} still applies "
                                "to its files)")
    proposal, reason = issue_proposal(run, spec, state)
    return UpstreamItem("known-issue", spec.id, spec.upstream, ref, state, None, proposal, reason)


def issue_proposal(run: UpstreamRun, spec: KnownIssueSpec, state: ForgeState | None) -> tuple[Proposal, str]:
    if not spec.upstream:
        return "keep", "no upstream PR or issue named"
    if state is None:
        return "unknown", f"{spec.upstream[:120]!r} is not a pull request or issue URL this reads"
    answer = state.answer
    if answer is None:
        return "unknown", "no forge answer"
    fixed = answer.merged_at if answer.merged else answer.closed_at if answer.state_reason == "completed" else None
    if fixed is None:
        return "keep", "its fix is not merged upstream" if answer.merged is not None else "open or not fixed upstream"
    since = releases_since(run, spec, fixed)
    if not since:
        return "keep", f"fixed upstream {fixed:%Y-%m-%d}; no release of {', '.join(issue_packages(run, spec)) or 'its package'} since"
    return "check", f"fixed upstream {fixed:%Y-%m-%d}; released since: {', '.join(since)} (by upload date, not by " \
                    "its files): smoke it, then flip the expectation"


def issue_packages(run: UpstreamRun, spec: KnownIssueSpec) -> list[str]:
    axes = set(PACKAGE_AXES) | {p for s in run.matrix.stacks.values() for p in s.packages}
    return [distribution_of(axis) for axis in spec.when if axis in axes]


def releases_since(run: UpstreamRun, spec: KnownIssueSpec, when: datetime) -> list[str]:
    """The first release of each package of the issue uploaded after ``when`` ("xformers 0.0.36")."""
    out = []
    for name in issue_packages(run, spec):
        try:
            page = run.sources.project(name)
        except PinmatrixError:
            continue
        later = [v for v in page.release_versions() if not v.is_prerelease and (page.uploaded(v) or when) > when]
        if later:
            out.append(f"{name} {later[0]}")
    return out


def forge_words(state: ForgeState | None, now: datetime) -> str:
    """The forge's state in words, with where it came from."""
    if state is None:
        return "no forge reference"
    a = state.answer
    if a is None:
        return f"{state.problem}; unknown"
    day = f" {a.closed_at:%Y-%m-%d}" if a.closed_at else ""
    if a.merged:
        said = f"merged {a.merged_at:%Y-%m-%d}" if a.merged_at else "merged"
    elif a.state == "open":
        said = "open"
    elif a.merged is False:
        said = f"closed unmerged{day}"
    else:
        said = f"closed{f' as {a.state_reason}' if a.state_reason else ''}{day}"
    if not state.from_cache or state.fetched_at is None:
        return said
    return f"{state.problem}; cached answer from {state.fetched_at:%Y-%m-%d %H:%M}Z ({age_words(state.fetched_at, now)}): {said}"


def upstream_lines(items: list[UpstreamItem], now: datetime) -> list[str]:
    lines: list[str] = []
    for item in items:
        where = f"{item.ref}: {forge_words(item.forge, now)}" if item.ref else (
            f"{item.upstream[:120]!r}: not a forge reference" if item.upstream else "no upstream named")
        lines.append(f"{item.kind} {item.id}: {where}")
        r = item.release
        if r is not None and item.kind == "patch":
            cached = f" (cached: read {r.checked_at:%Y-%m-%d %H:%M}Z, {age_words(r.checked_at, now)})" \
                if r.from_cache and r.checked_at else ""
            lines.append(f"    release {r.package} {r.version}{f' ({r.wheel})' if r.wheel else ''}: {r.verdict}: "
                         f"{r.detail}{cached}")
        lines.append(f"    proposal: {item.proposal}: {item.reason}")
    return lines
