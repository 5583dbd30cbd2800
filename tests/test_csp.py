"""The Content-Security-Policy (issue "No 500 and no stalled agent on hostile input", item 7):
sent on every response (config/csp.py), DEBUG on or off; scripts and styles from the site's own
static files only, no inline script, no inline style attribute; and no page the product renders
holds what that policy would refuse. The browser journeys (tests/e2e) run under the policy and
fail on any violation Chromium reports; this is the check without a browser.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.http import HttpResponse
from django.test import RequestFactory

from config.csp import ContentSecurityPolicyMiddleware
from pools.models import Node
from tests.pools.pod_helpers import pool_with_nodes, submit

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = sorted(ROOT.glob("templates/**/*.html")) + sorted(ROOT.glob("*/templates/**/*.html"))
pytestmark = pytest.mark.django_db


def policy(response) -> dict[str, list[str]]:
    directives = [d.split() for d in response["Content-Security-Policy"].split(";")]
    return {d[0]: d[1:] for d in directives if d}


def test_every_response_carries_the_policy(client, actors, settings):
    responses = [client.get("/login/"), client.get("/api/v1/pools/"), client.get("/nothing-here/"),
                 client.get("/static/css/app.css")]  # fmt: skip
    client.force_login(actors["lead"])
    responses += [client.get("/pools/"), client.get("/api/v1/pools/")]
    for response in responses:
        assert response["Content-Security-Policy"] == settings.EBCLOUD_CONTENT_SECURITY_POLICY


def test_scripts_and_styles_come_from_the_site_only(client):
    directives = policy(client.get("/login/"))
    assert directives["script-src"] == ["'self'"]
    assert directives["style-src"][0] == "'self'"
    # plotly's two injected <style> elements, by the hash of their text: no 'unsafe-*' anywhere
    assert all(source.startswith("'sha256-") for source in directives["style-src"][1:])
    assert not any("unsafe" in source for sources in directives.values() for source in sources)
    assert directives["object-src"] == ["'none'"] and directives["frame-ancestors"] == ["'none'"]
    assert directives["default-src"] == ["'self'"] and directives["base-uri"] == ["'self'"]


def test_the_policy_is_sent_with_debug_on_as_well(client, settings):
    settings.DEBUG = True
    assert "script-src 'self'" in client.get("/login/")["Content-Security-Policy"]


def test_the_operator_may_replace_the_policy_or_send_none(client, settings):
    settings.EBCLOUD_CONTENT_SECURITY_POLICY = "default-src 'none'"
    assert client.get("/login/")["Content-Security-Policy"] == "default-src 'none'"
    settings.EBCLOUD_CONTENT_SECURITY_POLICY = ""
    assert "Content-Security-Policy" not in client.get("/login/")


def test_a_response_with_its_own_policy_keeps_it():
    own = HttpResponse("x", headers={"Content-Security-Policy": "sandbox"})
    assert ContentSecurityPolicyMiddleware(lambda request: own)(RequestFactory().get("/"))["Content-Security-Policy"] == "sandbox"


# --- what the policy refuses is nowhere in the pages ----------------------------------------------


class InlineFinder(HTMLParser):
    """Inline scripts (a <script> without src that a browser would run), event handler
    attributes, `javascript:` URLs, style attributes and <style> elements."""

    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "script" and "src" not in attributes and attributes.get("type") != "application/json":
            self.found.append(f"inline <script {attributes}>")
        if tag == "style":
            self.found.append("<style> element")
        for name, value in attrs:
            if name.startswith("on"):
                self.found.append(f"<{tag} {name}=...> handler")
            if name == "style":
                self.found.append(f"<{tag} style={value!r}>")
            if name in ("href", "src", "action", "formaction") and (value or "").strip().lower().startswith("javascript:"):
                self.found.append(f"<{tag} {name}={value!r}>")


def inline_parts(html: str) -> list[str]:
    finder = InlineFinder()
    finder.feed(html)
    return finder.found


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_template_holds_inline_script_or_style(template):
    text = re.sub(r"{#.*?#}|{% comment %}.*?{% endcomment %}", "", template.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert not inline_parts(text), inline_parts(text)


@pytest.fixture
def world(actors):
    pool = pool_with_nodes(actors["lead"], node_labels={"pool": "train"})
    submit(actors["member"], "p0", gpus=2)
    return {"pool": pool, "node": Node.objects.filter(pool=pool).order_by("name").first()}


def pages(world) -> list[str]:
    pool, node = world["pool"].name, world["node"].name
    return [
        "/pools/", "/pools/new/", "/pools/new/row/?kind=taint", "/pools/import/", f"/pools/{pool}/", f"/pools/{pool}/charts/",
        f"/pools/{pool}/edit/", f"/pools/{pool}/delete/", f"/pools/{pool}/nodes/{node}/", f"/pools/{pool}/fragmentation/",
        f"/pools/{pool}/diagnose/", "/orders/", "/audit/", "/pods/", "/pods/new/", "/pods/algorithm/p0/", "/fragmentation/",
        "/costs/", "/costs/budgets/", "/monitoring/", "/api/docs/", "/pools/no-such-pool/",
    ]  # fmt: skip


def test_no_page_the_product_renders_holds_inline_script_or_style(client, actors, world):
    client.get("/login/")  # and the login page, before logging in
    client.force_login(actors["admin"])
    problems = {}
    for url in ["/login/", *pages(world)]:
        response = client.get(url)
        assert response.status_code in (200, 404), (url, response.status_code)
        if response["Content-Type"].startswith("text/html") and inline_parts(response.content.decode()):
            problems[url] = inline_parts(response.content.decode())
    assert not problems, problems


def test_the_operator_guide_shows_the_policy_that_is_sent(settings):
    guide = (ROOT / "docs" / "operator.md").read_text(encoding="utf-8")
    section = guide[guide.index("### Content-Security-Policy"):]
    shown = section.split("```")[1].strip()
    assert shown == settings.EBCLOUD_CONTENT_SECURITY_POLICY
