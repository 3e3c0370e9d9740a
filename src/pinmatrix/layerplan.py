"""Split a cell's lock into image layers, most shared first, so cells that share a prefix share layers.

``images/layers.toml`` names the layers in order and the distributions each one roots (torch, triton,
xformers, ...). Every locked distribution goes to the first layer that reaches it from its roots through
the lock's dependency graph (uv's ``# via`` annotations) without crossing another layer's root; what no
layer reaches goes to the catch-all layer (``roots = ["*"]``). Each layer installs exactly its lines of the
lock, hashes included."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from pinmatrix.errors import PinmatrixError

_REQ_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?:==|===|@|;|\s|$)")


class LayerPlanError(PinmatrixError):
    """images/layers.toml or a lock file cannot be turned into layers."""


@dataclass(frozen=True)
class LockEntry:
    name: str  # canonical distribution name
    version: str
    text: str  # the requirement with its hashes, continuation lines joined: "six==1.17.0 --hash=sha256:..."
    via: tuple[str, ...]  # canonical names that require it ("-r requirements.in" is dropped)

    @property
    def hashes(self) -> tuple[str, ...]:
        return tuple(re.findall(r"--hash=(sha256:[0-9a-f]{64})", self.text))


@dataclass(frozen=True)
class ParsedLock:
    options: tuple[str, ...]  # global lines such as "--index-url ..."
    entries: tuple[LockEntry, ...]

    def by_name(self) -> dict[str, LockEntry]:
        return {e.name: e for e in self.entries}


@dataclass(frozen=True)
class LayerSpec:
    name: str
    roots: tuple[str, ...]  # canonical names; ("*",) = everything not claimed before


@dataclass(frozen=True)
class PackageLayer:
    index: int
    name: str
    entries: tuple[LockEntry, ...]

    def requirements(self, options: tuple[str, ...] = ()) -> list[str]:
        return [*options, *(e.text for e in self.entries)]


def parse_lock(text: str, source: str = "lock") -> ParsedLock:
    """Parse a ``uv pip compile --generate-hashes`` output (pip requirements format with ``# via`` notes)."""
    options: list[str] = []
    entries: list[LockEntry] = []
    current: list[str] | None = None
    via: list[str] = []
    in_via_block = False

    def flush() -> None:
        nonlocal current, via
        if current is None:
            return
        text_line = " ".join(part.strip() for part in current)
        m = _REQ_NAME.match(text_line)
        if not m:
            raise LayerPlanError(f"{source}: cannot read requirement {text_line[:60]!r}")
        version_m = re.search(r"===?\s*([^\s;\\]+)", text_line)
        entries.append(
            LockEntry(
                name=canonicalize_name(m.group(1)),
                version=version_m.group(1) if version_m else "",
                text=text_line,
                via=tuple(sorted(set(via))),
            )
        )
        current, via = None, []

    pending_continuation = False
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if pending_continuation and current is not None:
            current.append(stripped.rstrip("\\").strip())
            pending_continuation = stripped.endswith("\\")
            continue
        if not stripped:
            in_via_block = False
            continue
        if stripped.startswith("#"):
            note = stripped.lstrip("#").strip()
            if note.startswith("via"):
                rest = note[3:].strip()
                in_via_block = not rest
                if rest:
                    via.extend(_via_names(rest))
            elif in_via_block and raw.startswith(" "):
                via.extend(_via_names(note))
            else:
                in_via_block = False
            continue
        in_via_block = False
        if stripped.startswith("-") and not raw.startswith(" "):
            flush()
            options.append(stripped)
            continue
        flush()
        current = [stripped.rstrip("\\").strip()]
        pending_continuation = stripped.endswith("\\")
    flush()
    return ParsedLock(tuple(options), tuple(entries))


def _via_names(text: str) -> list[str]:
    names: list[str] = []
    for part in text.split(","):
        part = part.strip()
        if not part or part.startswith("-r") or part.startswith("-c") or " " in part:
            continue
        names.append(canonicalize_name(part))
    return names


def load_layer_specs(path: Path) -> list[LayerSpec]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LayerPlanError(f"{path}: the layer plan is missing") from None
    except tomllib.TOMLDecodeError as err:
        raise LayerPlanError(f"{path}: {err}") from None
    layers = data.get("layer")
    if not isinstance(layers, list) or not layers:
        raise LayerPlanError(f"{path}: needs at least one [[layer]] table")
    specs: list[LayerSpec] = []
    seen: set[str] = set()
    for i, item in enumerate(layers):
        name, roots = item.get("name"), item.get("roots")
        if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name) or name in seen:
            raise LayerPlanError(f"{path}: layer[{i}].name must be a unique lowercase name, got {name!r}")
        if not isinstance(roots, list) or not roots or not all(isinstance(r, str) for r in roots):
            raise LayerPlanError(f"{path}: layer[{i}] ({name}).roots must be a non-empty list of names")
        seen.add(name)
        specs.append(LayerSpec(name, tuple("*" if r == "*" else canonicalize_name(r) for r in roots)))
    if not any("*" in s.roots for s in specs):
        raise LayerPlanError(f"{path}: one layer must have roots = [\"*\"] to take what no other layer claims")
    return specs


def plan_layers(lock: ParsedLock, specs: list[LayerSpec]) -> list[PackageLayer]:
    """Assign every lock entry to one layer; return the non-empty layers in plan order."""
    by_name = lock.by_name()
    requires: dict[str, set[str]] = {name: set() for name in by_name}
    for entry in lock.entries:
        for parent in entry.via:
            if parent in requires:
                requires[parent].add(entry.name)
    claimed = {root for spec in specs for root in spec.roots if root != "*"}
    owner: dict[str, int] = {}
    for index, spec in enumerate(specs):
        if spec.roots == ("*",) or "*" in spec.roots:
            continue
        stack = [r for r in spec.roots if r in by_name and r not in owner]
        for root in stack:
            owner[root] = index
        while stack:
            node = stack.pop()
            for dep in sorted(requires[node]):
                if dep in owner or (dep in claimed and dep not in spec.roots):
                    continue
                owner[dep] = index
                stack.append(dep)
    catch_all = next(i for i, s in enumerate(specs) if "*" in s.roots)
    layers: list[PackageLayer] = []
    for index, spec in enumerate(specs):
        members = sorted(
            (e for e in lock.entries if owner.get(e.name, catch_all) == index), key=lambda e: e.name
        )
        if members:
            layers.append(PackageLayer(index, spec.name, tuple(members)))
    return layers
