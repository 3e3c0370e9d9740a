"""The ``[matrix]`` head the upgrade tests' small matrices share: a project named "t" on Python 3.13 over a
trixie mmdebstrap base (``head(platform=...)`` pins the platform too)."""

from __future__ import annotations


def head(platform: str | None = None) -> str:
    """The ``[matrix]`` and ``[matrix.base]`` tables, ending in a newline."""
    pinned = f'platform = "{platform}"\n' if platform else ""
    return f'[matrix]\nname = "t"\npython = "3.13"\n{pinned}[matrix.base]\nkind = "mmdebstrap"\nsuite = "trixie"\n'
