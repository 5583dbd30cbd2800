"""Request bodies, bounded before they are expensive: every JSON and YAML body of the API (the
auth token and the agent endpoints included) comes through here.

- A body is read up to its limit and no further: `EBCLOUD_MAX_SPEC_BYTES` for documents (400,
  as a YAML document always was), `DATA_UPLOAD_MAX_MEMORY_SIZE` for the agent API (413).
- Nesting deeper than `EBCLOUD_MAX_DOCUMENT_DEPTH` is refused (400, the field is the path down
  to where it was crossed) by a scan linear in the size before `json.loads` recurses
  (pools/core/nesting.py); YAML is bounded while it is read (pools/core/yaml_loading.py).
- A key given twice in one object or mapping is refused (400, the field is the key's path), as
  Kubernetes' strict field validation does, in the API's JSON (pools/core/json_loading.py) and
  YAML (pools/core/yaml_loading.py): the last one no longer wins in silence.
- `application/yaml` bodies, so `curl --data-binary @pool.yaml` works like JSON.
- `application/merge-patch+json` (RFC 7386, what `kubectl patch --type merge` sends) where a
  view takes merge patches (PATCH of a pool).
"""

from __future__ import annotations

from django.conf import settings
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import BaseParser, get_encoding
from rest_framework.parsers import JSONParser as DRFJSONParser
from rest_framework.utils import json

from pools.core.documents import load_yaml
from pools.core.json_loading import loads_unique_keys, refuse_lone_surrogates
from pools.core.nesting import json_check_depth


class RequestTooLarge(APIException):
    status_code = 413
    default_detail = "the request body is too large"
    default_code = "request_too_large"


def too_large_message() -> str:
    return f"the request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes"


def _read(stream, limit: int) -> bytes:
    return stream.read(limit + 1) if stream is not None else b""


class BodyJSONParser(DRFJSONParser):
    """DRF's JSON parser for bodies up to `DATA_UPLOAD_MAX_MEMORY_SIZE` (413 beyond), with the
    nesting checked before parsing."""

    def max_bytes(self) -> int:
        return settings.DATA_UPLOAD_MAX_MEMORY_SIZE

    def too_large(self, limit: int) -> APIException:
        return RequestTooLarge(too_large_message())

    def parse(self, stream, media_type=None, parser_context=None):
        limit = self.max_bytes()
        data = _read(stream, limit)
        if len(data) > limit:
            raise self.too_large(limit)
        try:
            text = data.decode(get_encoding(parser_context or {}))
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
        json_check_depth(text, max_depth=settings.EBCLOUD_MAX_DOCUMENT_DEPTH)
        try:
            return self.loads(text)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc

    def loads(self, text: str):
        document = json.loads(text, parse_constant=json.strict_constant if self.strict else None)
        refuse_lone_surrogates(text, document)  # `"\ud800"` is no text: a 500 where it was stored
        return document


class JSONParser(BodyJSONParser):
    """Documents (pools, pods, patches) and every other API body: at most
    `EBCLOUD_MAX_SPEC_BYTES`, refused like a YAML document over it (400), and no key twice in
    an object. (The agents' and kube-scheduler's bodies, BodyJSONParser, are written by
    programs' JSON encoders, and the agents' reports have a parser of their own.)"""

    def max_bytes(self) -> int:
        return settings.EBCLOUD_MAX_SPEC_BYTES

    def too_large(self, limit: int) -> APIException:
        return ParseError(f"the document is larger than {limit} bytes")

    def loads(self, text: str):
        return loads_unique_keys(text, parse_constant=json.strict_constant if self.strict else None)


class MergePatchJSONParser(JSONParser):
    """RFC 7386's media type: JSON, read as JSON; offered by the views whose PATCH applies a
    JSON merge patch, so `kubectl patch --type merge` is not a 415."""

    media_type = "application/merge-patch+json"


class YAMLParser(BaseParser):
    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.EBCLOUD_MAX_SPEC_BYTES
        return load_yaml(_read(stream, limit), max_bytes=limit, max_depth=settings.EBCLOUD_MAX_DOCUMENT_DEPTH)


class YAMLTextParser(YAMLParser):
    """The other media types people use for YAML."""

    media_type = "application/x-yaml"
