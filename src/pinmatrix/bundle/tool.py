"""pinmatrix itself as a bundle, for a GPU host that has nothing but ``python3``: the wheel built from this
checkout and its runtime dependencies at the versions ``requirements/dev.lock`` pins, for the host's Python and
platform. The dependencies are the closure of the wheels' own Requires-Dist (markers evaluated for that host, no
test or lint extra), each one a lock entry: a dependency the lock lacks, or a wheel whose sha256 is not one of its
lock line's hashes, is refused in one line. The bundle's ``lock.txt`` is those lock lines plus one for pinmatrix's
wheel (its sha256), so the host's ``unbundle.py`` checks every wheel as it does a cell's."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename
from securesystemslib.signer import CryptoSigner

from pinmatrix import __version__
from pinmatrix.bundle.model import LOCK_NAME, BundleManifest, WheelItem
from pinmatrix.bundle.pack import BundleError, Say, check_out, publish, staging_folder, write_parts
from pinmatrix.hashing import sha256_bytes, sha256_file
from pinmatrix.index.answers import IndexAnswerError
from pinmatrix.index.wheel_index import Target, WheelError, WheelFile
from pinmatrix.index.wheel_metadata import MAX_METADATA, parse_metadata
from pinmatrix.project.lockfile import LockEntry, ParsedLock, parse_lock

TOOL_LOCK = Path("requirements/dev.lock")  # pinmatrix's own dependencies, with hashes (nox and CI install it)
MAX_TOOL_WHEELS = 500
_METADATA = re.compile(r"^[^/]+\.dist-info/METADATA$")


class Fetcher(Protocol):
    """What the bundle needs of ``index.wheel_index.WheelFetcher``."""

    def choose(self, entry: LockEntry, target: Target, indexes: tuple[()]) -> WheelFile: ...
    def fetch(self, wheel: WheelFile, progress: Callable[[str], None] | None = None) -> Path: ...


def this_host() -> tuple[str, str]:
    """This interpreter's CPython version and this machine's platform (``x86_64-manylinux_2_36``): what
    ``bundle tool`` targets by default."""
    libc, version = platform.libc_ver()
    m = re.match(r"^2\.([0-9]+)", version)
    if libc != "glibc" or not m:
        raise BundleError("this machine is not glibc Linux: pass --python-version and --platform for the host")
    return f"{sys.version_info[0]}.{sys.version_info[1]}", f"{platform.machine()}-manylinux_2_{m.group(1)}"


def platform_name(text: str) -> str:
    """``--platform``: uv's ``x86_64-manylinux_2_28`` or pip's ``manylinux_2_28_x86_64``, as uv's."""
    m = re.fullmatch(r"manylinux_2_([0-9]{1,3})_(x86_64|aarch64)", text)
    return f"{m.group(2)}-manylinux_2_{m.group(1)}" if m else text


def marker_environment(target: Target) -> dict[str, str]:
    """The PEP 508 marker values of CPython ``target.python`` on Linux ``target.arch``."""
    base = {key: str(value) for key, value in default_environment().items()}
    return {**base, "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
            "platform_machine": target.arch, "python_version": target.python,
            "python_full_version": f"{target.python}.0", "implementation_name": "cpython",
            "platform_python_implementation": "CPython"}


