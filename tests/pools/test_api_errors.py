"""Every error under /api/ has the API's JSON shape, `{"errors": [{"field", "message"}]}`, with
its status (issue "No 500 and no stalled agent on hostile input", item 3): DRF's own errors
whatever the Accept header, and those Django answers before or around DRF (an unknown path, a
bad Host, a CSRF failure, its 400/403/404/500 handlers, DEBUG's technical pages, django-axes'
lockout). Elsewhere Django's HTML pages stay. A body over the request limit (413) is
tests/test_bad_input_depth.py.
"""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.http import HttpResponse, StreamingHttpResponse
from django.test import RequestFactory, override_settings
from django.urls import get_resolver

from config import urls
from pools.api import errors

pytestmark = pytest.mark.django_db


def shaped(response, status: int) -> str:
    """The one error's message, after checking the status, the content type and the shape."""
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = json.loads(response.content)
    assert set(body) == {"errors"} and len(body["errors"]) == 1, body
    (error,) = body["errors"]
    assert set(error) == {"field", "message"} and error["message"], error
    return error["message"]


def test_an_unknown_api_path_is_a_404_in_the_shape(client):
    assert shaped(client.get("/api/v1/nothing-here/"), 404) == "no such endpoint: /api/v1/nothing-here/"
    assert shaped(client.post("/api/agent/v2/reports/", {}), 404).startswith("no such endpoint")


def test_an_unknown_web_path_keeps_the_html_page(client):
    response = client.get("/nothing-here/")
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")


@pytest.mark.parametrize("accept", ["application/json", "text/html", "*/*"])
def test_a_wrong_method_is_a_405_in_the_shape_whatever_the_client_accepts(client, actors, accept):
    client.force_login(actors["lead"])
    assert "not allowed" in shaped(client.put("/api/v1/pools/", {}, content_type="application/json", HTTP_ACCEPT=accept), 405)


def test_an_endpoint_that_renders_json_only_says_so_in_the_shape(client):
    assert "not allowed" in shaped(client.get("/api/v1/auth/token/"), 405)
    assert "Accept header" in shaped(client.get("/api/v1/auth/token/", HTTP_ACCEPT="text/html"), 406)


def test_the_html_docs_page_answers_its_errors_in_the_shape_too(client):
    assert "not allowed" in shaped(client.delete("/api/docs/", HTTP_ACCEPT="text/html"), 405)
    assert "Accept header" in shaped(client.get("/api/docs/", HTTP_ACCEPT="application/json"), 406)


def test_drf_errors_are_json_for_a_browser_asking_for_html(client, actors):
    assert shaped(client.get("/api/v1/pools/", HTTP_ACCEPT="text/html"), 401)
    client.force_login(actors["lead"])
    assert shaped(client.get("/api/v1/pools/no-such-pool/", HTTP_ACCEPT="text/html"), 404)


def test_session_auth_without_the_csrf_token_is_a_403_in_the_shape(actors):
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(actors["lead"])
    assert "CSRF" in shaped(browser.post("/api/v1/pools/", {}, content_type="application/json"), 403)


def test_a_bad_host_is_a_400_in_the_shape(client):
    assert shaped(client.get("/api/v1/pools/", HTTP_HOST="evil.example"), 400) == "malformed request"
    page = client.get("/pools/", HTTP_HOST="evil.example")
    assert page.status_code == 400 and page["Content-Type"].startswith("text/html")


def test_djangos_error_views_are_the_api_handlers():
    resolver = get_resolver()
    assert [resolver.resolve_error_handler(code) for code in (400, 403, 404, 500)] == [
        errors.bad_request, errors.permission_denied, errors.not_found, errors.server_error]  # fmt: skip
    assert urls.handler500 == "pools.api.errors.server_error"


