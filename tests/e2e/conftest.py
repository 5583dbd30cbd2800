"""Browser journeys (issue #8 item 2): Playwright's sync API driving Debian's chromium against
pytest-django's live server. Background work (reconcile, schedule, rollup, meter, repair) is
run in-process between browser steps by the journeys themselves, never by a worker."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connections

from tests.e2e.browser import Actor, CspWatch

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture
def chromium(monkeypatch):
    if not Path(CHROMIUM).exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium (.ci/run installs it)")
    sync_api = pytest.importorskip("playwright.sync_api")
    # Playwright's sync API runs an event loop in this thread; Django's ORM must still work here.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    csp = CspWatch()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        new_context, new_page = browser.new_context, browser.new_page
        browser.new_context = lambda **options: csp.watch(new_context(**options))
        browser.new_page = lambda **options: csp.watch(new_page(**options))
        browser.csp = csp
        try:
            yield browser
        finally:
            browser.close()
            # While Playwright's event loop runs in this thread, Django keeps this thread's
            # connections in a context variable (asgiref's Local), apart from the ones
            # pytest-django closes: close them here, or PostgreSQL refuses to drop the test
            # database at the end of the run ("being accessed by other users").
            connections.close_all()
    # Every page the test opened ran under the Content-Security-Policy; none may have broken it.
    assert not csp.violations, "Content-Security-Policy violations:\n" + "\n".join(csp.violations)


@pytest.fixture
def browse(chromium, live_server):
    """browse(username) -> a logged-in Actor with a browser context of its own. At the end of
    the journey, every page any actor landed on must have been checked by axe."""
    opened: list[Actor] = []

    def open_as(username: str) -> Actor:
        actor = Actor(chromium, live_server.url, username)
        opened.append(actor)
        actor.login()
        return actor

    yield open_as
    missed = {actor.username: actor.unaudited() for actor in opened if actor.unaudited()}
    for actor in opened:
        actor.close()
    assert not missed, f"pages visited without an axe check: {missed}"

