"""The report's screenshot, taken by Chromium itself: ``chromium --headless --screenshot=PNG --window-size=W,H URL``
(Debian's ``chromium``; no browser download, no DevTools client of our own). Chromium loads the page, runs its
script, and writes the window's pixels; the page's first ``H`` pixels are the picture (the headless shell has no
full-page switch). Chromium runs with a profile of its own in a temporary folder, removed afterwards, and its
process group is stopped when it overruns its time."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import tempfile
from pathlib import Path

from pinmatrix.atomic import atomic_write_bytes
from pinmatrix.errors import PinmatrixError

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DEFAULT_HEIGHT = 2400  # CSS pixels of the page in the picture when no height is asked for
TIMEOUT_S = 120.0
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class BrowserError(PinmatrixError):
    """Chromium is missing, did not finish, or wrote no PNG."""


def find_chromium() -> str | None:
    explicit = os.environ.get("PINMATRIX_CHROMIUM")
    if explicit:
        return explicit if shutil.which(explicit) or Path(explicit).is_file() else None
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def screenshot_command(executable: str, url: str, png: Path, profile: Path, width: int, height: int) -> list[str]:
    """Chromium's own headless screenshot of ``url``: the window's size, one device pixel per CSS pixel, nothing
    fetched beside the page (no component updates, no background networking)."""
    args = [executable, "--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-extensions", "--hide-scrollbars", "--mute-audio", "--allow-file-access-from-files",
            "--force-device-scale-factor=1", f"--user-data-dir={profile}", f"--window-size={width},{height}",
            "--virtual-time-budget=10000", f"--screenshot={png}", url]
    if os.geteuid() == 0:  # Chromium refuses to run as root with its sandbox
        args.insert(1, "--no-sandbox")
    return args


def png_size(data: bytes) -> tuple[int, int]:
    """A PNG's (width, height) from its header; one error line when ``data`` is no PNG."""
    if data[:8] != PNG_MAGIC or data[12:16] != b"IHDR":
        raise BrowserError("chromium wrote no PNG")
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def screenshot_file(html: Path, png: Path, *, width: int = 1400, max_height: int | None = None,
                    suffix: str = "", executable: str | None = None) -> tuple[int, int]:
    """Open a report file in headless Chromium and save a screenshot of its first ``max_height`` (default
    ``DEFAULT_HEIGHT``) pixels; returns the picture's (width, height). ``suffix`` is appended to the file's URL
    (a query and/or a #fragment)."""
    exe = executable or find_chromium()
    if not exe:
        raise BrowserError("chromium not found (install Debian's chromium package or set PINMATRIX_CHROMIUM)")
    with tempfile.TemporaryDirectory(prefix="pinmatrix-chromium-") as scratch:
        shot = Path(scratch) / "shot.png"
        args = screenshot_command(exe, html.resolve().as_uri() + suffix, shot, Path(scratch) / "profile", width,
                                  max_height or DEFAULT_HEIGHT)
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise BrowserError(f"chromium did not write the screenshot within {TIMEOUT_S:.0f}s") from None
        try:  # a helper process chromium left behind
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if proc.returncode != 0 or not shot.is_file():
            tail = output.decode(errors="replace")[-300:].replace("\n", " ")
            raise BrowserError(f"chromium exited with status {proc.returncode} and no screenshot: {tail}")
        data = shot.read_bytes()
    size = png_size(data)
    atomic_write_bytes(png, data)
    return size
