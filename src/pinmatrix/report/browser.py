"""Headless Chromium over the DevTools protocol: open the report, run script in it, take a screenshot.

A deliberately small CDP client (one page target, synchronous request/response over one websocket) so the
report can be checked and photographed with Debian's ``chromium`` alone: no Playwright browser download.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from pinmatrix.atomic import atomic_write_bytes
from pinmatrix.errors import PinmatrixError

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class BrowserError(PinmatrixError):
    """Chromium is missing, did not start, or a page script failed."""


def find_chromium() -> str | None:
    explicit = os.environ.get("PINMATRIX_CHROMIUM")
    if explicit:
        return explicit if shutil.which(explicit) or Path(explicit).is_file() else None
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class Chromium:
    """One headless Chromium process with one page. Use as a context manager."""

    def __init__(self, executable: str | None = None, *, width: int = 1400, height: int = 900,
                 start_timeout: float = 30.0) -> None:
        exe = executable or find_chromium()
        if not exe:
            raise BrowserError("chromium not found (install Debian's chromium package or set PINMATRIX_CHROMIUM)")
        self.executable = exe
        self.width, self.height = width, height
        self.start_timeout = start_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._profile: str | None = None
        self._ws: Any = None
        self._ids = itertools.count(1)
        self._events: list[dict[str, Any]] = []
        self.console: list[str] = []

    # -- lifecycle ----------------------------------------------------------------------------------
    def __enter__(self) -> Chromium:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        import websocket  # noqa: PLC0415 - websocket-client, needed only for --screenshot

        self._profile = tempfile.mkdtemp(prefix="pinmatrix-chromium-")
        args = [
            self.executable, "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--disable-extensions", "--hide-scrollbars", "--mute-audio",
            "--allow-file-access-from-files", f"--user-data-dir={self._profile}", "--remote-debugging-port=0",
            "--remote-allow-origins=*", f"--window-size={self.width},{self.height}", "about:blank",
        ]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")
        log = open(Path(self._profile) / "chromium.log", "wb")  # noqa: SIM115 - closed with the process
        self._proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True)
        log.close()
        port_file = Path(self._profile) / "DevToolsActivePort"
        deadline = time.monotonic() + self.start_timeout
        port = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise BrowserError(f"chromium exited with status {self._proc.returncode} at start: {self._log_tail()}")
            if port_file.is_file():
                lines = port_file.read_text().splitlines()
                if lines and lines[0].strip().isdigit():
                    port = int(lines[0])
                    break
            time.sleep(0.05)
        if port is None:
            self.close()
            raise BrowserError(f"chromium did not open its DevTools port within {self.start_timeout:.0f}s")
        target = self._page_target(port, deadline)
        self._ws = websocket.create_connection(target, timeout=60, suppress_origin=True)
        self.send("Page.enable")
        self.send("Runtime.enable")

    def _page_target(self, port: int, deadline: float) -> str:
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as resp:
                    targets = json.load(resp)
            except OSError:
                time.sleep(0.1)
                continue
            for t in targets:
                if t.get("type") == "page" and t.get("webSocketDebuggerUrl"):
                    return str(t["webSocketDebuggerUrl"])
            time.sleep(0.1)
        raise BrowserError("chromium started but offered no page target")

    def _log_tail(self) -> str:
        try:
            return (Path(self._profile or "") / "chromium.log").read_text(errors="replace")[-400:].replace("\n", " ")
        except OSError:
            return ""

    def close(self) -> None:
        if self._ws is not None:
            try:
                self._ws.close()
            except Exception:  # noqa: BLE001 - best effort on shutdown
                pass
            self._ws = None
        if self._proc is not None:
            if self._proc.poll() is None:
                try:
                    os.killpg(self._proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(self._proc.pid, signal.SIGKILL)
                    self._proc.wait(timeout=10)
            self._proc = None
        if self._profile:
            shutil.rmtree(self._profile, ignore_errors=True)
            self._profile = None

    # -- protocol -----------------------------------------------------------------------------------
    def send(self, method: str, params: dict[str, Any] | None = None, *, timeout: float = 60.0) -> dict[str, Any]:
        if self._ws is None:
            raise BrowserError("chromium is not running")
        msg_id = next(self._ids)
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = json.loads(self._ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise BrowserError(f"{method}: {msg['error'].get('message')}")
                return dict(msg.get("result") or {})
            self._note_event(msg)
        raise BrowserError(f"{method}: no answer within {timeout:.0f}s")

    def _note_event(self, msg: dict[str, Any]) -> None:
        if msg.get("method") == "Runtime.consoleAPICalled":
            args = msg["params"].get("args", [])
            self.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in args))
        elif msg.get("method") == "Runtime.exceptionThrown":
            details = msg["params"].get("exceptionDetails", {})
            self.console.append("exception: " + str(details.get("exception", {}).get("description") or details.get("text")))
        self._events.append(msg)

    def wait_event(self, method: str, *, timeout: float = 30.0) -> dict[str, Any]:
        for i, ev in enumerate(self._events):
            if ev.get("method") == method:
                return dict(self._events.pop(i).get("params") or {})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = json.loads(self._ws.recv())
            if msg.get("method") == method:
                return dict(msg.get("params") or {})
            self._note_event(msg)
        raise BrowserError(f"no {method} within {timeout:.0f}s")

    # -- conveniences -------------------------------------------------------------------------------
    def open(self, url: str, *, ready: str | None = "document.body && document.body.dataset.ready === '1'",
             timeout: float = 30.0) -> None:
        self._events.clear()
        result = self.send("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise BrowserError(f"cannot open {url}: {result['errorText']}")
        self.wait_event("Page.loadEventFired", timeout=timeout)
        if ready:
            deadline = time.monotonic() + timeout
            while not self.evaluate(f"!!({ready})"):
                if time.monotonic() > deadline:
                    raise BrowserError(f"{url}: page never became ready ({'; '.join(self.console) or 'no console output'})")
                time.sleep(0.05)

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"page script failed: {text}")
        return result.get("result", {}).get("value")

    def screenshot(self, path: Path, *, full_page: bool = True) -> tuple[int, int]:
        """Write a PNG of the page; returns its (width, height) in CSS pixels."""
        width, height = self.width, self.height
        if full_page:
            metrics = self.send("Page.getLayoutMetrics")
            size = metrics.get("cssContentSize") or metrics.get("contentSize") or {}
            height = max(height, int(size.get("height", height)))
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        shot = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        data = base64.b64decode(shot["data"])
        atomic_write_bytes(path, data)
        self.send("Emulation.clearDeviceMetricsOverride")
        return width, height


def screenshot_file(html: Path, png: Path, *, width: int = 1400, max_height: int | None = None,
                    suffix: str = "") -> tuple[int, int]:
    """Open a report file in headless Chromium and save a full-page screenshot of it. ``suffix`` is appended
    to the file's URL (a query and/or a #fragment)."""
    with Chromium(width=width) as browser:
        browser.open(html.resolve().as_uri() + suffix)
        if max_height:
            browser.height = max_height
            return browser.screenshot(png, full_page=False)
        return browser.screenshot(png)