@pytest.mark.parametrize(("handler", "exception", "status", "message"), [
    (errors.bad_request, RequestDataTooBig("too big"), 413, "the request body is larger than 2097152 bytes"),
    (errors.bad_request, SuspiciousOperation("Invalid HTTP_HOST header: 'evil'"), 400, "malformed request"),
    (errors.permission_denied, PermissionDenied("only platform admins"), 403, "only platform admins"),
    (errors.not_found, None, 404, "no such endpoint: /api/v1/x/"),
    (errors.server_error, None, 500, "internal server error"),
])  # fmt: skip
def test_each_django_handler_answers_in_the_shape_under_api(handler, exception, status, message):
    request = RequestFactory().get("/api/v1/x/")
    response = handler(request) if handler is errors.server_error else handler(request, exception)
    assert shaped(response, status) == message


@pytest.mark.parametrize(("handler", "status"), [
    (errors.bad_request, 400), (errors.permission_denied, 403), (errors.not_found, 404), (errors.server_error, 500),
])  # fmt: skip
def test_each_django_handler_keeps_its_html_page_elsewhere(handler, status):
    request = RequestFactory().get("/pools/x/")
    response = handler(request) if handler is errors.server_error else handler(request, Exception("x"))
    assert response.status_code == status and response["Content-Type"].startswith("text/html")


def test_a_csrf_failure_is_a_403_in_the_shape_under_api_and_djangos_page_elsewhere(settings):
    assert settings.CSRF_FAILURE_VIEW == "pools.api.errors.csrf_failure"
    api = errors.csrf_failure(RequestFactory().post("/api/v1/pools/"), reason="CSRF cookie not set.")
    assert shaped(api, 403) == "CSRF verification failed: CSRF cookie not set."
    page = errors.csrf_failure(RequestFactory().post("/pools/new/"), reason="CSRF cookie not set.")
    assert page.status_code == 403 and b"CSRF" in page.content and page["Content-Type"].startswith("text/html")


def test_with_debug_on_djangos_technical_pages_become_the_shape_under_api(client, settings):
    settings.DEBUG = True
    assert shaped(client.get("/api/v1/nothing-here/"), 404) == "not found"
    assert shaped(client.get("/api/v1/pools/", HTTP_HOST="evil.example"), 400) == "bad request"


@override_settings(AXES_FAILURE_LIMIT=2)
def test_a_locked_out_token_request_is_a_429_in_the_shape(client, actors):
    assert client.post("/api/v1/auth/token/", {"username": "lead", "password": "wrong"}).status_code == 400
    assert shaped(client.post("/api/v1/auth/token/", {"username": "lead", "password": "wrong"}), 429) == "too many requests"
    assert shaped(client.post("/api/v1/auth/token/", {"username": "lead", "password": "pw-lead"}), 429) == "too many requests"


def _middleware(response):
    return errors.ApiErrorsMiddleware(lambda request: response)


def test_the_middleware_reshapes_a_foreign_error_page_and_keeps_its_status_and_headers():
    page = HttpResponse("<h1>Service Unavailable</h1>", status=503, headers={"Retry-After": "30"})
    response = _middleware(page)(RequestFactory().get("/api/v1/pools/"))
    assert shaped(response, 503) == "service unavailable" and response["Retry-After"] == "30"


@pytest.mark.parametrize(("path", "response"), [
    ("/api/v1/pools/", HttpResponse('{"errors": [{"field": "spec", "message": "x"}]}', status=400, content_type="application/json")),
    ("/api/v1/pools/", HttpResponse("ok", status=200)),
    ("/api/v1/costs/", StreamingHttpResponse(iter([b"a"]), status=500)),
    ("/pools/", HttpResponse("<h1>Not Found</h1>", status=404)),
])  # fmt: skip
def test_the_middleware_leaves_alone_what_is_in_shape_a_success_a_stream_and_the_web(path, response):
    before = response.getvalue() if not response.streaming else None
    after = _middleware(response)(RequestFactory().get(path))
    assert after is response and (response.streaming or response.getvalue() == before)


@pytest.mark.parametrize("length", ["abc", "-5", ""])
def test_a_malformed_content_length_is_not_a_413(length):
    request = RequestFactory().post("/api/v1/pools/", b"{}", content_type="application/json", CONTENT_LENGTH=length)
    assert _middleware(HttpResponse("ok"))(request).status_code == 200
