"""A fake ``nvidia-smi`` on PATH that replays a host's output from tests/data/nvidia-smi: ``<host>-query.csv`` for
pinmatrix's GPU query, ``<host>-banner.txt`` for a plain call, and exit status 6 ("no devices") for anything else,
so a changed argument list fails the test instead of passing on stale output."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from pinmatrix.hostprobe import QUERY_ARGS

SMI_DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi"
HOSTS = ("gb10-580.142", "gb10-590.48.01", "gb10-595.58.03", "h200-580.159.04")


def install_fake_smi(bin_dir: Path, monkeypatch: pytest.MonkeyPatch, host: str | None = None, *,
                     query: str | None = None, banner: str | None = None) -> Path:
    """Put a fake nvidia-smi first on PATH. ``host`` names a recorded pair; ``query`` / ``banner`` give the text
    instead (None with no host: the call fails)."""
    if host is not None:
        query = (SMI_DATA / f"{host}-query.csv").read_text()
        banner = (SMI_DATA / f"{host}-banner.txt").read_text()
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "nvidia-smi"
    exe.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"query, banner = {query!r}, {banner!r}\n"
        f"if sys.argv[1:] == {list(QUERY_ARGS)!r} and query is not None:\n    sys.stdout.write(query)\n"
        "elif not sys.argv[1:] and banner is not None:\n    sys.stdout.write(banner)\n"
        "else:\n    sys.exit(6)\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return exe


def no_smi(empty_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH with no nvidia-smi on it (and nothing else)."""
    empty_dir.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("PATH", str(empty_dir))