def requires_of(wheel: Path, python: str) -> list[str]:
    """The Requires-Dist lines of a wheel's METADATA (bounded in size); a wheel whose Requires-Python excludes
    CPython ``python`` is refused."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            infos = [i for i in zf.infolist() if _METADATA.match(i.filename)]
            if len(infos) != 1 or infos[0].file_size > MAX_METADATA:
                raise BundleError(f"{wheel.name}: not one METADATA of at most {MAX_METADATA} bytes")
            body = zf.read(infos[0])
        meta = parse_metadata(body, wheel.name, "range", datetime.now(UTC))
    except (zipfile.BadZipFile, OSError, IndexAnswerError) as err:
        raise BundleError(f"{wheel.name}: cannot read its METADATA: {err}") from None
    try:
        fits = meta.requires_python is None or SpecifierSet(meta.requires_python).contains(f"{python}.0", True)
    except InvalidSpecifier:
        fits = False
    if not fits:
        raise BundleError(f"{wheel.name}: Requires-Python {meta.requires_python!r} excludes CPython {python} "
                          "(--python-version)")
    return meta.requires_dist


def needed(requires: list[str], extras: set[str], env: dict[str, str]) -> list[tuple[str, set[str]]]:
    """(canonical name, extras asked of it) of each requirement that applies in ``env`` with ``extras``."""
    out: list[tuple[str, set[str]]] = []
    for text in requires:
        req = Requirement(text)
        if req.marker is not None and not any(
                req.marker.evaluate({**env, "extra": extra}) for extra in sorted(extras) or [""]):  # type: ignore[arg-type]
            continue
        out.append((str(canonicalize_name(req.name)), set(req.extras)))
    return out


def _checked(entry: LockEntry, wheel: WheelFile, path: Path) -> None:
    """The wheel is one of the lock line's hashes at its version, and the file hashes to it."""
    if f"sha256:{wheel.sha256}" not in entry.hashes or wheel.version != entry.version:
        raise BundleError(f"{entry.name}=={entry.version}: wheel {wheel.filename} (sha256 {wheel.sha256}) is not "
                          f"one of {TOOL_LOCK}'s hashes for it: refused")
    found = sha256_file(path)
    if found != wheel.sha256:
        raise BundleError(f"{wheel.filename}: sha256 {found} is not the lock's {wheel.sha256}: refused")


def resolve(top: list[str], lock: ParsedLock, target: Target, fetcher: Fetcher,
            say: Say) -> list[tuple[LockEntry, WheelFile, Path]]:
    """The closure of ``top`` (pinmatrix's Requires-Dist) through each wheel's own, every one a lock entry whose
    wheel for ``target`` is fetched and checked against the lock's hashes; in the order first needed."""
    env, by_name = marker_environment(target), lock.by_name()
    todo = needed(top, set(), env)
    extras: dict[str, set[str]] = {}
    done: dict[str, tuple[LockEntry, WheelFile, Path]] = {}
    while todo:
        name, asked = todo.pop(0)
        if name in done and asked <= extras[name]:
            continue
        extras[name] = extras.get(name, set()) | asked
        if name not in done:
            entry = by_name.get(name)
            if entry is None:
                raise BundleError(f"{name}: a runtime dependency of pinmatrix that {TOOL_LOCK} does not pin "
                                  "(run `./dev lock-deps`)")
            if len(done) >= MAX_TOOL_WHEELS:
                raise BundleError(f"more than {MAX_TOOL_WHEELS} runtime dependencies")
            try:
                wheel = fetcher.choose(entry, target, ())
                path = fetcher.fetch(wheel, progress=say)
            except WheelError as err:
                raise BundleError(str(err)) from None
            _checked(entry, wheel, path)
            done[name] = (entry, wheel, path)
            say(f"wheel {len(done)} {wheel.filename}")
        todo.extend(needed(requires_of(done[name][2], target.python), extras[name], env))
    return list(done.values())


def build_own_wheel(source: Path, folder: Path) -> Path:
    """pinmatrix's wheel built from the checkout ``source``: its pyproject.toml, README and src/ copied into
    ``folder`` first (no build/ or egg-info left in the checkout, none of an earlier build's files in the wheel),
    then ``pip wheel --no-deps --no-build-isolation`` (the build backend installed here; nothing fetched)."""
    tree = folder / "source"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        if not (source / name).is_file():
            raise BundleError(f"{source}: no {name}: not a pinmatrix checkout (pass --source)")
        shutil.copyfile(source / name, tree / name)
    for extra in sorted(source.glob("LICEN[CS]E*")):
        shutil.copyfile(extra, tree / extra.name)
    shutil.copytree(source / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "--wheel-dir", str(folder), str(tree)], capture_output=True, text=True, check=False)
    wheels = sorted(folder.glob("pinmatrix-*.whl"))
    if run.returncode != 0 or len(wheels) != 1:
        last = (run.stderr.strip().splitlines() or ["no wheel written"])[-1]
        raise BundleError(f"{source}: building pinmatrix's wheel failed: {last[:300]}")
    return wheels[0]


