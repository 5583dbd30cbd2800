"""The site's error pages: 400, 403, 404, 500 and a refused CSRF token, in the site layout,
with the reason in plain words and a way back (the page the user came from, and the pool list).

`pools.api.errors` sends every request outside /api/ here (the API answers in its JSON shape).
The 500 page is rendered without the request: its context processors read the session and the
database, which may be what failed; and if even the template fails, a short page in plain HTML
still answers.
"""

from __future__ import annotations

from django.core.exceptions import DisallowedHost
from django.http import HttpResponse
from django.template import loader
from django.urls import Resolver404
from django.utils.http import url_has_allowed_host_and_scheme

PLAIN_500 = (
    "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Server error · EBCloud</title></head>"
    "<body><main><h1>Something went wrong on our side</h1><p>The server failed while answering. "
    "Try again in a minute.</p><p><a href=\"/\">Go to the start page</a></p></main></body></html>"
)


def _back_url(request) -> str:
    """The page the user came from, if it is on this site and not this very page."""
    referer = request.META.get("HTTP_REFERER", "")
    if not referer:
        return ""
    try:
        host, here = request.get_host(), request.build_absolute_uri()
    except DisallowedHost:  # the 400 for a Host header this site does not answer to
        return ""
    safe = referer != here and url_has_allowed_host_and_scheme(referer, allowed_hosts={host}, require_https=request.is_secure())
    return referer if safe else ""


def _message(exception) -> str:
    """The exception's own message when it is one sentence of ours (our Http404 and
    PermissionDenied carry one), never the URL resolver's internals."""
    if exception is None or isinstance(exception, Resolver404):
        return ""
    args = getattr(exception, "args", ())
    message = args[0] if args else ""
    if not isinstance(message, str):
        return ""
    message = message.strip()
    return message[:1].upper() + message[1:] if message else ""


def _page(request, template: str, status: int, reason: str = "") -> HttpResponse:
    """With the request (the menu, the user's role) once the authentication middleware has run;
    a 400 for a bad Host header, for one, comes before it and gets the page without them."""
    context = {"status": status, "reason": reason, "back_url": _back_url(request)}
    with_request = request if hasattr(request, "user") else None
    return HttpResponse(loader.render_to_string(template, context, request=with_request), status=status)


def bad_request_page(request, exception=None) -> HttpResponse:
    return _page(request, "400.html", 400)


def permission_denied_page(request, exception=None) -> HttpResponse:
    return _page(request, "403.html", 403, _message(exception))


def not_found_page(request, exception=None) -> HttpResponse:
    return _page(request, "404.html", 404, _message(exception))


def csrf_failure_page(request, reason: str = "") -> HttpResponse:
    """The CSRF failure view's page outside the API (Django's reason is for developers)."""
    return _page(request, "403_csrf.html", 403)


def server_error_page(request) -> HttpResponse:
    try:
        body = loader.render_to_string("500.html", {"status": 500})
    except Exception:  # noqa: BLE001 - the error page must answer whatever broke
        body = PLAIN_500
    return HttpResponse(body, status=500)
