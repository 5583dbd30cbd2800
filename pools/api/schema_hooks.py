"""drf-spectacular post-processing: what every operation can answer, said once.

Every write operation parses its body with the project's parsers (JSON, YAML, forms); a body
whose media type is unsupported or whose multipart framing is broken is refused with 415 in the
API's error shape, and one over the request limit (DATA_UPLOAD_MAX_MEMORY_SIZE) with 413.
Declaring that per view was easy to forget (schemathesis found one missing), so these hooks add
it to every operation that takes a request body; and 400 to every operation with query
parameters, since one given twice is refused on every endpoint (pools/api/errors.py).
"""

from __future__ import annotations

UNSUPPORTED_MEDIA_TYPE = {
    "description": "Unsupported or malformed request media type",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}

REQUEST_TOO_LARGE = {
    "description": "Request body larger than the request limit (2 MiB by default)",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}


BAD_QUERY = {
    "description": "Invalid input: a query parameter given more than once, or a value it does not take",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}


def _declare(result, status: str, response: dict, applies=lambda operation: "requestBody" in operation):
    for path in result.get("paths", {}).values():
        for operation in path.values():
            if isinstance(operation, dict) and applies(operation):
                operation.setdefault("responses", {}).setdefault(status, response)
    return result


def declare_unsupported_media_type(result, generator, request, public):
    return _declare(result, "415", UNSUPPORTED_MEDIA_TYPE)


def declare_request_too_large(result, generator, request, public):
    return _declare(result, "413", REQUEST_TOO_LARGE)


def declare_bad_query(result, generator, request, public):
    return _declare(result, "400", BAD_QUERY, lambda operation: any(p.get("in") == "query" for p in operation.get("parameters", [])))
