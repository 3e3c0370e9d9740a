"""Where pinmatrix keeps things by default, defined once: the project root, its private state folder
(``.pinmatrix/``) and each folder and file inside it (caches, logs, the OCI layout, the results store, the
embedded registry, the signing key pair), and the promotion record. Every default in the package and every
``--help`` text names these; no other module spells the state folder (tests/unit/test_paths.py checks it)."""

from __future__ import annotations

from pathlib import Path

MATRIX_FILE = "matrix.toml"
STATE_DIR = Path(".pinmatrix")
"""Relative to the project root: caches, logs, results, the podman store, the embedded registry, keys."""
KNOWN_GOOD_FILE = Path("known-good.toml")
"""Relative to the project root (next to matrix.toml): the promotion record `promote` writes and `pull` reads.
A project that promotes to a shared registry commits it."""
CACHE_DIR = STATE_DIR / "cache"
"""The builder's cache: wheels, layer records, base root filesystems, Containerfile contexts."""
LOGS_DIR = STATE_DIR / "logs"
"""Per-run smoke and probe logs (``RUN_ID/CELL/SMOKE.log``)."""
BUILD_LOGS_DIR = LOGS_DIR / "build"
OCI_DIR = STATE_DIR / "oci"
"""The OCI image layout ``build --engine none`` writes and the chroot runtime, arch-scan and bundle read."""
ROOTS_DIR = STATE_DIR / "roots"
"""Where the chroot runtime unpacks images."""
OVERLAY_DIR = STATE_DIR / "overlay"
"""Where a cell's overlay venv is made on the host."""
KERNEL_CACHE_DIR = STATE_DIR / "kernel-cache"
"""The kernel cache mounted into each smoke (Triton, FlashInfer, TorchInductor), per image digest."""
RESULTS_FILE = STATE_DIR / "results.sqlite"
REPORT_DIR = STATE_DIR / "report"
REGISTRY_DIR = STATE_DIR / "registry"
"""The embedded registry: its config and pidfile, its blobs in ``data/``."""
SLURM_DIR = STATE_DIR / "slurm"
BISECT_DIR = STATE_DIR / "bisect"
"""Bisect locks, venvs and build logs."""
PODMAN_DIR = STATE_DIR / "podman"
"""The project's own containers-storage configuration, when the user and the system have none."""
KEY_PREFIX = STATE_DIR / "keys" / "signing"
"""`pinmatrix keygen` writes KEY_PREFIX.key (private, mode 0600) and KEY_PREFIX.pub beside it."""
SIGNING_KEY = KEY_PREFIX.with_suffix(".key")
PUBLIC_KEY = KEY_PREFIX.with_suffix(".pub")
HOST_KEY_PREFIX = STATE_DIR / "keys" / "host"
"""`pinmatrix keygen --host` writes a GPU host's pair: HOST_KEY_PREFIX.key signs its results, .pub is trusted."""
HOST_KEY = HOST_KEY_PREFIX.with_suffix(".key")


def project_root(start: Path | None = None) -> Path:
    """The nearest folder at or above ``start`` (default: the working directory) that holds matrix.toml; the
    working directory itself when none does."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / MATRIX_FILE).is_file():
            return folder
    return here


def state_dir(root: Path | None = None) -> Path:
    return (root or project_root()) / STATE_DIR


def known_good_file(root: Path | None = None) -> Path:
    return (root or project_root()) / KNOWN_GOOD_FILE


def signing_key(root: Path | None = None) -> Path:
    return (root or project_root()) / SIGNING_KEY


def public_key(root: Path | None = None) -> Path:
    return (root or project_root()) / PUBLIC_KEY
