"""The Containerfile path, kept for cells that must compile (a source patch built against the locked sdist):
every other cell is assembled as data by ``pinmatrix.image.assembly.assemble``.

The build context is rendered from ``images/Containerfile.j2`` and the layer plan (``images/layers.toml``):
the lock is split into package layers, patches and the smoke harness are copied in, labels and env go last.
The hash of everything that enters the build (the rendered Containerfile, every context file, the base
reference) is the ``io.pinmatrix.inputs`` label. The image is tagged with the cell id; when an image with
that tag and the same inputs is already in the local store or in the registry, nothing is built.

The manifest's annotations are those of an assembled image (``image.annotations.image_annotations``), handed to
the builder (podman/buildah ``--annotation``; Docker's classic builder has none). Like the assembled image's, they
are not inputs: an image found with the same inputs keeps the annotations of the build that made it (so does an
image whose every step buildah's layer cache holds)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shlex
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import jinja2

from pinmatrix.cell import Cell
from pinmatrix.engine import OCIEngine
from pinmatrix.engine.base import parse_step
from pinmatrix.errors import EngineError, PinmatrixError
from pinmatrix.hashing import sha256_bytes
from pinmatrix.image.annotations import image_annotations
from pinmatrix.image.assembly.rootfs import DEFAULT_SOURCE_DATE_EPOCH
from pinmatrix.image.cellconfig import (  # noqa: F401 - nvidia_require_cuda re-used by tests
    cell_env,
    cell_labels,
    nvidia_require_cuda,
)
from pinmatrix.image.containerfile.base_image import ensure_base_image
from pinmatrix.image.containerfile.layerplan import plan_layers
from pinmatrix.image.containerfile.patch_sources import resolve_patch
from pinmatrix.image.settings import BuildSettings, CellBuildResult, cell_build
from pinmatrix.imageref import ImageRef, image_ref
from pinmatrix.project.debian_suites import python_of, suite_of
from pinmatrix.project.layer_plan import load_layer_specs
from pinmatrix.project.lockfile import ParsedLock, parse_lock
from pinmatrix.project.smoke_bundle import shipped_file, smoke_bundle, smoke_files
from pinmatrix.registry.client import Registry

CONTAINERFILE_TEMPLATE = "Containerfile.j2"
LAYER_PLAN = "layers.toml"
PATCH_HELPER = "apply_patches.py"
SYSTEM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


class BuildError(PinmatrixError):
    """A cell cannot be built; the message names the cell and the reason."""


@dataclass(frozen=True)
class RenderedCell:
    cell: Cell
    ref: str
    context: Path
    inputs: str
    labels: dict[str, str]
    layers: tuple[str, ...]
    annotations: dict[str, str]  # the manifest's (image_annotations), not inputs


def _docker_quote(value: object) -> str:
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("\n", " ")
    return f'"{text}"'


def _environment(images_dir: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(images_dir)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["shell"] = lambda v: shlex.quote("" if v is None else str(v))
    env.filters["docker_quote"] = _docker_quote
    return env


def ca_certificate_files(paths: Sequence[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.glob("*.crt") if p.is_file()))
        elif path.is_file():
            files.append(path)
        else:
            raise BuildError(f"matrix.ca_certificates: {path} does not exist")
    names = [f.name for f in files]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise BuildError(f"matrix.ca_certificates: two certificates are named {dupes[0]}")
    return files


def pip_conf(cell: Cell) -> str:
    lines = ["[global]", f"cert = {SYSTEM_CA_BUNDLE}"]
    default = [i for i in cell.indexes if i.default]
    extra = [i for i in cell.indexes if not i.default and not i.explicit]
    if default:
        lines.append(f"index-url = {default[0].url}")
    if extra:
        lines.append("extra-index-url = " + " ".join(i.url for i in extra))
    return "\n".join(lines) + "\n"


def _hash_tree(directory: Path, digest: "hashlib._Hash") -> None:
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        digest.update(rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())


def _write(path: Path, data: bytes, epoch: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (epoch, epoch))


def check_python(cell: Cell) -> None:
    if cell.base.kind != "mmdebstrap":
        return
    suite = suite_of(cell.base.suite)
    have = python_of(suite)
    if have and have != cell.python:
        raise BuildError(
            f"cell {cell.id} ({cell.name}) needs Python {cell.python} but the Debian {suite} base has {have}; "
            f"set the stack's python to {have} or use a base image with Python {cell.python}"
        )


def render_cell(cell: Cell, lock_text: str, base_ref: str, settings: BuildSettings, context: Path) -> RenderedCell:
    """Write the build context of ``cell`` into ``context`` (emptied first) and return what was rendered."""
    check_python(cell)
    epoch = cell.base.source_date_epoch if cell.base.source_date_epoch is not None else DEFAULT_SOURCE_DATE_EPOCH
    if context.exists():
        shutil.rmtree(context)
    context.mkdir(parents=True)
    images = settings.images_dir
    lock = parse_lock(lock_text, source=f"locks/{cell.id}.txt")
    if not lock.entries:
        raise BuildError(f"cell {cell.id} ({cell.name}): its lock lists no packages")
    layers = plan_layers(lock, load_layer_specs(images / LAYER_PLAN))
    layer_views = [
        {
            "name": layer.name,
            "entries": layer.entries,
            "file": f"{layer.index:02d}-{layer.name}.txt",
            "lines": [shlex.quote(line) for line in layer.requirements(lock.options)],
        }
        for layer in layers
    ]
    certs = [
        {"name": f.name if f.name.endswith(".crt") else f"{f.name}.crt", "b64": base64.b64encode(f.read_bytes()).decode()}
        for f in ca_certificate_files(settings.ca_certificates)
    ]

    plan_entries = _write_patches(cell, lock, settings, context, epoch)
    smoke_src = settings.smoke_dir if settings.smoke_dir is not None else settings.root / "smoke"
    smoke = bool(smoke_files(smoke_src))
    for name, path in smoke_bundle(smoke_src) if smoke else []:
        _write(context / "smoke" / name, path.read_bytes(), epoch)

    layer_names: list[str] = ["base", "python", *(str(layer["name"]) for layer in layer_views)]
    if plan_entries:
        layer_names.append("patches")
    if smoke:
        layer_names.append("smoke")
    lock_sha = sha256_bytes(lock_text.encode())
    labels = cell_labels(cell, base=base_ref, lock_sha=lock_sha, layers=layer_names, epoch=epoch)
    template = _environment(images).get_template(CONTAINERFILE_TEMPLATE)

    def render(label_map: dict[str, str]) -> str:
        return template.render(
            cell=cell,
            base_ref=base_ref,
            ca_certificates=certs,
            pip_conf_b64=base64.b64encode(pip_conf(cell).encode()).decode(),
            layers=layer_views,
            patches=bool(plan_entries),
            torch_cuda_arch_list=cell.torch_cuda_arch_list or "",
            flashinfer_cuda_arch_list=cell.flashinfer_cuda_arch_list or "",
            smoke=smoke,
            env=sorted(cell_env(cell).items()),
            labels=sorted(label_map.items()),
        )

    digest = hashlib.sha256(render(labels).encode())
    _hash_tree(context, digest)
    inputs = digest.hexdigest()
    labels["io.pinmatrix.inputs"] = inputs
    _write(context / "Containerfile", render(labels).encode(), epoch)
    return RenderedCell(cell, image_ref(cell, settings.registry), context, inputs, labels, tuple(layer_names),
                        image_annotations(cell, settings.origin, epoch))


def build_cell(
    cell: Cell,
    lock_text: str,
    engine: OCIEngine,
    settings: BuildSettings,
    *,
    registry: Registry | None = None,
    on_step: Callable[[str], None] = lambda layer: None,
) -> CellBuildResult:
    """Build (or find) the image of ``cell``. Failures become a ``failed`` result with a one-line reason;
    they never raise, so one cell cannot stop the others."""
    ref = image_ref(cell, settings.registry)
    lines: list[str] = []
    first = f"# pinmatrix build of cell {cell.id} ({cell.name}) with {engine.name}: {ref}"
    with cell_build(cell, settings, first, keep=lines) as (result, note):
        on_step("base")
        base_ref = ensure_base_image(cell.base, engine, settings.cache_dir, platform=cell.platform,
                                     layout_dir=settings.layout)
        note(f"# base image {base_ref}")
        rendered = render_cell(cell, lock_text, base_ref, settings, settings.cache_dir / "contexts" / cell.id)
        result.layers = list(rendered.layers)
        note(f"# inputs {rendered.inputs}; layers {', '.join(rendered.layers)}")
        local = engine.inspect(ref)
        if local is not None and local.labels.get("io.pinmatrix.inputs") == rendered.inputs:
            result.status, result.cached_in, result.image_id = "cached", "local", local.id
            note(f"# cached: {ref} is in the local store with the same inputs ({local.id})")
        elif local is not None:
            note(f"# {ref} is in the local store with other inputs: rebuilding")
        if registry is not None and (settings.push or (result.status != "cached" and settings.check_registry)):
            remote = _remote_inputs(registry, ref, note)
            if remote is not None and remote[1] == rendered.inputs:
                result.digest = remote[0]
                if result.status != "cached":
                    result.status, result.cached_in = "cached", "registry"
                note(f"# in the registry with the same inputs: {ref}@{remote[0]}")
        if result.status != "cached":

            def sink(line: str) -> None:
                note(line)
                step = parse_step(line)
                if step:
                    on_step(layer_of(step[2]))

            epoch = cell.base.source_date_epoch if cell.base.source_date_epoch is not None else DEFAULT_SOURCE_DATE_EPOCH
            try:
                built = engine.build(rendered.context, ref, source_date_epoch=epoch, sink=sink,
                                     annotations=rendered.annotations)
            except EngineError as err:
                raise BuildError(failure_reason(lines, str(err))) from None
            result.status, result.image_id = "built", built.image_id
            note(f"# built {ref}: {built.image_id} in {built.seconds:.1f}s")
        if settings.push and registry is not None and result.digest is None:
            on_step("push")
            result.digest = engine.push(ref, tls_verify=registry.tls_verify)
            note(f"# pushed {ref}@{result.digest}")
    return result


def _write_patches(cell: Cell, lock: ParsedLock, settings: BuildSettings, context: Path, epoch: int) -> list[dict[str, object]]:
    """The cell's patches into ``context/patches`` with their plan (what the in-cell helper applies); the plan."""
    plan_entries = []
    by_name = lock.by_name()
    for patch in cell.patches:
        entry: dict[str, object] = {
            "id": patch.id, "package": patch.package, "version": patch.version, "kind": patch.kind,
            "status": patch.status, "note": patch.note, "strip": 1,
        }
        if patch.status == "apply":
            resolved = resolve_patch(patch, settings.root, settings.cache_dir)
            name = f"{patch.id}.patch"
            _write(context / "patches" / name, resolved.path.read_bytes(), epoch)
            entry.update(file=name, sha256=patch.sha256)
            if patch.kind == "source":
                locked = by_name.get(re.sub(r"[-_.]+", "-", patch.package).lower())
                if locked is None:
                    raise BuildError(f"cell {cell.id}: source patch {patch.id} targets {patch.package}, which is not in the lock")
                entry["requirement"] = locked.text
        plan_entries.append(entry)
    if plan_entries:
        _write(context / "patches" / "plan.json",
               (json.dumps({"patches": plan_entries}, indent=1, sort_keys=True) + "\n").encode(), epoch)
        _write(context / "patches" / PATCH_HELPER, shipped_file(PATCH_HELPER).read_bytes(), epoch)
    return plan_entries


