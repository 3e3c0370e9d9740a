"""Keeping every test away from the checkout's own state: what ``./dev`` (or a user) left in the repository's
``.pinmatrix/`` (the signing key pair, caches, the results store, the embedded registry's data) and its
``known-good.toml`` must never decide a test's outcome, or a test passes or fails by what ran before it on that
machine (issue 45: a key ``./dev`` wrote made a verify test fail on the developer's machine, never in CI).

tests/conftest.py runs each test in a stand-in root: every other top-level entry of the checkout linked in, so a
test that reads ``./matrix.toml``, ``smoke/`` or ``patches/`` relative to the working directory still finds
them, but with none of the state; and with the ``PINMATRIX_*`` settings of the caller's shell removed."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pinmatrix.paths import KNOWN_GOOD_FILE, STATE_DIR

CHECKOUT_STATE = frozenset({STATE_DIR.name, KNOWN_GOOD_FILE.name})
"""The top-level names of a project root that hold state, not inputs: never linked into a stand-in root."""
KEPT_SETTINGS = frozenset({
    "PINMATRIX_TEST_CACHE",  # the tests' own base-rootfs cache (conftest.build_cache)
    "PINMATRIX_UPDATE_DOCS",  # asks the documentation tests to rewrite their figures
    "PINMATRIX_CHROMIUM",  # where this machine's chromium is (a tool, not a project's state)
    "PINMATRIX_PODMAN_DRIVER",  # the storage driver this machine's kernel supports
    "PINMATRIX_CACHE",  # the per-user cache of downloaded tools (arch-scan's cuobjdump)
})
"""The ``PINMATRIX_*`` variables that describe the machine or the test run, kept; every other one (keys,
trusted keys, a command's option defaults) is removed for each test."""


def stand_in_root(checkout: Path, folder: Path) -> Path:
    """``folder`` made to look like ``checkout`` for everything but its state: a link to each top-level entry
    except those in CHECKOUT_STATE."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in checkout.iterdir():
        if entry.name not in CHECKOUT_STATE:
            (folder / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    return folder


def foreign_settings(environ: Mapping[str, str]) -> list[str]:
    """The ``PINMATRIX_*`` variables of ``environ`` a test must not inherit."""
    return sorted(k for k in environ if k.startswith("PINMATRIX_") and k not in KEPT_SETTINGS)
