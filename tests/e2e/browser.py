"""One user's browser in a journey: a Playwright context of its own (its own session cookie),
with every page it lands on checked by axe and, when `EBCLOUD_SCREENSHOTS_DIR` is set, the
key steps saved as PNGs for the role guides in docs/.

`Actor.visited` records every main-frame navigation (page loads and htmx history pushes);
`Actor.audited` the URLs axe checked. The `actors_browser` fixture asserts at the end of each
journey that the two agree, so no page of a journey escapes the accessibility check.
`CspWatch` collects Content-Security-Policy violations from the console; the `chromium` fixture
watches every context and page it opens and fails the test that caused one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from tests.e2e.axe import assert_accessible

# What Chromium writes to the console when the Content-Security-Policy refuses something
# ("Executing inline script violates the following Content Security Policy directive ...";
# older versions: "Refused to execute inline script because it violates ...").
CSP_MARKERS = ("Content Security Policy", "Refused to")
VIEWPORT = {"width": 1280, "height": 800}
TIMEOUT_MS = 15_000
# No htmx request in flight and no swap settling.
SETTLED = "() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')"


class CspWatch:
    """Collects the Content-Security-Policy violations that every page of the browser contexts
    it watches reports in its console (config/csp.py sends the policy on every response)."""

    def __init__(self):
        self.violations: list[str] = []

    def watch(self, target):
        """A BrowserContext (all its pages) or a Page; returns it."""
        target.on("console", self._console)
        return target

    def _console(self, message) -> None:
        if any(marker in message.text for marker in CSP_MARKERS):
            self.violations.append(f"{message.location.get('url', '')}: {message.text}")


def screenshots_dir() -> Path | None:
    value = os.environ.get("EBCLOUD_SCREENSHOTS_DIR", "")
    if not value:
        return None
    path = Path(value)
    path.mkdir(parents=True, exist_ok=True)
    return path


class Actor:
    def __init__(self, browser, base_url: str, username: str):
        self.base_url = base_url
        self.username = username
        self.context = browser.new_context(viewport=VIEWPORT, accept_downloads=True)
        self.context.set_default_timeout(TIMEOUT_MS)
        self.page = self.context.new_page()
        self.visited: list[str] = []
        self.audited: set[str] = set()
        self.page.on("framenavigated", self._navigated)

    def _navigated(self, frame) -> None:
        if frame == self.page.main_frame:
            self.visited.append(frame.url)

    # -- navigation: every method that lands on a page ends with `landed()` ---------------------

    def landed(self) -> None:
        """The page is loaded: check it with axe (fails the journey on critical/serious)."""
        self.page.wait_for_load_state("load")
        assert_accessible(self.page)
        self.audited.add(self.page.url)

    def goto(self, path: str) -> None:
        response = self.page.goto(self.base_url + path)
        assert response is not None and response.ok, f"GET {path}: {response and response.status}"
        self.landed()

    def follow(self, selector: str) -> None:
        """Click something that loads a new page (link, submit button) and check that page."""
        with self.page.expect_navigation():
            self.page.click(selector)
        self.landed()

    def swap(self, action: Callable[[], None]) -> None:
        """Do something that makes htmx replace part of the page (a filter change, a sort, an
        added form row); wait for the swap to settle and check the changed page."""
        with self.page.expect_response(
            lambda response: response.request.headers.get("hx-request") == "true"
        ):
            action()
        self.page.wait_for_function(SETTLED)
        self.landed()

    def reload(self) -> None:
        """Load the current URL again with a GET (never re-sends a form the page came from)."""
        self.goto(self.page.url.removeprefix(self.base_url))

    def login(self) -> None:
        self.goto("/login/")
        self.page.fill("#id_username", self.username)
        self.page.fill("#id_password", "pw-" + self.username)
        self.follow("main button[type=submit]")
        assert "/login/" not in self.page.url, f"{self.username} could not log in"

    # -- evidence ----------------------------------------------------------------------------

    def shot(self, name: str, *, full_page: bool = False, element: str = "") -> None:
        """Save `<name>.png` for the docs when EBCLOUD_SCREENSHOTS_DIR is set: the viewport,
        the whole page, or one element (a section of a long page)."""
        where = screenshots_dir()
        if where is None:
            return
        path = str(where / f"{name}.png")
        if element:
            self.page.locator(element).first.screenshot(path=path)
        else:
            self.page.screenshot(path=path, full_page=full_page)

    def unaudited(self) -> list[str]:
        return [url for url in self.visited if url not in self.audited and url != "about:blank"]

    def close(self) -> None:
        self.context.close()