def layer_of(instruction: str) -> str:
    """Which layer of the plan a build step belongs to (for progress displays)."""
    m = re.search(r"/pinmatrix/layers/\d\d-([a-z0-9-]+)\.txt", instruction)
    if m:
        return m.group(1)
    head = instruction.split(None, 1)[0].upper() if instruction.strip() else ""
    if head == "FROM":
        return "base"
    if "ca-certificates" in instruction:
        return "python"
    if "patches" in instruction:
        return "patches"
    if "smoke" in instruction:
        return "smoke"
    return "config" if head in {"ENV", "LABEL"} else head.lower()


_FAILURE_PATTERNS = (
    re.compile(r"pinmatrix: patch .*(?:does not apply|refused).*"),
    re.compile(r"ERROR: (?:THESE PACKAGES DO NOT MATCH THE HASHES|Could not find a version|No matching distribution).*"),
    re.compile(r"AssertionError: image python .*"),
)


def failure_reason(log_lines: Sequence[str], fallback: str) -> str:
    for pattern in _FAILURE_PATTERNS:
        for line in reversed(log_lines):
            m = pattern.search(line)
            if m:
                return m.group(0).strip()
    return fallback


def _remote_inputs(registry: Registry, ref: str, note: Callable[[str], None]) -> tuple[str, str] | None:
    """(digest, inputs label) of ``ref`` in the registry, or None when absent or unreachable."""
    parsed = ImageRef.parse(ref)
    repository, tag = parsed.repository, parsed.reference
    if parsed.registry != registry.host:
        return None
    try:
        found = registry.manifest_digest(repository, tag)
        if found is None:
            return None
        labels = registry.labels(repository, found)
    except PinmatrixError as err:
        note(f"# registry not consulted: {err}")
        return None
    return found, labels.get("io.pinmatrix.inputs", "")
