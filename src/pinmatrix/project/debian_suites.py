"""The Debian suites a hermetic base can be made from, and the Python each one carries: the one table that
matrix validation, the data-path base, the Containerfile path and the SBOM read."""

from __future__ import annotations

DEFAULT_SUITE = "trixie"
DEBIAN_PYTHON = {"bullseye": "3.9", "bookworm": "3.11", "trixie": "3.13", "forky": "3.13"}
# The names Debian's archive serves suites under: a host apt source naming one of them is a Debian mirror (an
# Ubuntu or other archive names its own, and does not serve Debian's suites).
DEBIAN_ARCHIVE_SUITES = frozenset({*DEBIAN_PYTHON, "buster", "duke", "oldoldstable", "oldstable", "stable", "testing",
                                   "unstable", "sid", "experimental"})


def suite_of(suite: str | None) -> str:
    """The suite a base uses: its own, else the default."""
    return suite or DEFAULT_SUITE


def python_of(suite: str | None) -> str | None:
    """The Python of a suite's ``python3`` (None for a suite pinmatrix does not know)."""
    return DEBIAN_PYTHON.get(suite_of(suite))


def known_suites() -> str:
    """``bullseye (3.9), bookworm (3.11), ...`` for messages."""
    return ", ".join(f"{s} ({p})" for s, p in DEBIAN_PYTHON.items())
