"""An OCI image config as data: architecture and variant from a platform name, a fixed creation time, the
environment and labels as JSON strings, one history entry per layer naming what made it. Nothing here knows a
cell: image/cellconfig.py says what a cell's environment and labels are, and this module makes the document the
layout stores (``OCILayout.put_config``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def iso_time(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def oci_arch(platform: str) -> tuple[str, str | None]:
    """(architecture, variant) of a uv platform such as ``aarch64-manylinux_2_28``."""
    machine = platform.split("-", 1)[0]
    return {"x86_64": ("amd64", None), "aarch64": ("arm64", "v8")}.get(machine, (machine, None))


def image_config(*, platform: str, env: dict[str, str], labels: dict[str, str], diff_ids: Sequence[str],
                 history: Sequence[str], epoch: int, cmd: Sequence[str], base_env: Sequence[str] = ()) -> dict[str, Any]:
    """The OCI image config: architecture from ``platform``, fixed creation time, the base's env overridden by
    ``env`` and labels as data, ``cmd`` run in ``/``, one history entry per layer (``pinmatrix: WHAT``)."""
    arch, variant = oci_arch(platform)
    created = iso_time(epoch)
    merged = {k: v for k, _, v in (e.partition("=") for e in base_env)}
    merged.update(env)
    config: dict[str, Any] = {
        "architecture": arch,
        "os": "linux",
        "created": created,
        "config": {
            "Env": [f"{k}={v}" for k, v in merged.items()],
            "Labels": dict(sorted(labels.items())),
            "Cmd": list(cmd),
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": list(diff_ids)},
        "history": [{"created": created, "created_by": f"pinmatrix: {what}"} for what in history],
    }
    if variant:
        config["variant"] = variant
    return config
