"""Lock each cell with ``uv pip compile`` into ``locks/<cell-id>.txt``: exact pins with sha256 hashes,
resolved for the cell's Python and target platform (not the host's), against the matrix's indexes, as
the indexes stood at ``exclude_newer``. Relocking an unchanged cell rewrites no byte."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from pinmatrix import interrupt
from pinmatrix.atomic import atomic_write_text
from pinmatrix.cell import Cell
from pinmatrix.errors import LockError
from pinmatrix.index.uv import find_uv
from pinmatrix.index.wheel_index import (
    DEFAULT_INDEX,
    IndexUnreachable,
    WheelError,
    WheelFetcher,
    cell_target,
    ssl_context,
)
from pinmatrix.lock.settings import LockSettings
from pinmatrix.project.lockfile import LOCK_DIR, LockFileError, lock_path, parse_lock


@dataclass(frozen=True)
class LockResult:
    cell: Cell
    path: Path
    ok: bool
    changed: bool = False
    reason: str = ""  # uv's words when the cell cannot be resolved


def uv_command(cell: Cell, requirements: Path, output: Path, exclude_newer: str | None, uv: str) -> list[str]:
    cmd = [
        uv, "pip", "compile", str(requirements), "-o", str(output),
        "--python-version", cell.python, "--python-platform", cell.platform,
        "--generate-hashes", "--no-header", "--quiet",
    ]
    if exclude_newer:
        cmd += ["--exclude-newer", exclude_newer]
    for index in cell.indexes:
        cmd += ["--default-index", index.url] if index.default else ["--index", index.url]
    return cmd


@functools.lru_cache(maxsize=None)
def uv_version(uv: str | None = None) -> str:
    """The version of the uv that resolves locks ("0.13.9"); pyproject.toml pins it exactly."""
    exe = uv or find_uv()
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as err:
        raise LockError(f"{exe} --version failed: {err}") from None
    parts = out.split()
    if len(parts) < 2 or parts[0] != "uv":
        raise LockError(f"{exe} --version printed {out.strip()!r}, not 'uv X.Y.Z'")
    return parts[1]


def header(cell: Cell, uv: str | None = None) -> str:
    """The lock's comment header. It names the uv version that resolved the lock (``uv``), so a lock made by
    another uv differs in this line; the same uv on the same inputs gives the same bytes."""
    lines = [
        f"# pinmatrix lock for cell {cell.id}: {cell.name}",
        f"# python {cell.python} on {cell.platform}; regenerate with: pinmatrix lock -k {cell.id}",
    ]
    if uv:
        lines.append(f"# resolved by uv {uv}")
    return "\n".join(lines) + "\n"


def _uv_reason(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not ln.startswith("warning:")]
    text = " ".join(lines)
    return text[:600] if text else "uv failed without a message"


def _wheel_platforms(fetcher: WheelFetcher, cell: Cell, name: str, hashes: set[str]) -> list[str]:
    """The platform tags of the wheels whose sha256 the lock lists for ``name`` (on any of the cell's indexes)."""
    indexes = [i.url for i in cell.indexes] or [DEFAULT_INDEX]
    tags: set[str] = set()
    for index in indexes:
        for f in fetcher.files(index, name):
            file_hashes = f.get("hashes")
            sha = file_hashes.get("sha256") if isinstance(file_hashes, dict) else None
            if sha not in hashes:
                continue
            try:
                tags.update(t.platform for t in parse_wheel_filename(str(f.get("filename", "")))[3])
            except InvalidWheelFilename:
                continue
    return sorted(tags)


def _floor(platforms: list[str], arch: str) -> int | None:
    """The lowest glibc minor of ``manylinux_2_N_<arch>`` among ``platforms`` (the platform floor they need)."""
    minors = [int(p.split("_")[2]) for p in platforms
              if p.startswith("manylinux_2_") and p.endswith(f"_{arch}") and p.split("_")[2].isdigit()]
    return min(minors) if minors else None


def platform_floor_problem(cell: Cell, body: str, fetcher: WheelFetcher) -> str | None:
    """None when every locked distribution has a wheel (with a locked hash) for the cell's platform; else one
    line naming each distribution that has none and the platform tags its wheels carry. uv resolves such a lock
    (it may fall back to an sdist); the image build installs wheels only, so the lock is refused here."""
    try:
        lock = parse_lock(body, "the new lock")
    except LockFileError as err:
        return str(err)
    target = cell_target(cell)
    try:
        arch = target.arch
    except WheelError:
        return None  # not ARCH-manylinux_2_N: no image is built for it, no floor to check
    missing: list[str] = []
    floors: list[int] = []
    for entry in lock.entries:
        try:
            fetcher.choose(entry, target, cell.indexes)
        except IndexUnreachable:
            raise
        except WheelError:
            tags = _wheel_platforms(fetcher, cell, entry.name, {h.split(":", 1)[1] for h in entry.hashes})
            floor = _floor(tags, arch)
            if floor is not None:
                floors.append(floor)
            missing.append(f"{entry.name}=={entry.version} (its wheels: {', '.join(tags) or 'none, an sdist only'})")
    if not missing:
        return None
    hint = (f"; lock for {arch}-manylinux_2_{max(floors)} or newer" if len(floors) == len(missing) else "")
    return f"the locked wheels do not meet the platform {cell.platform}: {'; '.join(missing)}{hint}"


def page_reader(extra_ca: Sequence[Path] = ()) -> WheelFetcher:
    """A reader of the indexes' JSON pages (it downloads no wheel) trusting the system's and ``extra_ca``."""
    return WheelFetcher(Path(tempfile.gettempdir()) / "pinmatrix-no-wheels", context=ssl_context(extra_ca))


def _without_uv_line(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("# resolved by uv "))


def lock_cell(cell: Cell, root: Path, exclude_newer: str | None, uv: str | None = None,
              fetcher: WheelFetcher | None = None, *, write: bool = True) -> LockResult:
    """Lock one cell; with ``fetcher``, a lock whose wheels do not meet the cell's platform is refused (not
    written), naming the distributions and their wheels' tags. With ``write=False`` (``lock --check``) nothing
    is written: ``changed`` says whether the lock is missing or would change in anything but the uv line."""
    uv = uv or find_uv()
    target = lock_path(cell, root)
    if write:
        target.parent.mkdir(parents=True, exist_ok=True)
    if not cell.requirements:
        return LockResult(cell, target, ok=False, reason="the cell has no pip requirements to lock")
    with interrupt.scratch_folder("pinmatrix-lock-") as tmp:  # removed on Ctrl-C too, uv stopped by its group
        req = tmp / "requirements.in"
        req.write_text("\n".join(cell.requirements) + "\n", encoding="utf-8")
        out = tmp / "lock.txt"
        env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1", "TMPDIR": str(tmp)}  # uv's in ours
        proc = interrupt.run(uv_command(cell, Path(req.name), Path(out.name), exclude_newer, uv), capture_output=True,
                             text=True, env=env, cwd=tmp)
        if proc.returncode != 0:
            return LockResult(cell, target, ok=False, reason=_uv_reason(proc.stderr))
        body = out.read_text(encoding="utf-8")
    if fetcher is not None:
        try:
            problem = platform_floor_problem(cell, body, fetcher)
        except WheelError as err:
            return LockResult(cell, target, ok=False, reason=f"cannot check the locked wheels' platforms: {err}")
        if problem:
            return LockResult(cell, target, ok=False, reason=problem)
    content = header(cell, uv_version(uv)) + body
    if not write:
        current = target.read_text(encoding="utf-8") if target.is_file() else None
        fresh = current is not None and _without_uv_line(current) == _without_uv_line(content)
        return LockResult(cell, target, ok=True, changed=not fresh)
    if target.is_file() and target.read_text(encoding="utf-8") == content:
        return LockResult(cell, target, ok=True, changed=False)
    atomic_write_text(target, content)
    return LockResult(cell, target, ok=True, changed=True)


def lock_cells(cells: Sequence[Cell], settings: LockSettings,
               on_done: Callable[[LockResult], None] | None = None) -> list[LockResult]:
    """Lock every cell; one that cannot be resolved does not stop the others. With ``settings.check_platforms``,
    each lock's wheels are checked against its cell's platform through the indexes' JSON pages (``page_reader``),
    each page read once for all cells."""
    uv = find_uv()
    fetcher = page_reader(settings.extra_ca) if settings.check_platforms else None
    results: list[LockResult] = []
    pool = ThreadPoolExecutor(max_workers=max(1, settings.jobs))  # not `with`: Ctrl-C must not wait for uv
    futures = []
    try:
        for c in cells:
            futures.append(pool.submit(lock_cell, c, settings.root, settings.exclude_newer, uv, fetcher,
                                       write=settings.write))
        for fut in futures:
            res = fut.result()
            results.append(res)
            if on_done:
                on_done(res)
    except KeyboardInterrupt:
        running = [c.id for c, f in zip(cells, futures, strict=False) if f.running()]
        raise KeyboardInterrupt(f"cell {', '.join(running)} interrupted, not locked" if running else "") from None
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return results


OWNERS_FILE = "owners.json"


def owners_path(root: Path) -> Path:
    """``locks/owners.json``: which matrix file locked which cell ids, so that relocking one matrix never
    removes a lock another matrix made (several matrices may share one locks/ folder)."""
    return root / LOCK_DIR / OWNERS_FILE


def read_owners(root: Path) -> dict[str, list[str]]:
    path = owners_path(root)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, json.JSONDecodeError) as err:
        raise LockError(f"{path}: cannot read the lock owners: {err}") from None
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise LockError(f"{path}: not a lock owners file (expected {{matrix file: [cell ids]}})")
    return {str(k): [str(i) for i in v] for k, v in data.items()}