def tool_lock_text(own: Path, own_sha: str, chosen: list[tuple[LockEntry, WheelFile, Path]], source: str) -> str:
    """The bundle's lock: pinmatrix's wheel by its sha256, then the lock lines of its dependencies."""
    version = str(parse_wheel_filename(own.name)[1])
    lines = [f"# pinmatrix {version} and its runtime dependencies as {source} pins them (pinmatrix bundle tool)",
             f"pinmatrix=={version} --hash=sha256:{own_sha}"]
    return "\n".join(lines + [entry.text for entry, _, _ in chosen]) + "\n"


@dataclass(frozen=True)
class ToolRequest:
    source: Path  # the checkout: pyproject.toml and requirements/dev.lock
    python: str
    platform: str
    part_size: int
    out: Path
    signer: CryptoSigner | None = None


def bundle_tool(request: ToolRequest, fetcher: Fetcher, say: Say) -> BundleManifest:
    """Build pinmatrix's wheel, resolve and fetch its dependencies from the lock for the host, pack them."""
    check_out(request.out)
    if not re.fullmatch(r"3\.[0-9]{1,3}", request.python):
        raise BundleError(f"--python-version {request.python!r}: expected a CPython version such as 3.12")
    if not re.fullmatch(r"(x86_64|aarch64)-manylinux_2_[0-9]{1,3}", request.platform):
        raise BundleError(f"--platform {request.platform!r}: expected ARCH-manylinux_2_N or manylinux_2_N_ARCH "
                          "(x86_64 or aarch64)")
    lock_file = request.source / TOOL_LOCK
    try:
        lock = parse_lock(lock_file.read_text(encoding="utf-8"), str(TOOL_LOCK))
    except (OSError, UnicodeDecodeError) as err:
        raise BundleError(f"{lock_file}: cannot read the lock: {err}") from None
    target = Target(python=request.python, platform=request.platform)
    with tempfile.TemporaryDirectory(prefix="pinmatrix-tool-") as tmp:
        own = build_own_wheel(request.source, Path(tmp))
        say(f"built {own.name}")
        chosen = resolve(requires_of(own, request.python), lock, target, fetcher, say)
        own_sha = sha256_file(own)
        lock_text = tool_lock_text(own, own_sha, chosen, str(TOOL_LOCK))
        version = str(parse_wheel_filename(own.name)[1])
        files = [(own, "pinmatrix", version, own_sha)] + [(p, w.name, w.version, w.sha256) for _, w, p in chosen]
        items, offset = [], 0
        for path, name, item_version, sha in files:
            size = path.stat().st_size
            items.append(WheelItem(name=name, version=item_version, filename=path.name, size=size, sha256=sha,
                                   offset=offset))
            offset += size
        say(f"{len(items)} wheel(s), {offset} bytes")
        folder = staging_folder(request.out)
        try:
            parts = write_parts([f[0] for f in files], request.part_size, folder, say)
            manifest = BundleManifest(
                kind="wheels", pinmatrix_version=__version__, lock_sha256=sha256_bytes(lock_text.encode()),
                python=request.python, platform=request.platform,
                note=f"pinmatrix {version} and its runtime dependencies for CPython {request.python} on "
                     f"{request.platform}, as {TOOL_LOCK} pins them", wheels=items, part_size=request.part_size,
                total_size=offset, parts=parts)
            publish(manifest, folder, request.out.absolute(), {LOCK_NAME: lock_text.encode()}, request.signer)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return manifest
