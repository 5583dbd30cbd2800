"""drf-spectacular post-processing: what every operation can answer, said once.

Every write operation parses its body with the project's parsers (JSON, YAML, forms); a body
whose media type is unsupported or whose multipart framing is broken is refused with 415 in the
API's error shape. Declaring that per view was easy to forget (schemathesis found one missing),
so this hook adds it to every operation that takes a request body.
"""

from __future__ import annotations

UNSUPPORTED_MEDIA_TYPE = {
    "description": "Unsupported or malformed request media type",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}


def declare_unsupported_media_type(result, generator, request, public):
    for path in result.get("paths", {}).values():
        for operation in path.values():
            if isinstance(operation, dict) and "requestBody" in operation:
                operation.setdefault("responses", {}).setdefault("415", UNSUPPORTED_MEDIA_TYPE)
    return result