def record_owner(root: Path, matrix_name: str, ids: Iterable[str], *, replace: bool) -> None:
    """Note that ``matrix_name`` owns the locks ``ids``: exactly these after a full lock (``replace``), these
    added to its earlier ones after a partial lock. Written only when it changes."""
    owners = read_owners(root)
    mine = set(ids) if replace else set(owners.get(matrix_name, [])) | set(ids)
    if sorted(mine) == owners.get(matrix_name):
        return
    owners[matrix_name] = sorted(mine)
    path = owners_path(root)
    atomic_write_text(path, json.dumps(dict(sorted(owners.items())), indent=1) + "\n")


def stale_locks(root: Path, matrix_name: str, current: set[str]) -> tuple[list[Path], list[Path]]:
    """Locks no cell of this matrix has any more: (those this matrix made and no other matrix claims, which
    may be removed; the others, made by another matrix or by none on record, which are kept)."""
    owners = read_owners(root)
    mine = set(owners.get(matrix_name, []))
    others = {i for name, ids in owners.items() if name != matrix_name for i in ids}
    remove: list[Path] = []
    keep: list[Path] = []
    for path in sorted((root / LOCK_DIR).glob("*.txt")):
        if path.stem in current:
            continue
        (remove if path.stem in mine and path.stem not in others else keep).append(path)
    return remove, keep
