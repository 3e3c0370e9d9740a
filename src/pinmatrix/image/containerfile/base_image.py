"""The base as an image in an engine's store, for the Containerfile path (cells with a source patch, whose
FROM needs an image): the hermetic base layer(s) of ``rootfs`` plus the packages that path runs (venv, GNU
patch, CA certificates), with a config written as data, stored in the OCI layout and loaded into the engine.
The image id is the config digest, the same on docker and podman and on every machine with the same inputs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pinmatrix.cell import BaseSpec
from pinmatrix.engine import OCIEngine
from pinmatrix.image.assembly.rootfs import DEFAULT_SOURCE_DATE_EPOCH, debian_base, pinned_base
from pinmatrix.image.load_push import load_into_engine
from pinmatrix.oci.config import DEFAULT_PATH, iso_time, oci_arch
from pinmatrix.oci.layout import OCILayout
from pinmatrix.project.debian_suites import suite_of

BASE_REPOSITORY = "localhost/pinmatrix-base"
# What RUN steps of images/Containerfile.j2 use on top of Python: venv and its pip wheel, GNU patch, CA tools.
CONTAINERFILE_PACKAGES: tuple[str, ...] = ("ca-certificates", "patch", "python3", "python3-venv")


def ensure_base_image(spec: BaseSpec, engine: OCIEngine, cache_dir: Path, *,
                      platform: str = "x86_64-manylinux_2_28", layout_dir: Path | None = None) -> str:
    """The reference of the base in ``engine``'s store (loaded now unless it is there)."""
    layout = OCILayout(layout_dir or cache_dir / "oci").init()
    log = cache_dir / "logs" / "base.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if spec.kind == "image":
        base = pinned_base(spec, platform, layout)
        suite = ""
    else:
        spec = replace(spec, packages=tuple(sorted(set(spec.packages) | set(CONTAINERFILE_PACKAGES))))
        base = debian_base(spec, platform, layout, cache_dir, log)
        suite = suite_of(spec.suite)
    epoch = spec.source_date_epoch if spec.source_date_epoch is not None else DEFAULT_SOURCE_DATE_EPOCH
    arch, variant = oci_arch(platform)
    config = {
        "architecture": arch, "os": "linux", "created": iso_time(epoch),
        "config": {"Env": list(base.env) or [f"PATH={DEFAULT_PATH}"], "Cmd": ["/bin/bash"],
                   "Labels": {"io.pinmatrix.base.inputs": base.key, "io.pinmatrix.base.suite": suite,
                              "io.pinmatrix.base.packages": ",".join(spec.packages),
                              "org.opencontainers.image.created": iso_time(epoch)}},
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in base.layers]},
        "history": [{"created": iso_time(epoch), "created_by": f"pinmatrix: base {base.name}"} for _ in base.layers],
    }
    if variant:
        config["variant"] = variant
    ref = f"{BASE_REPOSITORY}:{base.key[:16]}"
    layout.put_manifest(ref, layout.put_config(config), base.layers)
    stored = layout.image(ref)
    assert stored is not None
    load_into_engine(layout, stored, engine)
    return ref
