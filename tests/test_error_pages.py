"""The site's error pages (issue 21 acceptance item 7): 400, 403, 404, 500 and a refused CSRF
token use the site layout, say why in plain words and offer a way back; the API keeps its JSON
shape; the demo (`make run`) runs with DEBUG off, so Django's debug 404 listing the URL patterns
is never shown there."""

from __future__ import annotations

import re

import pytest
from django.test import Client, RequestFactory

from pools.views import errors as pages
from tests.conftest import ROOT

LAYOUT = '<header class="topbar">'
BACK_TO_POOLS = '<a class="button" href="/pools/">Go to the pool list</a>'


def test_an_unknown_address_is_a_404_in_the_site_layout_with_the_menu_and_a_way_back(browser):
    response = browser("lead").get("/no-such-page/", HTTP_REFERER="http://testserver/orders/")
    page = response.content.decode()
    assert response.status_code == 404
    assert LAYOUT in page and 'aria-label="Main"' in page and "<title>Not found · EBCloud</title>" in page
    assert "There is nothing at this address." in page
    assert '<a class="button" href="http://testserver/orders/">Back to the previous page</a>' in page
    assert "urlpatterns" not in page.lower() and "api/v1/" not in page  # never the URL list


def test_a_missing_object_says_which_one(browser):
    page = browser("lead").get("/pools/no-such-pool/").content.decode()
    assert "Pool &#x27;no-such-pool&#x27; not found" in page and BACK_TO_POOLS in page


def test_a_refusal_is_a_403_in_the_site_layout_with_the_reason_and_the_role(browser):
    response = browser("member").get("/pools/new/")
    page = response.content.decode()
    assert response.status_code == 403
    assert LAYOUT in page and "You are not allowed to do this" in page
    assert "Only team leads and platform admins can create pools" in page
    assert "signed in as member (member)" in page and BACK_TO_POOLS in page
    assert "Ask a lead of the team or a platform admin" in page


def test_a_lead_refused_is_not_told_to_ask_a_lead(browser, actors):
    """A lead read "Ask a lead of the team" (found by a QA sweep)."""
    page = browser("lead").get("/costs/budgets/teams/new/").content.decode()
    assert "Ask a platform admin if you need this." in page and "Ask a lead" not in page


def test_the_way_back_never_points_to_another_site(browser):
    page = browser("member").get("/pools/new/", HTTP_REFERER="https://evil.example/phish").content.decode()
    assert "evil.example" not in page and "Back to the previous page" not in page


def test_a_stale_form_is_a_403_page_that_says_nothing_changed(actors):
    client = Client(enforce_csrf_checks=True)
    client.force_login(actors["lead"])
    response = client.post("/pools/new/", {"name": "x"})
    page = response.content.decode()
    assert response.status_code == 403 and LAYOUT in page
    assert "The form could not be sent" in page and "Nothing was changed." in page


def test_the_500_page_needs_no_request_context_and_no_database(rf: RequestFactory):
    """No `db` fixture: pytest-django refuses any query, so the page rendering proves it makes none."""
    response = pages.server_error_page(rf.get("/pools/"))
    page = response.content.decode()
    assert response.status_code == 500 and LAYOUT in page and "Something went wrong on our side" in page
    assert 'aria-label="Main"' not in page  # no user known: no menu


def test_the_500_page_answers_even_when_its_template_cannot_be_rendered(rf: RequestFactory, settings, tmp_path):
    settings.TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "DIRS": [str(tmp_path)], "APP_DIRS": False}]
    response = pages.server_error_page(rf.get("/pools/"))
    assert response.status_code == 500 and "Something went wrong on our side" in response.content.decode()


def test_the_400_page_uses_the_site_layout_before_anyone_is_known(rf: RequestFactory):
    """A 400 can come before the authentication middleware ran (a bad Host header): no user."""
    response = pages.bad_request_page(rf.get("/pools/"))
    assert response.status_code == 400 and LAYOUT in response.content.decode()


@pytest.mark.parametrize("url", ["/api/v1/no-such-endpoint/", "/api/v1/pools/no-such-pool/"])
def test_the_api_keeps_its_json_error_shape(api, url):
    response = api("lead").get(url)
    assert response.status_code == 404 and response.json()["errors"][0]["message"]


def test_the_demo_runs_with_debug_off_over_plain_http():
    """`make run` exports DEBUG=false (Django's debug pages list every URL pattern) and the
    settings that a production-like process needs on 127.0.0.1 without TLS."""
    makefile = (ROOT / "Makefile").read_text()
    exported = dict(re.findall(r"^run: export (\w+) \?= (.*)$", makefile, flags=re.MULTILINE))
    assert exported["DEBUG"] == "false"
    assert exported["SECURE_SSL_REDIRECT"] == exported["SESSION_COOKIE_SECURE"] == exported["CSRF_COOKIE_SECURE"] == "false"
    assert "var/demo-secret-key" in exported["SECRET_KEY"]
    assert re.search(r"^run: .*var/static/staticfiles\.json", makefile, flags=re.MULTILINE)


def test_a_host_this_site_does_not_answer_to_is_a_400_page_not_a_500(db):
    response = Client(raise_request_exception=False).get("/pools/", HTTP_HOST="evil.example", HTTP_REFERER="http://evil.example/")
    assert response.status_code == 400 and LAYOUT in response.content.decode()
