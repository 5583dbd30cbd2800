"""One error shape for the whole API: `{"errors": [{"field": "spec.nodeCount.min", "message": ...}]}`.

Domain errors map to their HTTP status here and nowhere else: ValidationError 400, PermissionDenied
403, missing (or another team's) object 404, ConflictError 409, a body over the request limit 413,
Unavailable (a real cluster's API server away) 503.
Every error answer under /api/ has that shape, in JSON whatever the client's Accept header says,
including those Django gives before or around DRF: its 400/403/404/500 handlers and its CSRF
failure view below (elsewhere: the site's own pages, pools/views/errors.py), and `ApiErrorsMiddleware` for anything else (a library's HTML page, Django's
DEBUG pages).
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from pools.api.parsers import too_large_message
from pools.core.errors import ConflictError, Unavailable, ValidationError
from pools.views import errors as pages

API_PREFIX = "/api/"


def _flatten(detail: Any, prefix: str = "") -> list[dict[str, str]]:
    if isinstance(detail, dict):
        items: list[dict[str, str]] = []
        for key, value in detail.items():
            field = "" if key in ("non_field_errors", "detail") else (f"{prefix}.{key}" if prefix else str(key))
            items.extend(_flatten(value, field or prefix))
        return items
    if isinstance(detail, list):
        items = []
        for index, value in enumerate(detail):
            if isinstance(value, dict | list) and not all(isinstance(v, str) for v in value):
                items.extend(_flatten(value, f"{prefix}[{index}]"))
            else:
                items.extend(_flatten(value, prefix))
        return items
    return [{"field": prefix, "message": str(detail)}]


def error_response(status_code: int, message: str, field: str = "") -> Response:
    return Response({"errors": [{"field": field, "message": message}]}, status=status_code)


def _as_json(context) -> None:
    """Errors are JSON whatever the Accept header asked for (the browsable API, Swagger UI's
    HTML renderer)."""
    request = context.get("request")
    if request is not None:
        request.accepted_renderer, request.accepted_media_type = JSONRenderer(), JSONRenderer.media_type


def exception_handler(exc, context):
    response = _domain_response(exc)
    if response is None:
        response = drf_exception_handler(exc, context)
        if response is None:
            return None
        if isinstance(exc, exceptions.APIException):
            response.data = {"errors": _flatten(exc.detail)}
    _as_json(context)
    return response


def _domain_response(exc) -> Response | None:
    if isinstance(exc, ValidationError):
        return Response(
            {"errors": [{"field": e.field, "message": e.message} for e in exc.errors]},
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, ConflictError):
        return error_response(status.HTTP_409_CONFLICT, str(exc))
    if isinstance(exc, Unavailable):
        return error_response(status.HTTP_503_SERVICE_UNAVAILABLE, str(exc))
    if isinstance(exc, Http404):
        return error_response(status.HTTP_404_NOT_FOUND, str(exc) or "not found")
    if isinstance(exc, PermissionDenied):
        return error_response(status.HTTP_403_FORBIDDEN, str(exc) or "permission denied")
    if isinstance(exc, RequestDataTooBig):  # Django's limit, met while parsing form data
        return error_response(status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, too_large_message())
    if isinstance(exc, SuspiciousOperation):  # too many form fields or files, a broken multipart body
        return error_response(status.HTTP_400_BAD_REQUEST, "malformed request")
    return None


# --- Django's handlers and middleware: the same shape under /api/, Django's pages elsewhere -----


def is_api(request) -> bool:
    return request.path.startswith(API_PREFIX)


def api_error(status_code: int, message: str, field: str = "") -> JsonResponse:
    return JsonResponse({"errors": [{"field": field, "message": message}]}, status=status_code)


def bad_request(request, exception=None):
    if not is_api(request):
        return pages.bad_request_page(request, exception)
    if isinstance(exception, RequestDataTooBig):
        return api_error(413, too_large_message())
    return api_error(400, "malformed request")


def permission_denied(request, exception=None):
    if not is_api(request):
        return pages.permission_denied_page(request, exception)
    return api_error(403, str(exception or "") or "permission denied")


def not_found(request, exception=None):
    """Django's 404 handler: JSON in the API's shape under /api/, the site's page elsewhere."""
    if is_api(request):
        return api_error(404, f"no such endpoint: {request.path}")
    return pages.not_found_page(request, exception)


def server_error(request):
    if not is_api(request):
        return pages.server_error_page(request)
    return api_error(500, "internal server error")


def csrf_failure(request, reason=""):
    """CSRF_FAILURE_VIEW (DRF's session authentication answers its own CSRF 403 in this shape)."""
    if not is_api(request):
        return pages.csrf_failure_page(request, reason)
    return api_error(403, f"CSRF verification failed: {reason}" if reason else "CSRF verification failed")


class ApiErrorsMiddleware:
    """Under /api/: a body declared larger than `DATA_UPLOAD_MAX_MEMORY_SIZE` is answered 413
    before anything reads it (authenticated or not, whatever the endpoint and content type); a
    query parameter given more than once is a 400 naming it (`repeated_params`); and an error
    answer that is not in the API's shape (a page from Django's DEBUG views, a library's,
    django-axes' lockout) is given that shape, keeping its status and headers."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not is_api(request):
            return self.get_response(request)
        if (declared_length(request) or 0) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            return api_error(413, too_large_message())
        if repeated := repeated_params(request.GET):
            return JsonResponse({"errors": [{"field": name, "message": REPEATED} for name in repeated]}, status=400)
        response = self.get_response(request)
        if response.status_code >= 400 and not response.streaming and not _in_shape(response):
            response.content = json.dumps({"errors": [{"field": "", "message": _phrase(response.status_code)}]}).encode()
            response["Content-Type"] = "application/json"
            if response.has_header("Content-Length"):  # set for the body replaced (CommonMiddleware runs inside this one)
                response["Content-Length"] = str(len(response.content))
        return response


REPEATED = "given more than once: give it once"


def repeated_params(params) -> list[str]:
    """The query parameters given more than once. Every parameter of the API takes one value
    (`by` lists its keys with commas), and Django's `QueryDict.get` silently kept the last:
    `?team=algorithm&team=inference` created the pool for inference, `?from=..&from=..` summed
    the costs of the second range. Checked here, once for every endpoint, rather than by each
    view's reading of its parameters."""
    return sorted(name for name, values in params.lists() if len(values) > 1)


def _phrase(status_code: int) -> str:
    try:
        return HTTPStatus(status_code).phrase.lower()
    except ValueError:
        return "error"


def declared_length(request) -> int | None:
    """The body size the request declares (0: none declared); None when the header is not a
    number, which each caller reads its own way (Django reads no body then)."""
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None


def _in_shape(response) -> bool:
    if not response.get("Content-Type", "").startswith("application/json"):
        return False
    try:
        errors = json.loads(response.content).get("errors")
    except (ValueError, AttributeError):
        return False
    return isinstance(errors, list) and bool(errors)
