"""The report page in Debian's chromium, driven by Playwright through ``executable_path`` (no browser download):
what the report tests read from the rendered page (boxes, computed styles, script state) and the pictures in
docs/. Chromium missing: skipped here, a failure in CI (.ci/apt-packages.txt installs it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from playwright.sync_api import sync_playwright

from conftest import ci_enabled
from pinmatrix.report.browser import find_chromium

READY = "document.body && document.body.dataset.ready === '1'"


def need_chromium() -> str:
    """The chromium to run; skips the test without one (fails it in CI)."""
    found = find_chromium()
    if found is None:
        if ci_enabled():  # any truthy $CI, not only "true"
            pytest.fail("chromium is required in CI (.ci/apt-packages.txt installs it)", pytrace=False)
        pytest.skip("chromium is not installed")
    return found


class Page:
    """A Playwright page with the verbs the report tests use, and the page's uncaught exceptions."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on("pageerror", lambda err: self.errors.append(str(err)))

    def evaluate(self, expression: str) -> Any:
        return self.page.evaluate(expression)

    def screenshot(self, clip: dict[str, float]) -> bytes:
        """A PNG of ``clip`` (x, y, width, height in CSS pixels), beyond the viewport too."""
        return bytes(self.page.screenshot(clip=clip, full_page=True))


@contextmanager
def report_page(url: str, *, width: int, height: int, mobile: bool = False) -> Iterator[Page]:
    """``url`` open in headless chromium at ``width`` x ``height`` (``mobile``: a phone's viewport, where the
    page's width=device-width applies), once its script said it is ready; no uncaught exception allowed."""
    executable = need_chromium()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable)
        try:
            page = Page(browser.new_page(viewport={"width": width, "height": height}, device_scale_factor=1,
                                         is_mobile=mobile))
            page.page.goto(url)
            page.page.wait_for_function(READY)
            yield page
            assert not page.errors, page.errors
        finally:
            browser.close()
