"""Apply installed-tree patches (unified diffs, ``-p1`` from a site-packages root) to a directory.

Order of work, for every patch: check its sha256 against the matrix (refuse a mismatch), dry-run every
hunk of every file in memory, then write. A patch whose every hunk is already present (it reverses
cleanly) is reported as "already-applied" and nothing is written. A hunk that fits neither way is named
in the error (file, hunk number and its ``@@`` header). Hunks must match exactly (no fuzz); like GNU
patch they may sit at an offset from the line numbers in their header.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pinmatrix.atomic import atomic_path
from pinmatrix.errors import PatchError
from pinmatrix.hashing import sha256_file

_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
NO_NEWLINE = "\\ No newline at end of file"


@dataclass(frozen=True)
class Hunk:
    header: str
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: tuple[tuple[str, str], ...]  # (" " | "-" | "+", text with its line ending)

    @property
    def old_lines(self) -> list[str]:
        return [t for tag, t in self.lines if tag in " -"]

    @property
    def new_lines(self) -> list[str]:
        return [t for tag, t in self.lines if tag in " +"]


@dataclass(frozen=True)
class FilePatch:
    old_path: str  # as written in the diff, "/dev/null" for a new file
    new_path: str
    hunks: tuple[Hunk, ...]

    def target(self, strip: int) -> str:
        path = self.new_path if self.old_path == "/dev/null" else self.old_path
        return strip_components(path, strip)

    @property
    def creates(self) -> bool:
        return self.old_path == "/dev/null"

    @property
    def deletes(self) -> bool:
        return self.new_path == "/dev/null"


Outcome = Literal["applied", "already-applied", "would-apply"]


@dataclass
class PatchResult:
    patch: str
    outcome: Outcome
    files: list[str] = field(default_factory=list)
    offsets: dict[str, list[int]] = field(default_factory=dict)  # file -> line offset of each hunk

    def summary(self) -> str:
        return f"{self.patch}: {self.outcome} ({', '.join(self.files)})"




def strip_components(path: str, strip: int) -> str:
    path = path.split("\t", 1)[0].strip()
    parts = [p for p in path.split("/") if p]
    if strip >= len(parts):
        raise PatchError(f"cannot strip {strip} leading components from {path!r}")
    return "/".join(parts[strip:])


def parse_patch(text: str, name: str = "<patch>") -> list[FilePatch]:
    """Parse a unified diff. Text before the first ``--- `` line (a description header) is ignored."""
    lines = text.splitlines(keepends=True)
    files: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old_path = line[4:].rstrip("\r\n").split("\t", 1)[0]
            new_path = lines[i + 1][4:].rstrip("\r\n").split("\t", 1)[0]
            i += 2
            hunks: list[Hunk] = []
            while i < len(lines) and lines[i].startswith("@@"):
                hunk, i = _parse_hunk(lines, i, name, new_path)
                hunks.append(hunk)
            if not hunks:
                raise PatchError(f"{name}: file {new_path} has no hunks")
            files.append(FilePatch(old_path, new_path, tuple(hunks)))
            continue
        i += 1
    if not files:
        raise PatchError(f"{name}: no unified diff found")
    return files


def _parse_hunk(lines: list[str], i: int, name: str, path: str) -> tuple[Hunk, int]:
    header = lines[i].rstrip("\r\n")
    m = _HUNK_RE.match(header)
    if not m:
        raise PatchError(f"{name}: malformed hunk header {header!r} in {path}")
    old_start, new_start = int(m.group(1)), int(m.group(3))
    old_len = int(m.group(2)) if m.group(2) is not None else 1
    new_len = int(m.group(4)) if m.group(4) is not None else 1
    i += 1
    body: list[tuple[str, str]] = []
    old_seen = new_seen = 0
    while i < len(lines) and (old_seen < old_len or new_seen < new_len):
        raw = lines[i]
        tag = raw[:1]
        if raw.rstrip("\r\n") == "":  # an empty context line whose leading space was stripped
            tag, raw = " ", " " + raw
        if tag not in " -+":
            raise PatchError(f"{name}: hunk {header} of {path} ends early at line {i + 1}")
        body.append((tag, raw[1:]))
        old_seen += tag in " -"
        new_seen += tag in " +"
        i += 1
        if i < len(lines) and lines[i].startswith(NO_NEWLINE):
            t, text = body[-1]
            body[-1] = (t, text.rstrip("\r\n"))
            i += 1
    if old_seen != old_len or new_seen != new_len:
        raise PatchError(f"{name}: hunk {header} of {path} is truncated")
    while i < len(lines) and lines[i].startswith(NO_NEWLINE):
        i += 1
    return Hunk(header, old_start, old_len, new_start, new_len, tuple(body)), i


def _find(haystack: list[str], needle: list[str], hint: int, floor: int) -> int | None:
    """Index where ``needle`` occurs in ``haystack`` at or after ``floor``, closest to ``hint``."""
    if not needle:
        return max(floor, min(hint, len(haystack)))
    limit = len(haystack) - len(needle)
    hint = max(floor, min(hint, limit))
    for delta in range(0, max(limit - floor, 0) + 1):
        for pos in (hint - delta, hint + delta) if delta else (hint,):
            if floor <= pos <= limit and haystack[pos:pos + len(needle)] == needle:
                return pos
    return None


def _apply_hunks(content: list[str], hunks: Iterable[Hunk], reverse: bool) -> tuple[list[str], list[int]] | int:
    """Apply hunks in order; returns (new content, offsets) or the 1-based number of the first hunk
    that does not fit."""
    out: list[str] = []
    pos = 0
    offsets: list[int] = []
    for number, hunk in enumerate(hunks, start=1):
        old, new = (hunk.new_lines, hunk.old_lines) if reverse else (hunk.old_lines, hunk.new_lines)
        start = (hunk.new_start if reverse else hunk.old_start) - 1
        if not old:  # pure insertion: the header names the line after which it goes
            start += 1
        at = _find(content, old, start, pos)
        if at is None:
            return number
        offsets.append(at - start)
        out.extend(content[pos:at])
        out.extend(new)
        pos = at + len(old)
    out.extend(content[pos:])
    return out, offsets


@dataclass
class _Planned:
    target: Path
    rel: str
    new_text: str | None  # None: delete
    offsets: list[int]


def plan_patch(patch_path: Path, root: Path, *, strip: int = 1) -> tuple[Outcome, list[_Planned]]:
    """Dry run: decide, without writing, whether the patch applies, is already applied, or fails."""
    patch_path = Path(patch_path)
    files = parse_patch(patch_path.read_text(encoding="utf-8"), patch_path.name)
    forward: list[_Planned] = []
    forward_failure: str | None = None
    reverse_ok = True
    for fp in files:
        rel = fp.target(strip)
        target = Path(root) / rel
        if fp.creates:
            if target.exists():
                existing = target.read_text(encoding="utf-8").splitlines(keepends=True)
                reverse_ok &= existing == fp.hunks[0].new_lines
                forward_failure = forward_failure or f"{rel}: file to be created already exists"
            else:
                reverse_ok = False
                forward.append(_Planned(target, rel, "".join(fp.hunks[0].new_lines), [0]))
            continue
        if not target.is_file():
            raise PatchError(f"{patch_path.name}: {rel} not found under {root}")
        content = target.read_text(encoding="utf-8").splitlines(keepends=True)
        fwd = _apply_hunks(content, fp.hunks, reverse=False)
        rev = _apply_hunks(content, fp.hunks, reverse=True)
        if isinstance(rev, int):
            reverse_ok = False
        if isinstance(fwd, int):
            hunk = fp.hunks[fwd - 1]
            forward_failure = forward_failure or f"{rel}: hunk #{fwd} ({hunk.header}) does not apply"
            continue
        new_content, offsets = fwd
        forward.append(_Planned(target, rel, None if fp.deletes else "".join(new_content), offsets))
    if forward_failure is None:
        return "would-apply", forward
    if reverse_ok:
        return "already-applied", []
    raise PatchError(f"{patch_path.name}: {forward_failure} under {root}")


def apply_patch(
    patch_path: Path,
    root: Path,
    *,
    strip: int = 1,
    expected_sha256: str | None = None,
    dry_run: bool = False,
) -> PatchResult:
    """Check the sha256, dry-run, then (unless ``dry_run``) write every file atomically."""
    patch_path = Path(patch_path)
    if not patch_path.is_file():
        raise PatchError(f"patch file {patch_path} not found")
    if expected_sha256 is not None:
        actual = sha256_file(patch_path)
        if actual != expected_sha256.removeprefix("sha256:"):
            raise PatchError(
                f"{patch_path}: sha256 {actual} does not match the matrix's {expected_sha256}; refusing to apply"
            )
    outcome, planned = plan_patch(patch_path, Path(root), strip=strip)
    result = PatchResult(patch=patch_path.name, outcome=outcome, files=[p.rel for p in planned])
    result.offsets = {p.rel: p.offsets for p in planned}
    if outcome == "already-applied":
        result.files = [fp.target(strip) for fp in parse_patch(patch_path.read_text(encoding="utf-8"))]
        return result
    if dry_run:
        return result
    for p in planned:
        _write(p)
    result.outcome = "applied"
    return result


def _write(p: _Planned) -> None:
    if p.new_text is None:
        p.target.unlink()
        return
    mode = stat.S_IMODE(p.target.stat().st_mode) if p.target.exists() else 0o644
    with atomic_path(p.target) as tmp:
        tmp.write_text(p.new_text, encoding="utf-8")
        os.chmod(tmp, mode)  # the patched file keeps its mode, whatever the umask
    # A stale bytecode cache would keep serving the unpatched module on some filesystems.
    cache = p.target.parent / "__pycache__"
    if p.target.suffix == ".py" and cache.is_dir():
        for pyc in cache.glob(f"{p.target.stem}.*.pyc"):
            pyc.unlink(missing_ok=True)
