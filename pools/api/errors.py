"""One error shape for the whole API: `{"errors": [{"field": "spec.nodeCount.min", "message": ...}]}`.

Domain errors map to their HTTP status here and nowhere else: ValidationError 400, PermissionDenied
403, missing (or another team's) object 404, ConflictError 409.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from django.views.defaults import page_not_found
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from pools.core.errors import ConflictError, ValidationError


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


def exception_handler(exc, context):
    if isinstance(exc, ValidationError):
        return Response(
            {"errors": [{"field": e.field, "message": e.message} for e in exc.errors]},
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, ConflictError):
        return error_response(status.HTTP_409_CONFLICT, str(exc))
    if isinstance(exc, Http404):
        return error_response(status.HTTP_404_NOT_FOUND, str(exc) or "not found")
    if isinstance(exc, PermissionDenied):
        return error_response(status.HTTP_403_FORBIDDEN, str(exc) or "permission denied")
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.APIException):
        response.data = {"errors": _flatten(exc.detail)}
    return response


def not_found(request, exception=None):
    """Django's 404 handler: JSON in the API's shape under /api/, the HTML page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"errors": [{"field": "", "message": f"no such endpoint: {request.path}"}]}, status=404)
    return page_not_found(request, exception)
