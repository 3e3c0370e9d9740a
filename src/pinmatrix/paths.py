"""Where pinmatrix keeps things by default, defined once: the project root, its private state folder
(``.pinmatrix/``), the promotion record and the signing key pair. Every command's default reads these names,
so ``./dev``, the README and ``--help`` agree on one place for each."""

from __future__ import annotations

from pathlib import Path

MATRIX_FILE = "matrix.toml"
STATE_DIR = Path(".pinmatrix")
"""Relative to the project root: caches, logs, results, the podman store, the embedded registry, keys."""
KNOWN_GOOD_FILE = Path("known-good.toml")
"""Relative to the project root (next to matrix.toml): the promotion record `promote` writes and `pull` reads.
A project that promotes to a shared registry commits it."""
KEY_PREFIX = STATE_DIR / "keys" / "signing"
"""`pinmatrix keygen` writes KEY_PREFIX.key (private, mode 0600) and KEY_PREFIX.pub beside it."""
SIGNING_KEY = KEY_PREFIX.with_suffix(".key")
PUBLIC_KEY = KEY_PREFIX.with_suffix(".pub")


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
